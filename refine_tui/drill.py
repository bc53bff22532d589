"""Where the operator is in Goals → Runs → Attempts (or Workers), and what is selected there.

``Drill`` owns the view and the Goal and Run the deeper views focus on; it answers what the
actions, the detail pane and the row line apply to, reading the tables' cursors. The App moves
it (``show``, ``focus``) and does what follows a move (crumbs, reads, the hint line).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from textual.app import App
from textual.widgets import ContentSwitcher

from refine_tui import cells
from refine_tui.detail import DetailTarget
from refine_tui.rows import GoalRow
from refine_tui.tables import AttemptTable, RunTable, WorkerTable, last_attempt
from refine_tui.widgets.keyed_table import KeyedTable


class Drill:
    """The view shown (goals, runs, attempts or workers) and the Goal and Run it is about."""

    def __init__(self, app: App[Any], goal_rows: Callable[[], Mapping[str, GoalRow]]) -> None:
        self.app = app
        self.goal_rows = goal_rows  # the listed Goals
        self.view = "goals"
        self.goal: str | None = None  # the Goal the Runs and Attempts views are about
        self.run: str | None = None  # the Run the Attempts view is about

    def table(self) -> KeyedTable:
        return self.app.query_one(f"#{self.view}", KeyedTable)

    def show(self, view: str) -> None:
        self.view = view
        self.app.query_one("#views", ContentSwitcher).current = view

    def open_runs(self, goal_id: str) -> None:
        self.goal, self.run = goal_id, None
        self.app.query_one(RunTable).sync({})

    def open_attempts(self, run_id: str) -> None:
        self.run = run_id
        self.app.query_one(AttemptTable).sync({})

    def crumbs(self, node: str) -> str:
        """Where the operator is, and the way back (the Goals view's are the App's: the filter)."""
        if self.view == "runs":
            return f"Goals › {self.goal} › Runs   (escape: back)"
        if self.view == "attempts":
            return f"Goals › {self.goal} › {self.run} › Attempts   (escape: back)"
        if self.view == "workers":
            return f"Workers on node {node}   (escape: back)"
        return "Goals"

    # --- what is selected ---------------------------------------------------------------------

    def selected_goal(self) -> GoalRow | None:
        if self.view == "goals":
            key = self.app.query_one("#goals", KeyedTable).selected_key
        else:
            key = self.goal
        return self.goal_rows().get(key) if key else None

    def selected_attempt(self) -> tuple[str, int] | None:
        """(run_id, epoch) the attempt-level actions (log, cleanup) apply to."""
        if self.view == "attempts":
            row = self.app.query_one(AttemptTable).selected_row()
            return (row.run_id, row.epoch) if row else None
        if self.view == "runs" and (run := self.app.query_one(RunTable).selected_row()):
            return last_attempt(run.run_id, run.attempts)
        goal = self.selected_goal()
        if goal is None or goal.run_id is None:
            return None
        if goal.running_epoch is not None:
            return (goal.run_id, goal.running_epoch)
        return last_attempt(goal.run_id, goal.attempts)

    def selected_run(self) -> str | None:
        if self.view == "runs":
            return self.app.query_one(RunTable).selected_key
        if self.view == "attempts":
            return self.run
        goal = self.selected_goal()
        return goal.run_id if goal else None

    def detail_target(self, node: str) -> DetailTarget:
        """The selection as the detail pane needs it (``node``: this dashboard's)."""
        goal = self.goal_rows().get(self.goal or "") or self.selected_goal()
        return DetailTarget(
            run_id=self.selected_run(),
            attempt=self.selected_attempt(),
            node_id=goal.node_id if goal else node,
            running=(goal.run_id, goal.running_epoch) if goal else None,
        )

    def selected_words(self, node: str) -> str | None:
        """The selected row in words, whole: what the columns had to cut at 80 columns (None:
        the table has no row selected). ``node``: this dashboard's."""
        key = self.table().selected_key
        if key is None:
            return None
        if self.view == "goals" and (g := self.goal_rows().get(key)):
            return cells.goal_words(g)
        if self.view == "runs" and (r := self.app.query_one(RunTable).runs.get(key)):
            return cells.run_words(r)
        if self.view == "attempts" and (a := self.app.query_one(AttemptTable).attempts.get(key)):
            goal = self.goal_rows().get(self.goal or "")
            return cells.attempt_words(a, goal.node_id if goal and goal.node_id != node else None)
        if self.view == "workers" and (w := self.app.query_one(WorkerTable).processes.get(key)):
            return cells.worker_words(w)
        return ""
