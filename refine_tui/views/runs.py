"""The Runs view: the Runs of the Goal it is about, opened on the current round.

Its part of the read is that Goal (``follower.wants.goal_id``, and its node); enter on a Run
goes up as ``RunsView.Opened``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from textual import on
from textual.message import Message
from textual.widgets import DataTable

from refine_tui import cells
from refine_tui.cells import RUN_COLUMNS, run_cells
from refine_tui.follow import JournalFollower
from refine_tui.rows import GoalRow, RunRow
from refine_tui.views.base import TableView


def last_attempt(run_id: str, attempts: str) -> tuple[str, int] | None:
    """(run_id, epoch) of a Run's latest attempt, from its "used/budget" text (None: none yet)."""
    used = int(attempts.split("/")[0] or 0) if attempts else 0
    return (run_id, used) if used else None


class RunsView(TableView):
    """The Runs of one Goal (``goal_id``; None: no Goal is drilled into)."""

    VIEW = "runs"
    BINDINGS: ClassVar = TableView.opens("Attempts")

    @dataclass
    class Opened(Message):
        """enter on a Run: show its Attempts."""

        run_id: str

    def __init__(self, follower: JournalFollower) -> None:
        super().__init__(RUN_COLUMNS, follower)
        self.runs: dict[str, RunRow] = {}  # (DataTable has its own .rows)
        self.goal_id: str | None = None

    def open(self, goal: GoalRow) -> None:
        """Show ``goal``'s Runs (read from the journal next)."""
        self.goal_id = goal.goal_id
        self.sync({})
        self.follower.wants.goal_id, self.follower.wants.goal_node = goal.goal_id, goal.node_id
        self.follower.wake(full=True)

    def close(self) -> None:
        self.goal_id = None
        self.follower.wants.goal_id = self.follower.wants.goal_node = None

    def show(self, runs: list[RunRow]) -> None:
        """The Runs slice of a journal update."""
        self.runs = {r.run_id: r for r in runs}
        opening = not self.keys()
        self.sync({r.run_id: run_cells(r) for r in runs})
        if opening and runs:  # open on the current (latest) round
            self.select(runs[-1].run_id)

    def selected_row(self) -> RunRow | None:
        key = self.selected_key
        return self.runs.get(key) if key else None

    def crumbs(self) -> str:
        return f"Goals › {self.goal_id} › Runs   (escape: back)"

    def words(self) -> str | None:
        if self.selected_key is None:
            return None
        row = self.selected_row()
        return cells.run_words(row) if row else ""

    @on(DataTable.RowSelected)
    def _opened(self, event: DataTable.RowSelected) -> None:
        event.stop()
        if key := event.row_key.value:
            self.post_message(self.Opened(key))
