"""A node whose workers cannot claim because the journal's disk is full (found from outside,
session 23: it forked workers as fast as they failed, ≈ 260 processes a second, and said nothing
on its terminal). Now its launches wait, doubling, and it says so once; once the disk has room it
launches at once again and says that. All real: a 2 MB tmpfs the journal itself fills, a real
`refine node`, its workers, the disk given room by a remount."""

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
    argv = [sys.executable, "-m", "refine_tui.cli", "--journal", str(path), "--node", "n1",
            "--state-dir", str(state), "node", "--capacity", "2"]  # fmt: skip
    with open(err, "w") as stderr:
        node = subprocess.Popen(argv, stderr=stderr, stdout=subprocess.DEVNULL,
                                start_new_session=True)  # fmt: skip
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
        assert "a worker ended before its claim (the journal would not take its claim" in said
        assert "launches go at once again: a worker reached the journal" in said
        assert added > 2
    finally:
        node.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            node.wait(timeout=30)
        node.kill()
        node.wait()
        for proc in psutil.process_iter(["cmdline"]):  # workers outlive their node
            if str(path) in " ".join(proc.info["cmdline"] or []):
                with contextlib.suppress(psutil.Error):
                    proc.kill()
