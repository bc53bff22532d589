"""WALKTHROUGH facts at 80×24 found by running the story in tmux (issue 13): each one whole."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import psutil
from rich.console import Console
from rich.text import Text
from textual.widgets import Static

from refine_tui.app import RefineApp
from refine_tui.screens.confirm import ConfirmModal
from refine_tui.widgets.keyed_table import KeyedTable
from store.goals import Goals
from store.journal import Journal
from store.processes import ProcessRecord, ProcessRegistry
from tests.test_app import end, journal_path, loaded, row_line, select, until

__all__ = ["journal_path"]  # the fixture
NODE = "n1"
WORKER = "n1/d1d9ec596d1e4ccaa841c972b3528756"  # as long as the node's worker names


def shown_lines(line: Static) -> int:
    """How many lines the row line's text needs at its width (wrapped as Textual wraps)."""
    width = line.content_region.width
    return len(Text(str(line.render())).wrap(Console(width=width), width))


async def test_a_stopped_attempts_row_line_is_whole(journal_path: Path) -> None:
    """After a Stop, the attempt's line (state, long worker name, last observation) took three
    lines at 80 columns and the row line showed two: "(last observation)" was cut."""
    with Journal.open(journal_path) as j:
        goals = Goals(j)
        goals.create(goal_id="loop", title="stuck loop", node_id=NODE, argv=["sleep", "60"])
        goals.start(goal_id="loop", node_id=NODE, worker=WORKER, token="t")
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    registry = ProcessRegistry(journal_path, NODE)
    registry.record(
        ProcessRecord(
            node_id=NODE,
            pid=proc.pid,
            create_time=psutil.Process(proc.pid).create_time(),
            pgid=proc.pid,
            run_id="loop.r1",
            epoch=1,
            worker=WORKER,
            argv=("sleep", "60"),
            log_path=str(registry.log_path("loop.r1", 1)),
            started_at=time.time(),
        )
    )
    app = RefineApp(journal=journal_path, node=NODE, operator="dana", grace_s=2)
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            await loaded(pilot)
            await select(pilot, "loop")
            await pilot.press("enter", "enter")
            attempts = app.query_one("#attempts", KeyedTable)
            await until(pilot, lambda: str(attempts.get_cell("1", "pid")) == str(proc.pid))
            await pilot.press("s")
            await until(pilot, lambda: isinstance(app.screen, ConfirmModal))
            await pilot.press("y")
            await until(pilot, lambda: "last observation" in row_line(app), timeout=20)
            line = app.query_one("#rowline", Static)
            assert "interrupted (sigterm by dana@n1)" in row_line(app)
            await until(pilot, lambda: line.content_region.height >= shown_lines(line))
            assert shown_lines(line) == 3
    finally:
        end(proc)
