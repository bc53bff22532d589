"""The Attempts view: the Attempts of the Run it is about, each with its last process
observation, opened on the running (else the latest) one.

Its part of the read is that Run (``follower.wants.run_id``); enter on an Attempt goes up as
``AttemptsView.Opened`` (its log).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from textual import on
from textual.message import Message
from textual.widgets import DataTable

from refine_tui import cells
from refine_tui.cells import ATTEMPT_COLUMNS, BASE_WIDTHS, Cells
from refine_tui.follow import JournalFollower
from refine_tui.observe import LastObservations
from refine_tui.rows import AttemptRow
from refine_tui.views.base import TableView
from store.ops.nodes import NodeView


class AttemptsView(TableView):
    """The Attempts of one Run (``run_id``; None: no Run is drilled into)."""

    VIEW = "attempts"

    class Opened(Message):
        """enter on an Attempt: its log."""

    def __init__(self, follower: JournalFollower, clock: Callable[[], float]) -> None:
        super().__init__(ATTEMPT_COLUMNS, follower)
        self.attempts: dict[str, AttemptRow] = {}
        self.last_observed = LastObservations()
        self.clock = clock
        # Grown on wide terminals; the State fits "interrupted (… by dana@n1)".
        self.widths = {k: BASE_WIDTHS[k] for k in ("state", "worker")}
        self.run_id: str | None = None
        self.presence: NodeView | None = None  # the attempts' node, when it is another one

    def cells(self, a: AttemptRow) -> Cells:
        return cells.attempt_cells(a, self.widths, self.clock, self.presence)

    def open(self, run_id: str) -> None:
        """Show ``run_id``'s Attempts (read from the journal next)."""
        self.run_id, self.presence = run_id, None
        self.sync({})
        self.follower.wants.run_id = run_id
        self.follower.wake(full=True)

    def close(self) -> None:
        self.run_id = self.follower.wants.run_id = None

    def show(self, attempts: list[AttemptRow], presence: NodeView | None = None) -> None:
        """The Attempts slice of a journal update (``presence``: their node's, another one)."""
        self.presence = presence
        attempts = [self.last_observed(a) for a in attempts]
        self.attempts = {str(a.epoch): a for a in attempts}
        opening = not self.keys()
        self.sync({str(a.epoch): self.cells(a) for a in attempts})
        if opening and attempts:  # open on the running (else the latest) attempt
            latest = next((a for a in attempts if a.running), attempts[-1])
            self.select(str(latest.epoch))

    def redraw(self, running_only: bool = False) -> None:
        """The rows again (the widths changed), or only the running ones (their duration)."""
        for key, a in self.attempts.items():
            if a.running or not running_only:
                self.upsert(key, self.cells(a))

    def tick(self) -> None:
        """The running attempts' durations."""
        self.redraw(running_only=True)

    def selected_row(self) -> AttemptRow | None:
        key = self.selected_key
        return self.attempts.get(key) if key else None

    def set_widths(self, widths: Mapping[str, int]) -> None:
        mine = {k: widths[k] for k in self.widths}
        if mine == self.widths:
            return
        self.widths = mine
        for key, width in mine.items():
            self.set_width(key, width)
        self.redraw()

    def crumbs(self, goal_id: str | None) -> str:
        return f"Goals › {goal_id} › {self.run_id} › Attempts   (escape: back)"

    def words(self, elsewhere: str | None = None) -> str | None:
        """``elsewhere``: the node the Goal runs on, when it is not this dashboard's."""
        if self.selected_key is None:
            return None
        row = self.selected_row()
        return cells.attempt_words(row, elsewhere, self.presence) if row else ""

    @on(DataTable.RowSelected)
    def _opened(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.post_message(self.Opened())
