"""A node on a full disk (found from outside, session 23). With the journal's disk full it forked
workers as fast as they failed, ≈ 260 processes a second, and said nothing on its terminal;
with its state dir's disk full, its workers claimed and then died writing their words to the
full node log, leaving attempts `running` with no process and no report. Now its launches wait,
doubling, and it says so once; a worker that cannot record itself reports its attempt failed,
saying why; once the disk has room the node launches at once again. All real: small tmpfs disks,
a real `refine node`, its workers, a disk given room by a remount."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from store.errors import StorageError
from store.journal.sqlite import Journal
from store.model.goals import Goals
from tests.helpers.hosts import required
from tests.helpers.waits import wait_until

TITLE = "x" * 190  # goals as big as they come fill the 2 MB in a few dozen


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0 or not shutil.which("mount"):
        why = "a small disk (tmpfs) needs root and mount"
        pytest.fail(why) if required() else pytest.skip(why)
    disk = tmp_path / "small"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2M", "tmpfs", str(disk)], check=True)
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def start_node(path: Path, state: Path, err: Path) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "refine_tui.cli", "--journal", str(path), "--node", "n1",
            "--state-dir", str(state), "node", "--capacity", "2"]  # fmt: skip
    with open(err, "w") as stderr:
        return subprocess.Popen(argv, stderr=stderr, stdout=subprocess.DEVNULL,
                                start_new_session=True)  # fmt: skip


def end(node: subprocess.Popen[bytes], path: Path) -> None:
    node.send_signal(signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        node.wait(timeout=30)
    node.kill()
    node.wait()
    for proc in psutil.process_iter(["cmdline"]):  # workers outlive their node
        if str(path) in " ".join(proc.info["cmdline"] or []):
            with contextlib.suppress(psutil.Error):
                proc.kill()


def fill(path: Path) -> int:
    """Goals for node n1 until the journal's disk is full; how many were added."""
    with Journal.open(path) as journal:
        goals = Goals(journal)
        for n in range(10_000):
            try:
                goals.create(goal_id=f"g{n}", title=TITLE, node_id="n1", argv=["echo", TITLE])
            except StorageError as exc:
                assert "full" in str(exc)
                return n
    raise AssertionError("the disk never filled")


def statuses(path: Path) -> set[str]:
    with Journal.open(path) as journal:
        return {goal.status for goal in Goals(journal).list()}


def test_a_node_on_a_full_disk_waits_between_launches_says_so_and_goes_on_once_it_has_room(
    small_disk: Path, tmp_path: Path
) -> None:
    path = small_disk / "journal.db"
    added = fill(path)
    state, err = tmp_path / "state", tmp_path / "node.err"
    node = start_node(path, state, err)
    try:
        wait_until(lambda: "launches wait 0.5 s" in err.read_text(), timeout=60)
        time.sleep(3)  # without the wait: hundreds of workers failed meanwhile
        failed = (state / "node.log").read_text().count("not started, journal unavailable")
        assert 1 <= failed <= 10  # a round of 2 at 0, 0.5, 1.5 and 3.5 s at most
        assert statuses(path) == {"queued"}

        subprocess.run(["mount", "-o", "remount,size=8M", str(small_disk)], check=True)
        wait_until(lambda: statuses(path) == {"completed"}, timeout=120)
        said = err.read_text()
        assert said.count("launches wait") == 1, said  # once, not per worker
        assert "a worker could not start its attempt (the journal would not take its claim" in said
        assert "launches go at once again: a worker reached the journal" in said
        assert added > 2
    finally:
        end(node, path)


def test_workers_that_cannot_record_themselves_report_it_and_the_node_waits(
    small_disk: Path, tmp_path: Path
) -> None:
    """The state dir (process records, logs, the node log) on a disk that fills once the node
    runs, the journal not: every attempt claimed is reported failed with the reason (none is
    left `running` without a process), and the node's launches wait instead of spending every
    goal's attempts."""
    path, state, said = tmp_path / "journal.db", small_disk / "state", tmp_path / "node.err"
    Journal.open(path).close()
    node = start_node(path, state, said)
    filler = small_disk / "filler"
    try:
        wait_until(lambda: "refine node: node n1" in said.read_text(), timeout=60)
        subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=4k"], capture_output=True)
        with Journal.open(path) as journal:
            for n in range(20):
                Goals(journal).create(goal_id=f"g{n}", title="t", node_id="n1", argv=["true"])
        wait_until(lambda: "this machine could not record it" in said.read_text(), timeout=60)
        time.sleep(3)  # without the wait: every goal's three attempts spent meanwhile
        with Journal.open(path) as journal:
            goals = Goals(journal)
            attempts = [a for g in goals.list() for r in goals.runs(g.goal_id) for a in r.attempts]
        assert 1 <= len(attempts) <= 10, attempts  # a round of 2 at 0, 0.5, 1.5, 3.5 s at most
        assert all(a.state == "failed" for a in attempts), attempts  # none left running
        assert all("cannot record the worker process" in (a.reason or "") for a in attempts)
        assert said.read_text().count("launches wait") == 1
    finally:
        end(node, path)
        filler.unlink(missing_ok=True)


def test_a_node_whose_state_dir_is_full_at_start_is_refused_in_one_line(
    small_disk: Path, tmp_path: Path
) -> None:
    """Its lock cannot be written: STORAGE, exit 3, one line (it said INTERNAL)."""
    path, state = tmp_path / "journal.db", small_disk / "state"
    with Journal.open(path) as journal:
        state.mkdir()
        (state / "journal-id").write_text(journal.journal_id or "")
    subprocess.run(["dd", "if=/dev/zero", f"of={small_disk / 'filler'}", "bs=4k"],
                   capture_output=True)  # fmt: skip
    argv = [sys.executable, "-m", "refine_tui.cli", "--journal", str(path), "--node", "n1",
            "--state-dir", str(state), "node"]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (3, "")
    assert done.stderr == (
        f"refine: STORAGE: cannot write this node's lock {state / 'node.lock'}:"
        " No space left on device\n"
    )
