"""The walkthrough in a real terminal (tmux) at 80×24 and 120×40, keys pressed as Dana would:
the Goals screen, down to a Run's Attempts and back, a filter and escape clearing it, Confirm
cleanup of the orphaned attempt (the goal requeued), and its timeline (issue 24's "done when";
60×16 is tests/system/test_walkthrough_60x16.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.tmux import session_alive, tmux, unwrapped, wait_for_pane, wait_for_screen

NODE = "n1"


def keys(session: str, *names: str) -> None:
    """One key at a time: an escape followed at once by a letter is read as alt+letter."""
    for name in names:
        tmux("send-keys", "-t", session, name)
        time.sleep(0.3)


def wait_for_words(session: str, words: str, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    while words not in unwrapped(screen := tmux("capture-pane", "-p", "-t", session)):
        assert time.monotonic() < deadline, f"{words!r} never showed:\n{screen}"
        time.sleep(0.2)
    return screen


def row(screen: str, goal_id: str) -> str:
    return next(line for line in screen.splitlines() if line.lstrip().startswith(goal_id + " "))


@pytest.mark.skipif(shutil.which("tmux") is None and not os.environ.get("CI"), reason="no tmux")
@pytest.mark.parametrize(("width", "height"), [(80, 24), (120, 40)])
def test_the_walkthrough_in_tmux(journal_path: Path, width: int, height: int) -> None:
    session = f"walk{width}x{height}-{os.getpid()}"
    # COLUMNS and LINES (if the tests' environment has them) would override the pane's size.
    env = f"env -u COLUMNS -u LINES PYTHONPATH={os.environ.get('PYTHONPATH', os.getcwd())}"
    command = f"{env} {sys.executable} -m refine_tui.cli --journal {journal_path} --node {NODE} tui"
    tmux("new-session", "-d", "-s", session, "-x", str(width), "-y", str(height), command)
    try:
        # 1. Start: the header (journal, node, live, last commit), the table, the footer.
        wait_for_screen(session, "needs cleanup")
        # The footer comes a frame after the rows, its enter once a row is selected.
        screen = wait_for_screen(session, "⏎ Runs")
        lines = screen.splitlines()
        assert "journal.db" in lines[0] and f"node {NODE}" in lines[0] and "live" in lines[0]
        assert "last commit seq" in lines[1] and "8 goals" in lines[1]
        assert "exhausted" in row(screen, "deploy-stage")
        assert "R: release" in row(screen, "migrate-db")
        assert "⏎ Runs" in lines[-1] and "/ Filter" in lines[-1]
        assert max(len(line) for line in lines) <= width

        # 3. Look closer: enter → Runs, enter → Attempts, escape back up to the Goals.
        keys(session, "End", "Enter")
        wait_for_screen(session, "› unit-tests › Runs")
        screen = wait_for_screen(session, "⏎ Attempts")
        assert "unit-tests.r1" in screen and "⏎ Attempts" in screen.splitlines()[-1]
        keys(session, "Enter")
        wait_for_screen(session, "› unit-tests.r1 › Attempts")
        # The crumbs can come a frame before the rows (the Runs' "completed" still shown).
        screen = wait_for_screen(session, "failed (exit 1)")
        assert "completed" in screen
        screen = wait_for_pane(session, lambda s: "⏎" not in s.splitlines()[-1], "its footer")
        assert "esc Back" in screen.splitlines()[-1]
        keys(session, "Escape", "Escape")
        wait_for_screen(session, "needs cleanup")

        # 10. A filter narrows the table; escape on the table clears it.
        keys(session, "/")
        tmux("send-keys", "-t", session, "-l", "nightly")
        keys(session, "Enter")
        screen = wait_for_screen(session, "1 of 8 goals")
        assert "filter “nightly”" in screen.splitlines()[1]
        assert "s: no process here — x confirms cleanup" in screen

        # 6. Confirm cleanup: the evidence, then the attempt ends and the goal is requeued.
        keys(session, "x")
        screen = wait_for_screen(session, "Confirm cleanup of attempt 1 of run nightly-report.r1")
        assert "no process record on node n1" in screen
        assert "last log lines" in screen and "querying warehouse" in screen
        keys(session, "y")
        screen = wait_for_words(session, "attempt 1 interrupted (confirmed by")
        assert "requeued" in unwrapped(screen)
        assert "queued" in row(screen, "nightly-report")
        keys(session, "Escape")
        screen = wait_for_screen(session, "· 8 goals")
        assert "filter" not in screen.splitlines()[1]

        # 11. The timeline of the goal just cleaned up: its one attempt, interrupted.
        keys(session, "End", "Up", "Up", "t")  # unit-tests, old-backfill, nightly-report
        screen = wait_for_screen(session, "Timeline of goal nightly-report")
        assert "R1 #1 interrupted" in screen
        keys(session, "Escape", "q")
        time.sleep(1)
        assert not session_alive(session), "q quits"
    finally:
        if session_alive(session):
            subprocess.run(["tmux", "kill-session", "-t", session], check=False)
