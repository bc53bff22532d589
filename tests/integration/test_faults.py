"""Faults (DESIGN §10, issue 6): a locked journal, a full disk, a journal file deleted, replaced
or truncated under live connections, and recipes that ignore SIGTERM or fork grandchildren.

Real SQLite files, real processes, real signals; every refusal must be typed and write nothing.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from refine_tui import cli
from store.errors import StorageError
from store.host.processes import ProcessRegistry
from store.journal.sqlite import Journal
from store.journal.watch import ChangeFeed
from store.model.goals import Goals
from store.ops.check import check_journal
from tests.helpers.registry import node_registry
from tests.helpers.run_support import footprint
from tests.helpers.soak_recipes import (
    ROOT,
    alive,
    kill_group,
    ours,
    pids_in,
    recipe_argv,
    start_worker,
    wait_for,
    write_locked,
)


def add_goal(journal: Journal, goal_id: str, **kw: object) -> None:
    Goals(journal).create(goal_id=goal_id, title=goal_id.title(), node_id="n1", argv=["true"], **kw)


@pytest.fixture
def journal_path(tmp_path: Path) -> Path:
    path = tmp_path / "j" / "journal.db"
    with Journal.open(path) as journal:
        add_goal(journal, "first")
    return path


# --- locked by a long writer ------------------------------------------------------------------


def test_locked_journal_refuses_commands_within_busy_timeout_and_writes_nothing(
    journal_path: Path,
) -> None:
    with Journal.open(journal_path, busy_timeout_ms=200) as journal:
        before = footprint(journal)
        with write_locked(journal_path):
            with pytest.raises(StorageError, match="locked") as refused:
                add_goal(journal, "second")
            assert refused.value.code == "STORAGE"
            # Readers are not blocked by a writer (WAL): the dashboard can still show the state.
            assert [g.goal_id for g in Goals(journal).list()] == ["first"]
            assert footprint(journal) == before
        # The refused command left its ID unused: the same command now succeeds.
        add_goal(journal, "second")
        assert check_journal(journal).clean


def test_cli_on_a_locked_journal_exits_3_with_one_line(journal_path: Path) -> None:
    base = [sys.executable, "-m", "refine_tui.cli", "--journal", str(journal_path)]
    with write_locked(journal_path):
        write = subprocess.run(
            [*base, "goal", "add", "--id", "late", "--title", "Late", "--", "true"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        read = subprocess.run(
            [*base, "goals", "--json"], cwd=ROOT, capture_output=True, text=True, timeout=60
        )
    assert write.returncode == 3
    assert write.stdout == ""
    [line] = write.stderr.splitlines()
    assert line.startswith("refine: STORAGE:") and "locked" in line
    assert read.returncode == 0, read.stderr
    with Journal.open(journal_path, read_only=True) as journal:
        assert Goals(journal).read("late") is None


# --- disk full ----------------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 600 KiB tmpfs mounted for this test (root only; skipped where mount is not allowed)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small tmpfs needs root")
    mount_point = tmp_path / "small"
    mount_point.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=600k", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def fill(directory: Path) -> Path:
    """Write a file until the file system has no byte left."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        for block in (65536, 4096, 1):
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"x" * block)
    finally:
        os.close(fd)
    assert shutil.disk_usage(directory).free == 0
    return filler


def test_disk_full_refuses_cleanly_and_nothing_is_half_written(small_disk: Path) -> None:
    path = small_disk / "journal.db"
    with Journal.open(path) as journal:
        for i in range(3):
            add_goal(journal, f"g{i}")
        before = footprint(journal)
        filler = fill(small_disk)
        refusals = []
        for i in range(40):  # big commands, so the WAL must grow
            with pytest.raises(StorageError) as refused:
                Goals(journal).create(
                    goal_id=f"big{i}", title="B" * 200, node_id="n1", argv=["x" * 2000] * 8
                )
            refusals.append(refused.value)
        assert {e.code for e in refusals} == {"STORAGE"}
        assert all("full" in e.message for e in refusals), refusals[0].message
        assert footprint(journal) == before
        assert check_journal(journal).clean
        # The CLI says so in one line and exits 3.
        assert cli.main(["--journal", str(path), "goal", "add", "--title", "T", "--", "x"]) == 3
        filler.unlink()
        add_goal(journal, "after")  # space is back: commands work again
    with Journal.open(path, create=False) as journal:
        report = check_journal(journal)
        assert report.clean, report.text()
        assert [g.goal_id for g in Goals(journal).list()] == ["after", "g0", "g1", "g2"]


# --- the journal file deleted, replaced or truncated under live connections -------------------


def test_deleted_journal_refuses_writes_and_the_feed_says_missing(journal_path: Path) -> None:
    feed = ChangeFeed(journal_path)
    feed.poll()
    with Journal.open(journal_path) as writer:
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{journal_path}{suffix}")
        # Regression: the old handle used to accept writes into the unlinked file (lost).
        with pytest.raises(StorageError, match="deleted or replaced"):
            add_goal(writer, "lost")
        with pytest.raises(StorageError, match="missing"):
            feed.poll()
    feed.close()
    with pytest.raises(StorageError, match="missing"):
        Journal.open(journal_path, create=False)


def test_replaced_journal_refuses_old_writers_and_the_feed_follows_the_new_file(
    journal_path: Path, tmp_path: Path
) -> None:
    feed = ChangeFeed(journal_path, after_sequence=0)
    assert {e.aggregate_id for e in feed.poll()} == {"goal:first", "run:first.r1"}
    replacement = tmp_path / "replacement.db"
    with Journal.open(replacement) as other:
        add_goal(other, "restored")
    with Journal.open(journal_path) as writer:
        # Replace as a careful operator would: the database and its WAL files together.
        for suffix in ("-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{journal_path}{suffix}")
        os.replace(replacement, journal_path)
        with pytest.raises(StorageError, match="deleted or replaced"):
            add_goal(writer, "into-the-old-file")
    feed.poll()  # reopens on the new inode
    assert feed.generation == 2
    with Journal.open(journal_path, create=False) as journal:
        add_goal(journal, "next")
    assert {e.aggregate_id for e in feed.poll()} == {"goal:next", "run:next.r1"}
    feed.close()
    with Journal.open(journal_path, read_only=True) as journal:
        report = check_journal(journal)
        assert report.clean, report.text()
        assert [g.goal_id for g in Goals(journal).list()] == ["next", "restored"]


@pytest.mark.parametrize("keep", [0.0, 0.5])
def test_truncated_journal_gives_typed_errors_everywhere(journal_path: Path, keep: float) -> None:
    with Journal.open(journal_path) as writer:
        for i in range(100):
            add_goal(writer, f"g{i}")
    feed = ChangeFeed(journal_path)
    feed.poll()
    with Journal.open(journal_path) as writer:
        with sqlite3.connect(journal_path) as raw:  # everything in the main file, WAL empty
            raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        raw.close()
        os.truncate(journal_path, int(os.path.getsize(journal_path) * keep))
        with pytest.raises(StorageError):
            add_goal(writer, "late")
        with pytest.raises(StorageError):
            feed.poll()
        with pytest.raises(StorageError):
            check_journal(writer)
    feed.close()
    # Regression: a journal truncated to zero bytes used to be silently re-created empty.
    with pytest.raises(StorageError):
        Journal.open(journal_path, create=False)
    assert cli.main(["--journal", str(journal_path), "check"]) == 3
    assert cli.main(["--journal", str(journal_path), "goals"]) == 3


# --- recipes that ignore SIGTERM or fork grandchildren, through the operator's Stop -----------


@pytest.mark.parametrize("kind", ["ignore-term", "grandchildren"])
def test_stop_ends_the_whole_group_of_a_stubborn_recipe(tmp_path: Path, kind: str) -> None:
    operator = pytest.importorskip("store.ops.operator")
    path = tmp_path / "j" / "journal.db"
    marker, pids_dir = str(tmp_path / "marker"), tmp_path / "pids"
    expected = 3 if kind == "grandchildren" else 1
    with Journal.open(path) as journal:
        Goals(journal).create(
            goal_id="stubborn",
            title="Stubborn",
            node_id="n1",
            argv=recipe_argv(kind, marker, pids_dir),
        )
        worker = start_worker(path, "n1", "stubborn")
        try:
            registry = node_registry(path, "n1")
            wait_for(lambda: registry.get("stubborn.r1", 1), what="the worker's process record")
            wait_for(lambda: len(pids_in(pids_dir)) == expected, what="the recipe's processes")
            report = operator.stop_goal(
                journal, "stubborn", node="n1", operator="tester", grace_s=0.5
            )
            worker.wait(timeout=10)  # (stop_process may have reaped it already)
        finally:
            kill_group(worker)
        assert report.signals[0] == "SIGTERM"
        if kind == "grandchildren":  # they ignore SIGTERM: only the group's SIGKILL ends them
            assert report.signals == ("SIGTERM", "SIGKILL") and report.process == "killed"
        assert report.outcome == "requeued", report.why
        assert not [pid for pid in pids_in(pids_dir) if alive(pid)]
        assert ours(marker) == []
        goal = Goals(journal).read("stubborn")
        assert goal is not None and goal.status == "queued"
        assert check_journal(journal).clean


# --- no process of an ended attempt is left running ----------------------------------------------


def start_grandchildren(
    tmp_path: Path, **goal: object
) -> tuple[Path, Path, subprocess.Popen[bytes]]:
    """A goal whose recipe forks two SIGTERM-ignoring grandchildren, and its worker running it."""
    path = tmp_path / "j" / "journal.db"
    pids_dir = tmp_path / "pids"
    with Journal.open(path) as journal:
        Goals(journal).create(
            goal_id="family",
            title="Family",
            node_id="n1",
            argv=recipe_argv("grandchildren", str(tmp_path / "marker"), pids_dir),
            **goal,  # type: ignore[arg-type]
        )
    worker = start_worker(path, "n1", "family")
    wait_for(lambda: node_registry(path, "n1").get("family.r1", 1), what="the worker's record")
    wait_for(lambda: len(pids_in(pids_dir)) == 3, what="the recipe and its grandchildren")
    return path, pids_dir, worker


def all_gone(pids_dir: Path) -> bool:
    return not [pid for pid in pids_in(pids_dir) if alive(pid)]


@pytest.mark.parametrize("by", ["reconcile", "cleanup-here", "cleanup-elsewhere"])
def test_a_crashed_workers_grandchildren_end_with_its_attempt(tmp_path: Path, by: str) -> None:
    """The worker alone crashes (its recipe dies with it, PDEATHSIG); the grandchildren, in the
    same process group without a parent, used to run on after the attempt was ended by the
    node's reconciliation or by an operator's confirmed cleanup (regression)."""
    from store.node.scheduler import Node
    from store.ops.operator import confirm_cleanup

    path, pids_dir, worker = start_grandchildren(tmp_path)
    try:
        worker.kill()
        worker.wait()
        if by != "reconcile":
            with Journal.open(path) as journal:
                where = "n1" if by == "cleanup-here" else "n2"
                report = confirm_cleanup(journal, "family.r1", epoch=1, node=where, operator="op")
                assert report.outcome == "requeued"
        with Node(path, "n1", grace_s=0.5) as node:
            ended = node.reconcile()
        assert len(ended) == (1 if by == "reconcile" else 0)
        wait_for(lambda: all_gone(pids_dir), timeout=10, what="the grandchildren to be gone")
        with Journal.open(path, read_only=True) as journal:
            goal = Goals(journal).read("family")
            assert goal is not None and goal.status == "queued"
            assert check_journal(journal).clean
    finally:
        kill_group(worker)


@pytest.mark.parametrize("ending", ["cancel", "timeout"])
def test_a_worker_ending_its_recipe_ends_the_grandchildren_too(tmp_path: Path, ending: str) -> None:
    timeout_ms = 1500 if ending == "timeout" else 3_600_000
    path, pids_dir, worker = start_grandchildren(tmp_path, attempt_timeout_ms=timeout_ms)
    try:
        if ending == "cancel":  # terminal intent only: the worker sees it and stops its recipe
            with Journal.open(path) as journal:
                Goals(journal).cancel(goal_id="family", reason="enough", command_id="op:c:1")
        assert worker.wait(timeout=30) == 0  # it reported the ending
        with Journal.open(path, read_only=True) as journal:
            goal = Goals(journal).read("family")
            assert goal is not None
            assert goal.status == ("cancelled" if ending == "cancel" else "queued")
        # Regression: stopping only the recipe left its grandchildren running.
        wait_for(lambda: all_gone(pids_dir), timeout=10, what="the grandchildren to be gone")
    finally:
        kill_group(worker)


# --- the journal file replaced or truncated while a node and the dashboard run -----------------


def start_node(path: Path, node: str = "n1") -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "store.node.scheduler", "--journal", str(path), "--node", node],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def backup(path: Path, to: Path) -> Path:
    """A consistent copy through SQLite's backup API (what a careful restore starts from)."""
    with sqlite3.connect(path) as src, sqlite3.connect(to) as dst:
        src.backup(dst)
    src.close()
    dst.close()
    return to


def restore(copy: Path, path: Path) -> None:
    """Put ``copy`` in place of the journal, with the old WAL files removed first."""
    for suffix in ("-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{path}{suffix}")
    os.replace(copy, path)


def status_of(path: Path, goal_id: str) -> str | None:
    with contextlib.suppress(StorageError), Journal.open(path, read_only=True) as journal:
        goal = Goals(journal).read(goal_id)
        return goal.status if goal else None
    return None


def test_a_running_node_follows_a_restored_journal(journal_path: Path, tmp_path: Path) -> None:
    node = start_node(journal_path)
    try:
        with Journal.open(journal_path) as journal:
            Goals(journal).create(goal_id="before", title="B", node_id="n1", argv=["true"])
        wait_for(lambda: status_of(journal_path, "before") == "completed", 20, "the first goal")
        restore(backup(journal_path, tmp_path / "copy.db"), journal_path)
        with Journal.open(journal_path, create=False) as journal:
            Goals(journal).create(goal_id="after", title="A", node_id="n1", argv=["true"])
        # Regression: the node kept reading the deleted file and never saw new work.
        wait_for(lambda: status_of(journal_path, "after") == "completed", 20, "the new goal")
        assert node.poll() is None
    finally:
        node.terminate()
        node.wait(timeout=10)
    with Journal.open(journal_path, read_only=True) as journal:
        report = check_journal(journal)
        assert report.clean, report.text()


async def test_dashboard_and_node_through_a_truncated_then_restored_journal(
    journal_path: Path, tmp_path: Path
) -> None:
    import asyncio

    from refine_tui.app import RefineApp

    async def until(condition: object, what: str, timeout: float = 20.0) -> None:
        await asyncio.to_thread(wait_for, condition, timeout, what)

    node = start_node(journal_path)
    app = RefineApp(journal=journal_path, node="n1", operator="tester")
    try:
        async with app.run_test(size=(100, 30)) as pilot:
            await until(lambda: status_of(journal_path, "first") == "completed", "first done")
            await until(
                lambda: app.goal_rows.get("first") and app.goal_rows["first"].status == "completed",
                "the dashboard to show it",
            )
            copy = backup(journal_path, tmp_path / "copy.db")
            with sqlite3.connect(journal_path) as raw:
                raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            raw.close()
            os.truncate(journal_path, 0)
            await until(lambda: app.header_state.state == "broken", "the dashboard to say so")
            assert app.query_one("#trouble").display
            await pilot.press("down", "up")  # still responsive
            assert cli.main(["--journal", str(journal_path), "goals"]) == 3
            assert node.poll() is None  # the node waits (typed errors), it does not crash
            restore(copy, journal_path)
            with Journal.open(journal_path, create=False) as journal:
                add_goal(journal, "second")
            await until(lambda: status_of(journal_path, "second") == "completed", "second done")
            await until(lambda: app.header_state.state == "live", "the dashboard to recover")
            await until(
                lambda: (
                    app.goal_rows.get("second") and app.goal_rows["second"].status == "completed"
                ),
                "the dashboard to show the new goal",
            )
    finally:
        node.terminate()
        node.wait(timeout=10)
    with Journal.open(journal_path, read_only=True) as journal:
        report = check_journal(journal)
        assert report.clean, report.text()


async def test_dashboard_stays_responsive_and_says_locked_when_a_writer_holds_the_journal(
    journal_path: Path,
) -> None:
    import asyncio

    from refine_tui.app import RefineApp
    from refine_tui.screens.confirm import CancelModal
    from refine_tui.textual_private import notifications

    app = RefineApp(journal=journal_path, node="n1", operator="tester")
    async with app.run_test(size=(100, 30)) as pilot:
        await asyncio.to_thread(wait_for, lambda: "first" in app.goal_rows, 10, "the goal row")
        with Journal.open(journal_path, read_only=True) as journal:
            before = footprint(journal)
        with write_locked(journal_path):
            # Reading goes on (WAL): the dashboard stays live while a writer holds the lock.
            await pilot.press("c")
            await asyncio.to_thread(wait_for, lambda: isinstance(app.screen, CancelModal), 10)
            await pilot.press(*"stuck", "enter")
            for _ in range(10):  # the Cancel waits in a thread; keys are still handled
                await pilot.press("down", "up")
            await asyncio.to_thread(
                wait_for,
                lambda: any("locked" in str(n.message) for n in notifications(app)),
                20,
                "the refusal in words",
            )
            assert app.header_state.state == "live"
        with Journal.open(journal_path, read_only=True) as journal:
            assert footprint(journal) == before  # the refused Cancel wrote nothing
        assert app.goal_rows["first"].status == "queued"


async def test_an_update_arriving_while_the_dashboard_shuts_down_is_ignored(
    journal_path: Path,
) -> None:
    """Regression (found by the load test): the live worker's last JournalUpdate, handled after
    the widgets were removed at exit, raised NoMatches ('#trouble') and a traceback."""
    from refine_tui.app import RefineApp
    from refine_tui.messages import JournalTrouble, JournalUpdate

    app = RefineApp(journal=journal_path, node="n1")
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
    app.on_journal_update(JournalUpdate(False, {}, 0, 0, None))
    app.on_journal_trouble(JournalTrouble("broken", "gone"))


# --- pid reuse: a record naming a pid that now belongs to someone else ---------------------------


def test_reused_pids_are_never_signalled_by_stop_cancel_or_reconcile(tmp_path: Path) -> None:
    """Records whose pid (and process group id) now name unrelated processes, as after pid
    reuse: Stop, Cancel and the node's reconciliation end the attempts without one signal."""
    import time

    import psutil

    from store.host.processes import ProcessRecord
    from store.node.scheduler import Node
    from store.ops.operator import cancel_goal, stop_goal
    from tests.helpers.soak_recipes import Decoys

    path = tmp_path / "j" / "journal.db"
    decoys = Decoys(tmp_path / "decoys", count=3)
    try:
        with Journal.open(path) as journal:
            goals, registry = Goals(journal), ProcessRegistry.for_journal(journal, "n1")
            for i, decoy in enumerate(decoys.procs):
                goal_id = f"reused{i}"
                goals.create(goal_id=goal_id, title="R", node_id="n1", argv=["true"])
                goals.start(goal_id=goal_id, node_id="n1", worker="n1/w", token=f"t{i}")
                born = psutil.Process(decoy.pid).create_time()
                registry.record(
                    ProcessRecord(
                        node_id="n1",
                        pid=decoy.pid,
                        create_time=born - 1000.0,  # the recorded process was older: reused
                        pgid=decoy.pid,  # and the decoy leads a group with the same id
                        run_id=f"{goal_id}.r1",
                        epoch=1,
                        worker="n1/w",
                        argv=("python", "-m", "store.worker"),
                        log_path=str(registry.log_path(f"{goal_id}.r1", 1)),
                        started_at=time.time() - 1000.0,
                    )
                )
            stopped = stop_goal(journal, "reused0", node="n1", operator="op", grace_s=0.2)
            cancelled = cancel_goal(
                journal, "reused1", reason="done", node="n1", operator="op", grace_s=0.2
            )
            with Node(path, "n1", grace_s=0.5) as node:
                [reconciled] = node.reconcile()
            assert (stopped.signals, stopped.process, stopped.outcome) == (
                (),
                "mismatch",
                "requeued",
            )
            assert (cancelled.signals, cancelled.outcome) == ((), "cancelled")
            assert reconciled.goal.goal_id == "reused2" and reconciled.goal.status == "queued"
            assert check_journal(journal).clean
        time.sleep(0.2)  # a signal, had one been sent, would have been logged by now
        assert decoys.all_alive()
        assert not any(decoys.signals_received().values())
    finally:
        decoys.close()
