"""The Goals list as the table shows it: the listed rows, and a new list going into the table a
chunk per turn of the event loop (keys and messages handled between chunks).

``GoalList`` owns the listed rows and the fill's state; the App gives it the table and how a row
becomes cells, and calls it with each journal update.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import Any

from textual.app import App

from refine_tui import format as fmt
from refine_tui.cells import Cells
from refine_tui.rows import GoalRow
from refine_tui.widgets.keyed_table import KeyedTable

# A long list (a filter's ~1,200 rows) goes into the table this many rows per turn of the event
# loop, keys handled between turns: all at once it held them for 40–400 ms at 100,000 Goals.
FILL_CHUNK = 200


class GoalList:
    """The listed Goals: ``rows`` (in list order), some of them not in the table yet."""

    def __init__(
        self,
        app: App[Any],
        table: Callable[[], KeyedTable],
        cells: Callable[[GoalRow], Cells],
    ) -> None:
        self.app = app
        self.table = table
        self.cells = cells
        self.rows: dict[str, GoalRow] = {}  # the listed Goals: the table's and unfilled
        self.unfilled: dict[str, None] = {}  # listed Goals not in the table yet, in list order
        self.generation = 0  # a newer list cancels the chunks an older one has left

    @property
    def filling(self) -> bool:
        """Part of the list is still on its way into the table, a chunk per turn."""
        return bool(self.unfilled)

    def show(self, rows: dict[str, GoalRow]) -> None:
        """Make ``rows`` the Goals list: its first chunk and the rows already shown at once
        (the cursor stays on its key), the rest a chunk per turn of the event loop."""
        goals = self.table()
        self.rows = rows
        self.generation += 1
        keys = list(rows)
        shown = set(goals.keys())
        now = [k for i, k in enumerate(keys) if i < FILL_CHUNK or k in shown]
        self.unfilled = dict.fromkeys(k for k in keys[FILL_CHUNK:] if k not in shown)
        goals.sync({k: self.cells(rows[k]) for k in now})
        if self.unfilled:
            self.app.call_after_refresh(self._fill, self.generation)

    def _fill(self, generation: int) -> None:
        """The next chunk of the list; queued keys and messages are handled before the next."""
        if generation != self.generation or not self.app.is_running:
            return  # a newer list took its place, or the app is closing
        goals = self.table()
        with self.app.batch_update():
            for key in list(itertools.islice(self.unfilled, FILL_CHUNK)):
                del self.unfilled[key]
                goals.upsert(key, self.cells(self.rows[key]))
            if not self.unfilled:  # rows the table held beyond the first chunk: into place
                goals.order(list(self.rows))
        if self.unfilled:
            self.app.call_after_refresh(self._fill, generation)

    def stop(self) -> None:
        """Another list was asked for: the rest of this one is not shown."""
        self.generation += 1
        for key in self.unfilled:
            self.rows.pop(key, None)
        self.unfilled = {}

    def apply(
        self, changes: Mapping[str, GoalRow | None], matches: Callable[[GoalRow], bool]
    ) -> None:
        """Rows a commit changed (None: gone); a new row is listed if it ``matches``."""
        goals = self.table()
        for key, row in changes.items():
            if row is None:
                self.rows.pop(key, None)
                self.unfilled.pop(key, None)
                goals.drop(key)
            elif key in self.rows or matches(row):
                new = key not in self.rows
                self.rows[key] = row
                if key in self.unfilled or (new and self.unfilled):
                    self.unfilled[key] = None  # shown in its turn: the order holds
                else:
                    goals.upsert(key, self.cells(row))

    def tick(self, now: float) -> None:
        """The visible rows' elapsed times (a cell whose text did not change is not written)."""
        goals = self.table()
        for key in goals.visible_keys():
            row = self.rows.get(key)
            if row is not None and row.started_at is not None:
                goals.set_cell(key, "elapsed", fmt.duration(now - row.started_at))

    def redraw(self) -> None:
        """Every row in the table again (the widths changed)."""
        goals = self.table()
        for key, row in self.rows.items():
            if key not in self.unfilled:
                goals.upsert(key, self.cells(row))


def matches(row: GoalRow, text: str) -> bool:
    """The filter as a commit's row is judged by (the index judges a new list's)."""
    if not text:
        return True
    needle = text.lower()
    return any(needle in f.lower() for f in (row.goal_id, row.title, row.status, row.node_id))
