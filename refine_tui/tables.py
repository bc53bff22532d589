"""The drill-down tables, Runs and Attempts (and this node's Workers): each keeps the rows it
shows and opens on the row an operator wants first. (The Goals list is
``refine_tui.goal_list``.)"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from refine_tui.cells import (
    ATTEMPT_COLUMNS,
    RUN_COLUMNS,
    WORKER_COLUMNS,
    Cells,
    run_cells,
    worker_cells,
)
from refine_tui.observe import LastObservations
from refine_tui.rows import AttemptRow, RunRow, WorkerRow
from refine_tui.widgets.keyed_table import KeyedTable


def last_attempt(run_id: str, attempts: str) -> tuple[str, int] | None:
    """(run_id, epoch) of a Run's latest attempt, from its "used/budget" text (None: none yet)."""
    used = int(attempts.split("/")[0] or 0) if attempts else 0
    return (run_id, used) if used else None


class RunTable(KeyedTable):
    """The focused Goal's Runs."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(RUN_COLUMNS, **kwargs)
        self.runs: dict[str, RunRow] = {}  # (DataTable has its own .rows)

    def show(self, runs: list[RunRow]) -> None:
        self.runs = {r.run_id: r for r in runs}
        opening = not self.keys()
        self.sync({r.run_id: run_cells(r) for r in runs})
        if opening and runs:  # open on the current (latest) round
            self.select(runs[-1].run_id)

    def selected_row(self) -> RunRow | None:
        key = self.selected_key
        return self.runs.get(key) if key else None


class AttemptTable(KeyedTable):
    """The focused Run's Attempts, each with its last process observation."""

    def __init__(self, cells: Callable[[AttemptRow], Cells], **kwargs: Any) -> None:
        super().__init__(ATTEMPT_COLUMNS, **kwargs)
        self.cells = cells  # widths and the clock are the App's
        self.attempts: dict[str, AttemptRow] = {}
        self.last_observed = LastObservations()

    def show(self, attempts: list[AttemptRow]) -> None:
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

    def selected_row(self) -> AttemptRow | None:
        key = self.selected_key
        return self.attempts.get(key) if key else None


class WorkerTable(KeyedTable):
    """This node's worker processes; the row line shows the selected one's command whole."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(WORKER_COLUMNS, **kwargs)
        self.processes: dict[str, WorkerRow] = {}  # (DOMNode has its own .workers)

    def show(self, workers: list[WorkerRow]) -> None:
        self.processes = {f"{w.run_id}/{w.epoch}": w for w in workers}
        self.sync({key: worker_cells(w) for key, w in self.processes.items()})
