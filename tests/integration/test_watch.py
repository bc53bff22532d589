"""JournalWatcher and ChangeFeed with real files, real processes and real file events.

Every watcher case runs on both mechanisms: inotify on the event loop (the default on Linux)
and watchfiles (the default elsewhere).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sys
from pathlib import Path

import pytest

from store.errors import StorageError
from store.journal.sqlite import Change, Journal
from store.journal.watch import ChangeFeed, JournalWatcher

COMMIT = """
import sys
from store.journal.sqlite import Change, Journal
path, key = sys.argv[1], sys.argv[2]
with Journal.open(path) as j:
    j.execute(command_id="c:" + key, payload={"k": key}, expected={"goal:" + key: None},
              decide=lambda loaded: [Change("goal:" + key, {"status": "queued"},
                                            [("goal.created", {"k": key})])])
"""


async def commit_in_process(path: Path, key: str) -> None:
    """Commit one event from another process, as a worker or the CLI would."""
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", COMMIT, str(path), key)
    assert await proc.wait() == 0


def commit_here(path: Path, key: str) -> None:
    with Journal.open(path) as j:
        j.execute(
            command_id="c:" + key,
            payload={"k": key},
            expected={"goal:" + key: None},
            decide=lambda loaded: [
                Change("goal:" + key, {"status": "queued"}, [("goal.created", {"k": key})])
            ],
        )


async def next_batch(it, timeout: float = 5.0) -> None:
    await asyncio.wait_for(it.__anext__(), timeout)


async def feed_until(feed: ChangeFeed, it, count: int, timeout: float = 15.0) -> list:
    """Wait for wake-ups until the feed has delivered ``count`` events."""
    got: list = []
    deadline = asyncio.get_running_loop().time() + timeout
    while len(got) < count:
        remaining = deadline - asyncio.get_running_loop().time()
        assert remaining > 0, f"only {len(got)} of {count} events arrived"
        await next_batch(it, remaining)
        with contextlib.suppress(StorageError):
            got += feed.poll()
    return got


@pytest.fixture(params=["inotify", "watchfiles"])
def mechanism(request: pytest.FixtureRequest) -> bool:
    """``use_inotify`` for the watcher under test."""
    if request.param == "inotify" and not sys.platform.startswith("linux"):
        pytest.skip("inotify is Linux's")
    return bool(request.param == "inotify")


@pytest.fixture
def journal_path(tmp_path: Path) -> Path:
    path = tmp_path / "j" / "journal.db"
    Journal.open(path).close()
    return path


async def test_commit_by_another_process_reaches_the_feed(
    journal_path: Path, mechanism: bool
) -> None:
    feed = ChangeFeed(journal_path)
    assert feed.poll() == []
    watcher = JournalWatcher(journal_path, poll_interval_s=30, use_inotify=mechanism)
    it = aiter(watcher)
    task = asyncio.ensure_future(next_batch(it))
    await asyncio.sleep(0.2)  # let the watcher start
    await commit_in_process(journal_path, "a")
    await task  # a real file event, not the (30 s) poll
    events = feed.poll()
    assert [e.aggregate_id for e in events] == ["goal:a"]
    assert feed.last_sequence == events[-1].sequence
    assert feed.poll() == []  # data_version gate: nothing new
    await commit_in_process(journal_path, "b")
    events = await feed_until(feed, it, 1)
    assert [e.aggregate_id for e in events] == ["goal:b"]
    watcher.stop()
    with pytest.raises(StopAsyncIteration):
        await next_batch(it)
    feed.close()


async def test_feed_from_sequence_zero_delivers_the_backlog(journal_path: Path) -> None:
    commit_here(journal_path, "a")
    commit_here(journal_path, "b")
    feed = ChangeFeed(journal_path, after_sequence=0)
    assert [e.aggregate_id for e in feed.poll()] == ["goal:a", "goal:b"]
    assert feed.poll() == []
    feed.close()


async def test_replaced_file_is_reopened(
    journal_path: Path, tmp_path: Path, mechanism: bool
) -> None:
    commit_here(journal_path, "a")
    feed = ChangeFeed(journal_path, after_sequence=0)
    assert len(feed.poll()) == 1
    generation = feed.generation
    other = tmp_path / "other.db"
    commit_here(other, "x")
    commit_here(other, "y")
    watcher = JournalWatcher(journal_path, poll_interval_s=30, use_inotify=mechanism)
    it = aiter(watcher)
    task = asyncio.ensure_future(next_batch(it))
    await asyncio.sleep(0.2)
    os.replace(other, journal_path)
    await task
    feed.poll()
    assert feed.generation == generation + 1  # consumers reload on a new generation
    assert feed.journal is not None and feed.journal.load("goal:y") is not None
    await commit_in_process(journal_path, "z")
    events = await feed_until(feed, it, 1)
    assert [e.aggregate_id for e in events] == ["goal:z"]
    watcher.stop()
    feed.close()


async def test_missing_journal_raises_then_recovers(tmp_path: Path) -> None:
    path = tmp_path / "j" / "journal.db"
    feed = ChangeFeed(path, after_sequence=0)
    with pytest.raises(StorageError):
        feed.poll()
    commit_here(path, "a")
    assert [e.aggregate_id for e in feed.poll()] == ["goal:a"]
    os.unlink(path)
    with pytest.raises(StorageError):
        feed.poll()
    feed.close()


async def test_not_sqlite_is_a_storage_error(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    path.write_text("hello, not a database\n" * 100)
    with pytest.raises(StorageError):
        ChangeFeed(path).poll()


async def test_directory_deleted_and_recreated_still_wakes(
    journal_path: Path, mechanism: bool
) -> None:
    watcher = JournalWatcher(journal_path, poll_interval_s=0.2, use_inotify=mechanism)
    it = aiter(watcher)
    task = asyncio.ensure_future(next_batch(it))
    await asyncio.sleep(0.2)
    await commit_in_process(journal_path, "a")
    await task
    shutil.rmtree(journal_path.parent)
    await next_batch(it)  # the poll notices the journal is gone
    commit_here(journal_path, "b")  # the directory comes back with a fresh journal
    feed = ChangeFeed(journal_path, after_sequence=0)
    assert [e.aggregate_id for e in await feed_until(feed, it, 1)] == ["goal:b"]
    rebuilds = watcher.rebuilds
    assert rebuilds >= 2  # the deaf watcher on the old directory was replaced
    # The rebuilt watcher hears commits through real file events, not only through the poll.
    await asyncio.sleep(0.3)
    wakes = watcher.file_wakes
    await commit_in_process(journal_path, "c")
    assert [e.aggregate_id for e in await feed_until(feed, it, 1)] == ["goal:c"]
    await asyncio.sleep(0.2)
    assert watcher.file_wakes > wakes
    watcher.stop()
    feed.close()


async def test_missing_directory_at_start_does_not_crash(tmp_path: Path, mechanism: bool) -> None:
    path = tmp_path / "later" / "journal.db"
    watcher = JournalWatcher(path, poll_interval_s=0.1, use_inotify=mechanism)
    it = aiter(watcher)
    task = asyncio.ensure_future(next_batch(it))
    await asyncio.sleep(0.15)
    commit_here(path, "a")
    await task
    feed = ChangeFeed(path, after_sequence=0)
    assert [e.aggregate_id for e in feed.poll()] == ["goal:a"]
    watcher.stop()
    feed.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux's")
async def test_watcher_wakes_on_a_commit_without_a_thread(journal_path: Path) -> None:
    """On Linux the watcher is a descriptor on the event loop: no polling thread while idle."""
    import threading

    before = set(threading.enumerate())  # earlier tests' watchfiles threads may still be ending
    watcher = JournalWatcher(journal_path, poll_interval_s=30)
    it = aiter(watcher)
    task = asyncio.ensure_future(next_batch(it))
    await asyncio.sleep(0.2)
    started = set(threading.enumerate()) - before
    assert not started  # watchfiles would start a thread polling every 20 ms
    await commit_in_process(journal_path, "a")
    await task  # the kernel's event, not the (30 s) poll
    assert watcher.file_wakes >= 1
    watcher.stop()
    with contextlib.suppress(StopAsyncIteration):
        await next_batch(it)
