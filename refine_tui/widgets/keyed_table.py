"""A DataTable updated in place by row key, never cleared and refilled.

``clear()`` + refill resets the cursor and the scroll; here rows are diffed (Dolphie's pattern):
removed keys go, changed cells are written one by one, new keys are appended, and the cursor
stays on the same row *key* when rows above it disappear.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rich.console import RenderableType
from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey, RowDoesNotExist


@dataclass(frozen=True)
class Column:
    key: str
    label: str
    width: int | None = None  # None: sized to content (use for the last column only)


Cells = Sequence[RenderableType]
REBUILD_AT = 100  # removing more rows than this (and most of them) rebuilds the table once


class KeyedTable(DataTable[RenderableType]):
    """Row-cursor table whose rows are addressed by string keys."""

    def __init__(self, columns: Sequence[Column], **kwargs: object) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)  # type: ignore[arg-type]
        self.spec = tuple(columns)
        self._cells: dict[str, tuple[RenderableType, ...]] = {}

    def on_mount(self) -> None:
        for column in self.spec:
            self.add_column(column.label, key=column.key, width=column.width)

    @property
    def selected_key(self) -> str | None:
        if not self._cells or self.cursor_row < 0 or self.cursor_row >= self.row_count:
            return None
        row_key, _ = self.coordinate_to_cell_key(self.cursor_coordinate)
        return row_key.value

    def keys(self) -> list[str]:
        return list(self._cells)

    def select(self, key: str) -> None:
        with contextlib.suppress(RowDoesNotExist):
            self.move_cursor(row=self.get_row_index(key), animate=False)

    def set_width(self, column_key: str, width: int) -> None:
        """Resize a fixed-width column (wider terminals give the text columns more room)."""
        column = self.columns.get(ColumnKey(column_key))
        if column is None or column.width == width:
            return
        column.width = width
        self._require_update_dimensions = True
        self._clear_caches()
        self.refresh()

    def upsert(self, key: str, cells: Cells) -> None:
        """Add the row, or write only the cells that changed."""
        new = tuple(cells)
        old = self._cells.get(key)
        if old is None:
            self.add_row(*new, key=key)
        else:
            for column, before, after in zip(self.spec, old, new, strict=True):
                if before != after:
                    self.update_cell(key, column.key, after, update_width=column.width is None)
        self._cells[key] = new

    def drop(self, key: str) -> None:
        if key not in self._cells:
            return
        selected = self.selected_key
        index = self.cursor_row
        del self._cells[key]
        self.remove_row(key)
        if selected is not None and selected != key:
            self.select(selected)  # rows above moved up: follow the key, not the index
        elif self.row_count:
            self.move_cursor(row=min(index, self.row_count - 1), animate=False)

    def sync(self, rows: Mapping[str, Cells]) -> None:
        """Make the table hold exactly ``rows`` (in their order for new keys)."""
        gone = [k for k in self._cells if k not in rows]
        with self.app.batch_update():
            if len(gone) > REBUILD_AT and len(gone) * 2 > len(self._cells):
                self._rebuild(rows)
                return
            for key in gone:
                self.drop(key)
            for key, cells in rows.items():
                self.upsert(key, cells)

    def _rebuild(self, rows: Mapping[str, Cells]) -> None:
        """Replace most rows at once (a new filter): DataTable's remove_row is O(n) per row.

        Only for an operator's own change of the row set; the cursor goes back to its key.
        """
        selected = self.selected_key
        self.clear()
        self._cells = {}
        for key, cells in rows.items():
            self.upsert(key, cells)
        if selected is not None and selected in self._cells:
            self.select(selected)
