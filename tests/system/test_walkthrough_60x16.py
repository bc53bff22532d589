"""The walkthrough's Goals screen and its cleanup dialog in a real terminal at 60×16 (tmux):
the Note, the footer's Filter, a whole warning and a log that says it scrolls (issue 24.5)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.tmux import session_alive, tmux, unwrapped, wait_for_screen

NODE = "n1"
WARNING = "Confirm only if this attempt's work has really ended (process gone or fenced)."


@pytest.mark.skipif(shutil.which("tmux") is None and not os.environ.get("CI"), reason="no tmux")
def test_at_60x16_the_note_the_filter_key_and_the_cleanup_warning_are_whole(
    journal_path: Path,
) -> None:
    session = f"small{os.getpid()}"
    # COLUMNS and LINES (set in the tests' environment) would override the pane's size.
    env = f"env -u COLUMNS -u LINES PYTHONPATH={os.environ.get('PYTHONPATH', os.getcwd())}"
    command = f"{env} {sys.executable} -m refine_tui.cli --journal {journal_path} --node {NODE} tui"
    tmux("new-session", "-d", "-s", session, "-x", "60", "-y", "16", command)
    try:
        screen = wait_for_screen(session, "Cleanup / Filter")
        lines = screen.splitlines()
        row = next(line for line in lines if line.lstrip().startswith("nightly-report"))
        assert "needs cleanup" in row
        assert any(
            line.lstrip().startswith("migrate-db") and "R: release" in line for line in lines
        )
        assert lines[-1].rstrip().endswith("/ Filter")  # whole keys, the Filter last
        for _ in range(5):  # build-docs, deploy-stage, gpu-train, lint, migrate-db, nightly-…
            tmux("send-keys", "-t", session, "Down")
        wait_for_screen(session, "s: no process here — x confirms cleanup")
        tmux("send-keys", "-t", session, "x")
        screen = wait_for_screen(session, "↑↓ scroll")
        assert WARNING in unwrapped(screen), screen
        tmux("send-keys", "-t", session, "Down", "Down", "Down")
        wait_for_screen(session, "last log lines (↑↓ scroll):")
        tmux("send-keys", "-t", session, "n")
        wait_for_screen(session, "/ Filter")
        tmux("send-keys", "-t", session, "q")
        subprocess.run(["sleep", "1"], check=True)
    finally:
        if session_alive(session):
            subprocess.run(["tmux", "kill-session", "-t", session], check=False)
