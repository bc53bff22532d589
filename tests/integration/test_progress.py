"""`refine check` and `refine copy` show a progress bar (Rich's, with the time remaining) on a
terminal's stderr, and nothing on a pipe or with --json (issue 27)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from store.journal.sqlite import Journal
from store.model.goals import Goals
from tests.helpers.terminal import on_a_terminal

REFINE = [sys.executable, "-m", "refine_tui.cli"]


@pytest.fixture
def journal(tmp_path: Path) -> Path:
    path = tmp_path / "journal.db"
    with Journal.open(path, synchronous="NORMAL") as j:
        goals = Goals(j)
        for n in range(40):
            goals.create(goal_id=f"g{n}", title=f"goal {n}", node_id="n1", argv=["true"])
    return path


def on_terminal(argv: list[str]) -> str:
    """Everything ``refine ARGV`` wrote to its terminal (stdout and stderr both), once it ended."""
    with on_a_terminal([*REFINE, *argv], dict(os.environ)) as terminal:
        deadline = time.monotonic() + 60
        while terminal.proc.poll() is None and time.monotonic() < deadline:
            terminal.shows("")  # keep reading: a full pty would block the writer
            time.sleep(0.01)
        assert terminal.proc.wait(timeout=5) == 0
        terminal.shows("")
        return terminal.seen.decode(errors="replace")


def commands(journal: Path, tmp_path: Path) -> dict[str, list[str]]:
    return {
        "check": ["--journal", str(journal), "check"],
        "copy": ["copy", str(journal), str(tmp_path / f"copy-{time.monotonic_ns()}.db")],
    }


@pytest.mark.parametrize("command", ["check", "copy"])
def test_a_terminal_shows_a_progress_bar_with_the_time_left(
    journal: Path, tmp_path: Path, command: str
) -> None:
    shown = on_terminal(commands(journal, tmp_path)[command])
    phases = {"check": ["checking"], "copy": ["copying events", "checking the copy"]}[command]
    for phase in phases:
        assert phase in shown, shown
    assert "━" in shown and "%" in shown  # Rich's bar and its percentage
    assert "-:--:--" in shown or "0:00:0" in shown  # the time remaining column
    assert "clean" in shown  # the report follows


@pytest.mark.parametrize("command", ["check", "copy"])
def test_a_pipe_gets_the_report_and_nothing_else(
    journal: Path, tmp_path: Path, command: str
) -> None:
    argv = commands(journal, tmp_path)[command]
    done = subprocess.run([*REFINE, *argv], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stderr == ""
    assert "clean" in done.stdout and "━" not in done.stdout


@pytest.mark.parametrize("command", ["check", "copy"])
def test_json_on_a_terminal_is_the_json_alone(journal: Path, tmp_path: Path, command: str) -> None:
    shown = on_terminal([*commands(journal, tmp_path)[command], "--json"])
    report = json.loads(shown.replace("\r\n", "\n"))
    assert (report.get("clean") or report["check"]["clean"]) is True
