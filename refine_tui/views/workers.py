"""The Workers view: this node's worker processes, looked at every few seconds while shown;
the row line shows the selected one's command whole."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping

from refine_tui import cells
from refine_tui.cells import BASE_WIDTHS, WORKER_COLUMNS, worker_cells
from refine_tui.follow import JournalFollower
from refine_tui.rows import Reader, WorkerRow
from refine_tui.views.base import TableView
from store.errors import RefineError


class WorkersView(TableView):
    VIEW = "workers"

    def __init__(self, follower: JournalFollower) -> None:
        super().__init__(WORKER_COLUMNS, follower)
        self.processes: dict[str, WorkerRow] = {}  # (DOMNode has its own .workers)
        self.width = BASE_WIDTHS["argv"]  # the Command column's, grown on wide terminals

    def show(self, workers: list[WorkerRow]) -> None:
        self.processes = {f"{w.run_id}/{w.epoch}": w for w in workers}
        self.sync({key: worker_cells(w, self.width) for key, w in self.processes.items()})

    def set_widths(self, widths: Mapping[str, int]) -> None:
        if widths["argv"] == self.width:
            return
        self.width = widths["argv"]
        self.set_width("argv", self.width)
        self.show(list(self.processes.values()))

    async def look(self, reader: Reader) -> None:
        """The processes as they are now (a registry that cannot be read: as they were)."""
        with contextlib.suppress(RefineError, OSError):
            self.show(await asyncio.to_thread(reader.worker_rows))

    def crumbs(self, node: str) -> str:
        return f"Workers on node {node}   (escape: back)"

    def words(self) -> str | None:
        key = self.selected_key
        if key is None:
            return None
        row = self.processes.get(key)
        return cells.worker_words(row) if row else ""
