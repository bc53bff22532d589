"""The views, one shown at a time: Goals → Runs → Attempts, and Workers.

``ViewStack`` is where the operator is: which view is shown, and the Goal and Run the deeper
views are about (theirs: ``RunsView.goal_id``, ``AttemptsView.run_id``). Drilling down (enter on
a row: the views' ``Opened``) and back happen here; each move goes up as ``ViewStack.Moved``.
It answers what the actions, the detail pane and the row line apply to, from its views.
"""

from __future__ import annotations

import asyncio

from textual import on
from textual.message import Message
from textual.widgets import ContentSwitcher

from refine_tui.detail import DetailTarget
from refine_tui.keys import Selection
from refine_tui.rows import GoalRow, Reader
from refine_tui.views.attempts import AttemptsView
from refine_tui.views.base import TableView
from refine_tui.views.goals import GoalsView
from refine_tui.views.nodes import NodesView
from refine_tui.views.runs import RunsView, last_attempt
from refine_tui.views.workers import WorkersView


class ViewStack(ContentSwitcher):
    """Shows one of its views; ``node``: this dashboard's."""

    class Moved(Message):
        """Another view is shown (or the same one, about another Goal or Run)."""

    def __init__(
        self,
        goals: GoalsView,
        runs: RunsView,
        attempts: AttemptsView,
        workers: WorkersView,
        nodes: NodesView,
        *,
        node: str,
    ) -> None:
        super().__init__(goals, runs, attempts, workers, nodes, id="views", initial=goals.id)
        self.nodes = nodes
        self.goals, self.runs, self.attempts = goals, runs, attempts
        self.workers_view = workers  # (DOMNode.workers is its worker manager)
        self.node = node
        self.shown: TableView = goals

    @property
    def view(self) -> str:
        """The view shown: goals, runs, attempts, workers or nodes."""
        return self.shown.VIEW

    def show(self, view: TableView) -> None:
        self.shown = view
        self.current = view.id
        self.goals.follower.wants.view = view.VIEW
        view.focus()
        self.post_message(self.Moved())

    @on(GoalsView.Opened)
    def _open_runs(self, message: GoalsView.Opened) -> None:
        self.open_runs(message.goal)

    def open_runs(self, goal: GoalRow) -> None:
        self.attempts.close()
        self.runs.open(goal)
        self.show(self.runs)

    @on(RunsView.Opened)
    def _open_attempts(self, message: RunsView.Opened) -> None:
        self.attempts.open(message.run_id)
        self.show(self.attempts)

    def back(self) -> None:
        """One view up: Attempts → Runs → Goals; Workers, Nodes → Goals."""
        if self.shown is self.attempts:
            self.show(self.runs)
            self.attempts.close()
        elif self.shown is not self.goals:
            self.home()

    def home(self) -> None:
        """The Goals view, about no Goal."""
        self.runs.close()
        self.attempts.close()
        self.show(self.goals)

    def crumbs(self) -> str:
        """Where the operator is, and the way back."""
        if self.shown is self.runs:
            return self.runs.crumbs()
        if self.shown is self.attempts:
            return self.attempts.crumbs(self.runs.goal_id)
        if self.shown is self.workers_view:
            return self.workers_view.crumbs(self.node)
        if self.shown is self.nodes:
            return self.nodes.crumbs()
        return self.goals.crumbs()

    # --- what is selected -------------------------------------------------------------------

    def selection(self, *, read_only: bool, journal_state: str) -> Selection:
        """What the actions apply to, and what they depend on besides."""
        return Selection(
            node=self.node,
            read_only=read_only,
            journal_state=journal_state,
            view=self.view,
            goal=self.selected_goal(),
            attempt=self.selected_attempt(),
            run_id=self.selected_run(),
            presence=self.nodes.selected_row() if self.shown is self.nodes else None,
        )

    def focused_goal(self) -> GoalRow | None:
        """The Goal the Runs and Attempts views are about, as the Goals list has it."""
        return self.goals.listed.get(self.runs.goal_id or "")

    def selected_goal(self) -> GoalRow | None:
        if self.shown is self.goals:
            return self.goals.selected_row()
        return self.focused_goal()

    def selected_attempt(self) -> tuple[str, int] | None:
        """(run_id, epoch) the attempt-level actions (log, cleanup) apply to."""
        if self.shown is self.attempts:
            row = self.attempts.selected_row()
            return (row.run_id, row.epoch) if row else None
        if self.shown is self.runs and (run := self.runs.selected_row()):
            return last_attempt(run.run_id, run.attempts)
        goal = self.selected_goal()
        if goal is None or goal.run_id is None:
            return None
        if goal.running_epoch is not None:
            return (goal.run_id, goal.running_epoch)
        return last_attempt(goal.run_id, goal.attempts)

    def selected_run(self) -> str | None:
        if self.shown is self.runs:
            return self.runs.selected_key
        if self.shown is self.attempts:
            return self.attempts.run_id
        goal = self.selected_goal()
        return goal.run_id if goal else None

    def detail_target(self) -> DetailTarget:
        """The selection as the detail pane needs it."""
        goal = self.focused_goal() or self.selected_goal()
        return DetailTarget(
            run_id=self.selected_run(),
            attempt=self.selected_attempt(),
            node_id=goal.node_id if goal else self.node,
            running=(goal.run_id, goal.running_epoch) if goal else None,
        )

    def words(self) -> str | None:
        """The selected row in words, whole (None: the table has no row selected)."""
        if self.shown is self.attempts:
            goal = self.focused_goal()
            return self.attempts.words(goal.node_id if goal and goal.node_id != self.node else None)
        return self.shown.words()

    async def rechecks(self, reader: Reader) -> list[str]:
        """(a look at this node's processes, which die without commits) The Goals to read
        again: the visible ones and the one the views are about whose liveness changed, and
        the one the Attempts view shows (its processes' CPU and memory)."""
        running = [r for r in self.goals.watched(self.runs.goal_id) if r.status == "running"]
        recheck = await asyncio.to_thread(reader.liveness_changed, running) if running else []
        if self.shown is self.attempts and self.runs.goal_id:
            recheck.append(self.runs.goal_id)
        return recheck
