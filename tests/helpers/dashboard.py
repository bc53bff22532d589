"""Helpers for driving the dashboard through Pilot: waits, selection, the row line, and
processes a test starts beside it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from refine_tui.app import RefineApp
from refine_tui.widgets.keyed_table import KeyedTable
from tests.helpers.waits import until


async def loaded(pilot) -> None:
    await until(pilot, lambda: bool(pilot.app.goal_rows) and pilot.app.header_state.state == "live")


def goals_table(app: RefineApp) -> KeyedTable:
    return app.query_one("#goals", KeyedTable)


async def select(pilot, goal_id: str) -> None:
    goals_table(pilot.app).select(goal_id)
    await pilot.pause()
    assert pilot.app.selected_goal().goal_id == goal_id


def commit_in_process(path: Path, code: str) -> None:
    """Run Goals API code in another process (``goals`` is bound), as the CLI or a worker would."""
    prelude = (
        "import sys\nfrom store.journal import Journal\nfrom store.goals import Goals\n"
        "j = Journal.open(sys.argv[1], create=False)\ngoals = Goals(j)\n"
    )
    subprocess.run([sys.executable, "-c", prelude + code, str(path)], check=True)


def row_line(app: RefineApp) -> str:
    return str(app.query_one("#rowline").render())


def end(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()
