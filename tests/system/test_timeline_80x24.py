"""The attempt timeline (issue 26) in a real `refine tui` under tmux at 80×24: every attempt's
row, the collapsed gap's mark, the axis' clock times and the keys, each whole (not clipped)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.waits import wait_until
from tests.integration.test_app_timeline import H, story

NODE = "n1"
needs_tmux = pytest.mark.skipif(
    shutil.which("tmux") is None and not os.environ.get("CI"), reason="no tmux"
)


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], check=True, capture_output=True, text=True).stdout


def screen(session: str) -> str:
    return tmux("capture-pane", "-p", "-t", session)


@needs_tmux
def test_the_timeline_at_80x24_shows_every_attempt_whole(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    story(path, time.time() - 3 * H - 60)  # the running attempt started a minute ago
    session = f"timeline{os.getpid()}"
    env = f"PYTHONPATH={os.environ.get('PYTHONPATH', os.getcwd())}"
    command = f"{env} {sys.executable} -m refine_tui.cli --journal {path} --node {NODE} tui"
    here = os.getcwd()  # python -m imports from the working directory first
    tmux("new-session", "-d", "-s", session, "-x", "80", "-y", "24", "-c", here, command)
    try:
        tmux("resize-window", "-t", session, "-x", "80", "-y", "24")
        wait_until(lambda: "story" in screen(session) and "live" in screen(session))
        tmux("send-keys", "-t", session, "/")
        wait_until(lambda: "filter goals:" in screen(session), what="the filter box")
        tmux("send-keys", "-t", session, "-l", "story")
        tmux("send-keys", "-t", session, "Enter")
        wait_until(lambda: "halted" not in screen(session), what="the filter applied")
        tmux("send-keys", "-t", session, "t")
        shown = wait_until(
            # The footer may come a frame after the timeline's rows.
            lambda: "R1 #3 running" in (text := screen(session)) and "esc Back" in text and text,
            what="the timeline and its footer",
        )
        lines = shown.splitlines()
        assert len(lines) == 24 and all(len(line) <= 80 for line in lines)
        assert lines[0].startswith(" Timeline of goal story · 1 run, 3 attempts")
        assert lines[1].rstrip().endswith("⋯ idle gap")  # the legend, whole
        rows = [line for line in lines if line.startswith(" R1 #")]
        assert [r.split()[:3] for r in rows] == [
            ["R1", "#1", "interrupted"],
            ["R1", "#2", "failed"],
            ["R1", "#3", "running"],
        ]
        assert rows[0].split()[3] == "1m40s" and rows[1].split()[3] == "1m10s"
        assert rows[2].rstrip().endswith("▶")  # the running bar reaches now
        axis = next(line for line in lines if "├" in line)
        assert "⋯ 2h56m ⋯" in axis and axis.rstrip().endswith("┤")
        ticks = lines[lines.index(axis) + 1]
        assert ticks.rstrip().endswith(" now")
        assert "esc Back" in lines[-1]
        tmux("send-keys", "-t", session, "Escape")
        wait_until(lambda: "Timeline of" not in screen(session), what="escape: back")
        tmux("send-keys", "-t", session, "q")
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
