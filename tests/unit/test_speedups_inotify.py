"""``store.speedups.inotify`` reports the names in a directory that watchfiles (the library the
watcher uses elsewhere) reports for the same changes, and says when its watch went deaf."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from store.speedups import inotify

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux's")
EXPECTED = {"a", "b", "c", "d"}


def change_names(folder: Path) -> None:
    """Create, write, rename, make a folder, delete, touch and chmod: every kind it watches."""
    (folder / "a").write_text("1")
    with (folder / "a").open("a") as file:
        file.write("2")
    (folder / "a").rename(folder / "b")
    (folder / "c").mkdir()
    (folder / "b").unlink()
    (folder / "d").touch()
    os.chmod(folder / "d", 0o600)
    (folder / "c" / "inside").touch()  # not recursive: not a name of the folder


def until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 30  # a bound for a stuck watcher, never a timing assertion
    while not condition():
        assert time.monotonic() < deadline, "no events"
        time.sleep(0.01)


@pytest.fixture
def watchfiles_names(tmp_path: Path) -> Iterator[Callable[[], set[str]]]:
    """The names watchfiles reports in ``tmp_path`` (non-recursive), once it watches."""
    from watchfiles import watch

    stop = threading.Event()
    changes = watch(
        tmp_path, stop_event=stop, yield_on_timeout=True, rust_timeout=100, debounce=20,
        step=5, recursive=False,
    )  # fmt: skip
    assert next(changes) == set()  # timed out once: the watch is in place
    seen: set[str] = set()

    def names() -> set[str]:
        seen.update(os.path.basename(path) for _, path in next(changes))
        return seen

    yield names
    stop.set()
    changes.close()


def test_the_names_watchfiles_reports(
    tmp_path: Path, watchfiles_names: Callable[[], set[str]]
) -> None:
    events = inotify.DirectoryEvents(tmp_path)
    try:
        change_names(tmp_path)
        mine: set[str] = set()

        def read() -> bool:
            names, lost, gone = events.read()
            assert not lost and not gone
            mine.update(names)
            return mine >= EXPECTED

        until(read)
        until(lambda: watchfiles_names() >= EXPECTED)
        assert mine == watchfiles_names() == EXPECTED
    finally:
        events.close()


def test_a_removed_folder_leaves_the_watch_deaf_and_says_so(tmp_path: Path) -> None:
    folder = tmp_path / "journal"
    folder.mkdir()
    events = inotify.DirectoryEvents(folder)
    try:
        folder.rmdir()
        gone: list[bool] = []
        until(lambda: bool(gone.append(events.read()[2]) or any(gone)))
    finally:
        events.close()
    assert events.fd == -1
    with pytest.raises(OSError):
        inotify.DirectoryEvents(folder)  # nothing to watch
