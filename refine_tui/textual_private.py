"""The one door to Textual's private names: what refine_tui uses of Textual beyond its public
API goes through here, and nowhere else (``lint-imports`` and tests/unit/test_textual_private.py
keep it so). Each use has a test there that fails loudly when a Textual upgrade changes it (the
name is gone, or its shape is not the one relied on), instead of the dashboard going wrong.

Why each is used (what the public API does not offer):

- ``DataTableDoor``, the base of ``KeyedTable``: writing a cell, adding a row or putting rows in
  order without DataTable's table-wide counter that re-renders every visible cell; reusing a
  cell's render by its content; one line of text rendered without Rich's render pipeline; a
  row's line kept by its key so a row that moved is not rendered again, and the row a mouse
  event is on set right for DataTable's handlers; with rows one line high, a line's row, a
  row's region and the fixed rows' room read off the row order (``_y_offsets``,
  ``_get_row_region``, ``_get_fixed_offset``) instead of lists rebuilt after each reorder; the
  row order kept without a ``RowKey`` made and hashed per row (``_row_locations``); a scrollbar
  of another class (``_vertical_scrollbar``, ``App._start_widget``: Textual's property makes a
  ``ScrollBar``). ``widgets/keyed_table.py`` and ``widgets/steady_scrollbar.py`` say why each
  is worth it, with their figures.
- ``FooterKey`` and its enabled flag, and the Footer's "bindings ready" flag: ``KeyFooter``
  updates key widgets in place instead of recomposing the footer.
- ``XTermParser`` / ``ParseError``, the parser's timeout and the driver's app, loop and debug
  flag: ``QuietLinuxDriver`` replaces ``LinuxDriver.run_input_thread`` with a loop that sleeps
  until input comes.
- ``CroppedCompositor`` (``crop_renders``): the screen's compositor with its ``_get_renders``
  overridden (and ``_render_chops`` wrapped, to know the update's lines): a partial update asks
  each widget only for the dirty lines it shows, and none that the widgets above it fill.
- ``replace_last_line``: the log pane shows a line still being printed (a progress bar) and
  writes its next form over it; ``Log`` only appends.
- For tests only: the notifications shown, the compositor's full render, the batch depth.

One module over 600 lines because it is the one door: the import contract and its tests name
this module alone, and its parts are grouped by what they serve (the compositor, the table, the
footer, the driver).

Textual uses that a public API now covers are not here: a region's repaint is
``Widget.refresh(region)``, a held paint is ``App.batch_update()`` entered and left by hand.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any, Self

from rich.cells import cell_len
from rich.console import RenderableType
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual._compositor import Compositor
from textual._parser import ParseError
from textual._time import get_time
from textual._xterm_parser import XTermParser
from textual.app import App
from textual.coordinate import Coordinate
from textual.driver import Driver
from textual.geometry import Region, Size, Spacing
from textual.notifications import Notification
from textual.screen import Screen
from textual.scrollbar import ScrollBar
from textual.strip import Strip
from textual.widgets import DataTable, Footer, Log
from textual.widgets._data_table import TwoWayDict  # type: ignore[attr-defined]  # not in its __all__
from textual.widgets._footer import FooterKey
from textual.widgets.data_table import CellKey, ColumnKey, RowKey

__all__ = [
    "DataTableDoor",
    "FooterKey",
    "ParseError",
    "XTermParser",
    "batch_depth",
    "crop_renders",
    "driver_app",
    "driver_debug",
    "driver_loop",
    "footer_ready",
    "key_enabled",
    "notifications",
    "parser_timeout",
    "render_screen",
    "set_key_enabled",
]

Lines = list[list[Segment]]


# --- the screen's compositor (crop_renders) -------------------------------------------------------


class CroppedCompositor(Compositor):
    """Textual's compositor, asking each widget only for the lines of an update it shows.

    For a partial update (a few dirty regions) Textual asks every widget whose *clip* (its
    container's region: for most, the screen) meets the update for *all* its lines, though
    only the dirty lines are used: a ticking elapsed cell's frame rendered the table's every
    line and 10 other widgets that lie nowhere near it. Here each widget renders only its lines
    from the first to the last dirty one, if it has any (its clip is cut to them, so
    ``_render_chops`` places the lines where they were).

    Widgets come top first, and the first strip to fill a cut wins: a widget whose lines the
    widgets above it already fill is not asked at all (the four containers under the Goals
    table were asked for every line of each update the table made).
    """

    _rendered_line: Callable[[int], bool] = staticmethod(lambda y: True)

    def _render_chops(
        self, crop: Region, is_rendered_line: Callable[[int], bool]
    ) -> Sequence[Mapping[int, Strip]]:
        self._rendered_line = is_rendered_line  # the update's lines, for _get_renders
        try:
            return super()._render_chops(crop, is_rendered_line)
        finally:
            del self._rendered_line

    def _get_renders(
        self, crop: Region | None = None
    ) -> Iterable[tuple[Region, Region, list[Strip]]]:
        if crop is None:
            yield from super()._get_renders(crop)
            return
        width, rendered = self.size.width, self._rendered_line
        filled: dict[int, list[tuple[int, int]]] = {}  # a line's spans the widgets above drew
        for widget, (region, clip) in self.visible_widgets.items():
            shown = region.intersection(clip)
            if not crop.overlaps(shown):
                continue
            # Only the update's columns are sent: the rest of a line need not be filled.
            left, right = max(shown.x, crop.x), min(shown.right, crop.right)
            lines_met = range(max(shown.y, crop.y), min(shown.bottom, crop.bottom))
            todo = [
                y
                for y in lines_met
                if rendered(y) and not spans_fill(filled.get(y, ()), left, right)
            ]
            if not todo:
                continue
            clip = clip.intersection(Region(0, todo[0], width, todo[-1] - todo[0] + 1))
            lines = region.intersection(clip)
            strips = widget.render_lines(lines.translate(-region.offset))
            if len(strips) >= lines.height:  # (a short render leaves its last lines to others)
                for y in todo:
                    filled.setdefault(y, []).append((lines.x, lines.right))
            yield region, clip, strips


def spans_fill(spans: Iterable[tuple[int, int]], left: int, right: int) -> bool:
    """The spans (x, end) together cover every column from ``left`` to ``right``."""
    x = left
    for start, end in sorted(spans):
        if start > x:
            break
        x = max(x, end)
    return x >= right


def crop_renders(screen: Screen[Any]) -> None:
    """Let ``screen`` render updates with ``CroppedCompositor`` (call before it is mounted)."""
    screen._compositor = CroppedCompositor()


class DataTableDoor(DataTable[RenderableType]):
    """DataTable with the private members ``KeyedTable`` relies on, each behind a named method.

    Private methods are overridden here only: to call public-named hooks (``render_cell`` for
    ``_render_cell``, ``caches_cleared``, ``render_table_line`` for ``_render_line``,
    ``place_mouse_meta`` before the mouse handlers), and, for rows one line high
    (``one_line_rows``), ``_y_offsets`` and ``_get_row_region``.
    """

    # --- hooks ----------------------------------------------------------------------------------

    def _render_cell(
        self,
        row_index: int,
        column_index: int,
        base_style: Style,
        width: int,
        cursor: bool = False,
        hover: bool = False,
    ) -> Lines:
        return self.render_cell(row_index, column_index, base_style, width, cursor, hover)

    def render_cell(
        self,
        row_index: int,
        column_index: int,
        base_style: Style,
        width: int,
        cursor: bool = False,
        hover: bool = False,
    ) -> Lines:
        """DataTable's render of one cell: its lines of segments (override to reuse renders)."""
        return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)

    def _clear_caches(self) -> None:
        super()._clear_caches()
        self.caches_cleared()

    def caches_cleared(self) -> None:
        """DataTable dropped its render caches (a style, width or cursor change)."""

    def _render_line(self, y: int, x1: int, x2: int, base_style: Style) -> Strip:
        return self.render_table_line(y, x1, x2, base_style)

    def render_table_line(self, y: int, x1: int, x2: int, base_style: Style) -> Strip:
        """DataTable's render of the table's line ``y`` (from its top, the header included),
        cells ``x1``..``x2``: override to reuse renders. Its cells carry their row's index then
        (mouse meta), which ``place_mouse_meta`` puts right when a render moves."""
        return super()._render_line(y, x1, x2, base_style)

    def _on_mouse_move(self, event: events.MouseMove) -> None:
        self.place_mouse_meta(event)  # then DataTable's own handler reads the meta (MRO order)

    async def _on_click(self, event: events.Click) -> None:
        self.place_mouse_meta(event)

    def place_mouse_meta(self, event: events.MouseEvent) -> None:
        """Before DataTable reads the row a mouse event is on from its meta: set it right."""

    # --- the scrollbar --------------------------------------------------------------------------

    @property
    def vertical_scrollbar(self) -> ScrollBar:
        """The vertical scrollbar, made by ``make_vertical_scrollbar`` (Textual's own property
        makes a ``ScrollBar``, with no hook for another class)."""
        if self._vertical_scrollbar is None:
            bar = self.make_vertical_scrollbar(self.scrollbar_size_vertical)
            bar.display = False
            self._vertical_scrollbar = bar
            self.app._start_widget(self, bar)
        return self._vertical_scrollbar

    def make_vertical_scrollbar(self, thickness: int) -> ScrollBar:
        """A new vertical scrollbar (override for another kind)."""
        return ScrollBar(vertical=True, name="vertical", thickness=thickness)

    # --- rows -----------------------------------------------------------------------------------

    def one_line_rows(self) -> bool:
        """Every row is one line high (override to say so): the table's line → row map and a
        row's region are then read off the row order, not off lists rebuilt after each reorder."""
        return False

    # DataTable rebuilds its line → row list (O(n)) whenever its counter moves, which a new Goal
    # above the cursor does, and a row's region sums the heights of the rows above it in a list
    # of the rows in order, also rebuilt (O(n)): ≈ 5 % of a dashboard's CPU under 50 new Goals
    # a second, profiled.
    @property
    def _y_offsets(self) -> list[tuple[RowKey, int]] | _RowLines:  # type: ignore[override]
        if not self.one_line_rows():
            return super()._y_offsets
        return _RowLines(self._row_locations, self.row_count)

    def _get_fixed_offset(self) -> Spacing:
        """The fixed rows' and columns' room, without DataTable's list of every row in order
        (built anew after each reorder, for every cursor move: ≈ 5 % of a dashboard's CPU under
        50 new Goals a second, profiled) when rows are one line high."""
        if not self.one_line_rows():
            return super()._get_fixed_offset()
        top = self.header_height if self.show_header else 0
        top += min(self.fixed_rows, self.row_count)
        columns = self.ordered_columns[: self.fixed_columns]
        left = sum(column.get_render_width(self) for column in columns)
        return Spacing(top, 0, 0, left + self._row_label_column_width)

    def _get_row_region(self, row_index: int) -> Region:
        if not self.one_line_rows() or not self.is_valid_row_index(row_index):
            return super()._get_row_region(row_index)
        widths = sum(column.get_render_width(self) for column in self.columns.values())
        y = row_index + (self.header_height if self.show_header else 0)  # one line a row above
        return Region(0, y, max(self.size.width, widths + self._row_label_column_width), 1)

    def row_at_line(self, y: int) -> tuple[RowKey, int] | None:
        """The data row on the table's line ``y`` (from its top, the header included) and the
        line within it; None: the header's line or past the last row."""
        try:
            row_key, line = self._get_offsets(y)
        except LookupError:
            return None
        return None if row_key == self._header_row_key else (row_key, line)

    def row_index_of(self, row_key: RowKey) -> int | None:
        return self._row_locations.get(row_key)

    def hover_shown(self) -> bool:
        """The hover cursor is drawn (the mouse moved over the table since the last key)."""
        return bool(self._show_hover_cursor)

    def has_row_labels(self) -> bool:
        """Some row has a label (DataTable then shows a labels column)."""
        return bool(self._labelled_row_exists)

    def row_key_at(self, row_index: int) -> RowKey | None:
        """The key of the row at ``row_index`` (None: no such row), without the checks and the
        exception of ``coordinate_to_cell_key``: this is on the render path."""
        return self._row_locations.get_key(row_index)

    def remove_rows(self, keys: Collection[str]) -> None:
        """``DataTable.remove_row`` for many rows at once: the row order is made once, where
        ``remove_row`` makes a new one for each row removed (O(rows) in Python each)."""
        gone = set(keys)
        kept = [str(text) for text in self._row_order().texts() if str(text) not in gone]
        for key in gone:
            row_key = RowKey(key)
            for column_key in self._data.get(row_key, {}):
                self._updated_cells.discard(CellKey(row_key, column_key))
            del self.rows[row_key]
            del self._data[row_key]
        self._row_locations = _RowOrder.of(self._row_locations, kept)
        self._require_update_dimensions = True
        self.cursor_coordinate = self.cursor_coordinate  # clamped to the rows left
        self.hover_coordinate = self.hover_coordinate
        self._update_count += 1
        self.refresh(layout=True)

    def set_row_order(self, keys: Iterable[str]) -> None:
        """Put the rows (exactly ``keys``) in that order, as ``DataTable.sort`` does."""
        self._row_locations = _RowOrder.of(self._row_locations, keys)
        self._update_count += 1

    def move_row(self, key: str, index: int) -> None:
        """Move the row ``key`` to ``index``, the rows between shifting by one: O(rows moved)
        in C, where putting every row in order again is O(rows) in Python."""
        self._row_order().move(key, index)
        self._update_count += 1

    def row_texts(self) -> list[str]:
        """The rows' keys, in row order."""
        return [str(text) for text in self._row_order().texts()]

    def _row_order(self) -> _RowOrder:
        """The row order as a ``_RowOrder`` (DataTable's own map until the first reorder, and
        again after ``remove_row``, which builds a new one)."""
        rows = self._row_locations
        if not isinstance(rows, _RowOrder):
            rows = self._row_locations = _RowOrder.of_map(rows)
        return rows

    def add_row_in_place(self, cells: Iterable[RenderableType], key: str) -> None:
        """A new last row of fixed-width columns: the rows above it keep their cached renders,
        and its cells are not measured (``add_row`` bumps the table-wide counter and measures)."""
        count = self._update_count
        self.add_row(*cells, key=key)
        self._update_count = count
        self._offset_cache.clear()  # y → row, keyed by the counter alone
        self._new_rows.discard(RowKey(key))

    def write_cell_in_place(
        self, row_key: RowKey, column_key: ColumnKey, value: RenderableType
    ) -> None:
        """Write a cell's value without ``update_cell``'s table-wide re-render; the caller
        drops its renders (``forget_cell_renders``) and repaints its region."""
        self._data[row_key][column_key] = value

    def settle_dimensions(self) -> None:
        """Size the table for rows added or removed now, as DataTable does when idle.

        Until then a cursor moved does not scroll (``move_cursor`` waits for the frame after),
        so a row added above the cursor cost up to three frames: the rows moved, the table
        re-sized (a layout), then the scroll (≈ 7 ms of the ≈ 33 a new Goal cost, measured).
        Only for a table whose own size does not follow its rows (a height that is not auto):
        one that does is laid out anew first, and a scroll now would use its old height.
        """
        height = self.styles.height
        if height is None or height.is_auto:
            return
        if self._require_update_dimensions:
            self._require_update_dimensions = False
            new_rows = self._new_rows.copy()
            self._new_rows.clear()
            self._update_dimensions(new_rows)

    # DataTable sets its virtual size last in ``_update_dimensions``, a reactive that repaints
    # the whole table as well as laying it out: each new Goal drew every line of the window
    # again (through Textual's styles cache: ≈ 15 % of a dashboard's CPU under 50 new Goals a
    # second, profiled), though a row added off screen changes nothing in it. With rows one
    # line high and the width unchanged, the new height lays out only and the lines it added
    # are repainted where they are in the window (rows are added last; a row removed repaints
    # the table, and ``KeyedTable`` repaints the window when a reorder shows other rows in it).
    #
    # Nor a layout of the screen when the table's own size does not follow its rows (a height
    # that is not auto) and its width is the same: what a layout would do for the table is
    # ``_scroll_update`` (the scrollbar's length, whether it shows, the scroll clamped), which
    # asks for a layout itself if a scrollbar appears or goes (≈ 7 % of a dashboard's CPU under
    # 50 new Goals a second, profiled: the screen's reflow for each new row).
    _resizing: Size | None = None  # while setting the new height: the virtual size before

    def _update_dimensions(self, new_rows: Iterable[RowKey]) -> None:
        if not self.one_line_rows():
            return super()._update_dimensions(new_rows)
        before = self.virtual_size
        self._resizing = before
        try:
            super()._update_dimensions(new_rows)
        finally:
            self._resizing = None
        after = self.virtual_size
        if after.width != before.width:  # a column grew: every line may differ
            self.refresh()
        elif after.height > before.height:
            width = max(self.size.width, after.width)
            self.repaint_lines(Region(0, before.height, width, after.height - before.height))

    def refresh(
        self, *regions: Region, repaint: bool = True, layout: bool = False, recompose: bool = False
    ) -> Self:
        before = self._resizing
        if before is not None and layout and not regions and not recompose:
            repaint = False  # the new height (see ``_update_dimensions``)
            if self.virtual_size.width == before.width and not self._height_follows_rows():
                self._resizing = None  # a scrollbar that shows or goes asks for its layout
                try:
                    self._scroll_update(self.virtual_size)
                finally:
                    self._resizing = before
                return self
        return super().refresh(*regions, repaint=repaint, layout=layout, recompose=recompose)

    def _height_follows_rows(self) -> bool:
        height = self.styles.height
        return height is None or height.is_auto

    def repaint_lines(self, region: Region) -> None:
        """Repaint a region of the table (from its top, the header's line included) where it
        is in the window; nothing when it is out of it."""
        if self.window_region.overlaps(region):  # as DataTable refreshes a region of its own
            self.refresh(region.translate(-self.scroll_offset))

    def column_widths_changed(self) -> None:
        """A column's ``width`` was set: measure again and re-render."""
        self._require_update_dimensions = True
        self._clear_caches()

    @property
    def row_label_width(self) -> int:
        return self._row_label_column_width

    # --- rendering ------------------------------------------------------------------------------

    def render_state(self) -> tuple[object, ...]:
        """What every cell's render depends on besides its place, content and style."""
        return (self._show_hover_cursor, self._pseudo_class_state, self.show_cursor)

    def row_cell(self, row_index: int, column_index: int) -> RenderableType:
        """The renderable DataTable shows in a cell.

        A non-empty Text is shown as it is stored (DataTable's ``default_cell_formatter``
        returns a renderable unchanged), read without DataTable's render of the whole row
        (≈ 0.1 ms, for each ticking cell's frame); anything else as DataTable formats it.
        """
        row_key = self._row_locations.get_key(row_index)
        column_key = self._column_locations.get_key(column_index)
        datum = self._data.get(row_key, {}).get(column_key) if row_key and column_key else None
        if isinstance(datum, Text) and datum:  # an empty one is DataTable's _EMPTY_TEXT
            return datum
        return self._get_row_renderables(row_index).cells[column_index]

    def cell_styles(
        self, row_index: int, column_index: int, hover: bool, cursor: bool
    ) -> tuple[Style, Style]:
        """(component style, post style) DataTable renders a data cell with."""
        return self._get_styles_to_render_cell(
            False,
            False,
            row_index < self.fixed_rows or column_index < self.fixed_columns,
            hover,
            cursor,
            self.show_cursor,
            self._show_hover_cursor,
            self.cursor_foreground_priority == "css",
            self.cursor_background_priority == "css",
        )

    def row_style(self, row_index: int, base_style: Style) -> Style:
        return self._get_row_style(row_index, base_style)

    def forget_cell_renders(self, stale: Mapping[RowKey, set[ColumnKey]]) -> None:
        """Drop the cached renders of the ``stale`` cells; their rows' cached renders get the
        cells' new renders in place (the rest of each row is as it was).

        Cache keys (Textual 8): cell (row_key, column_key, ...), row (row_key, line, ...),
        row renderables (update_count, row_index); lines are keyed by y: drop them all.
        """
        indexes = {self._row_locations.get(row) for row in stale}
        _discard(self._cell_render_cache, lambda k: k[1] in stale.get(k[0], ()))
        _discard(self._row_renderable_cache, lambda k: k[1] in indexes)
        if self.fixed_columns or self._labelled_row_exists:
            _discard(self._row_render_cache, lambda k: k[0] in stale)
        else:
            self._patch_row_renders(stale)
        self._line_cache.clear()

    def _patch_row_renders(self, stale: Mapping[RowKey, set[ColumnKey]]) -> None:
        """Put the new renders of the written cells into their rows' cached renders.

        Rendering a row line from scratch looks up the header, row and background styles by
        walking the widget's ancestors, and the other cells of the row are as they were (the
        row's render was ≈ 30 % of a ticking elapsed cell's frame, profiled). The arguments
        are DataTable's own (``_render_line_in_row``, Textual 8), read from the row's cache key.
        """
        rows = self._row_render_cache
        for key in [k for k in rows.keys() if k[0] in stale]:  # noqa: SIM118 (LRUCache)
            row_key, line_no, base_style, cursor, hover, cursor_type = key[:6]
            render, row = rows.get(key), self._row_locations.get(row_key)
            rows.discard(key)  # LRUCache.set keeps an existing key's value
            if render is None or row is None:
                continue
            row_style = self._get_row_style(row, base_style)
            cells = list(render[1])
            for column_key in stale[row_key]:
                column = self.get_column_index(column_key)
                at = Coordinate(row, column)
                cells[column] = self._render_cell(
                    row,
                    column,
                    row_style,
                    self.ordered_columns[column].get_render_width(self),
                    cursor=self._should_highlight(cursor, at, cursor_type),
                    hover=self._should_highlight(hover, at, cursor_type),
                )[line_no]
            rows.set(key, (render[0], cells))


class _RowOrder(TwoWayDict[RowKey, int]):
    """DataTable's row key ↔ index map as the rows' keys in order and an index by their text.

    DataTable keeps it as two dicts, one keyed by ``RowKey``, whose hash and equality are Python
    methods: putting n rows in order cost n ``RowKey``s made and hashed (≈ 9 % of a dashboard's
    CPU under 50 new Goals a second at 2,000 rows, profiled). Here the same keys are reused and
    the index is keyed by their strings (hashed in C, the hash cached); a ``RowKey`` still finds
    its row (it hashes and compares as its string). What DataTable asks of it: ``get``,
    ``get_key``, ``contains_value``, ``in``, ``len``, iteration, and setting the next index
    (``add_row``). DataTable never deletes from it (``remove_row`` builds a new map). The texts
    are kept in a list too, so that one row moved (``move``) rewrites only the places between
    its old and new one, in C.
    """

    def __init__(self, keys: list[RowKey], texts: list[object]) -> None:
        self._keys, self._texts = keys, texts  # each row's key and its text (or itself)
        self._index = {text: i for i, text in enumerate(texts)}  # a key's text → its place

    @classmethod
    def of(cls, rows: TwoWayDict[RowKey, int], order: Iterable[str]) -> _RowOrder:
        """The map of the rows of ``rows`` (exactly ``order``) in the order of ``order``."""
        texts: list[object] = list(order)
        if isinstance(rows, _RowOrder):
            keys, index = rows._keys, rows._index
            reused = [keys[index[text]] for text in texts]
        else:
            known = {_slot(key): key for key in rows}
            reused = [known[text] for text in texts]
        return cls(reused, texts)

    @classmethod
    def of_map(cls, rows: TwoWayDict[RowKey, int]) -> _RowOrder:
        """DataTable's own map, as it orders its rows (by their places)."""
        keys = [key for key in (rows.get_key(i) for i in range(len(rows))) if key is not None]
        return cls(keys, [_slot(key) for key in keys])

    def texts(self) -> list[object]:
        return list(self._texts)

    def move(self, text: str, place: int) -> None:
        """Move the row ``text`` to ``place``; the rows between shift by one."""
        start = self._index[text]
        if not 0 <= place < len(self._keys):
            raise IndexError(f"row index {place} is not a row's ({len(self._keys)} rows)")
        self._keys.insert(place, self._keys.pop(start))
        self._texts.insert(place, self._texts.pop(start))
        low, high = min(start, place), max(start, place) + 1
        self._index.update(zip(self._texts[low:high], range(low, high), strict=True))

    def __setitem__(self, key: RowKey, value: int) -> None:
        if value == len(self._keys) and key not in self._index:
            self._keys.append(key)
            self._texts.append(_slot(key))
        elif 0 <= value < len(self._keys):
            del self._index[self._texts[value]]
            self._keys[value] = key
            self._texts[value] = _slot(key)
        else:
            raise IndexError(f"row index {value} is past the next one ({len(self._keys)})")
        self._index[_slot(key)] = value

    def __delitem__(self, key: RowKey) -> None:
        raise TypeError("rows leave a _RowOrder by a new order (DataTable never deletes here)")

    def __iter__(self) -> Iterator[RowKey]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key: object) -> bool:
        return key in self._index

    def get(self, key: RowKey) -> int | None:
        return self._index.get(key)

    def get_key(self, value: int) -> RowKey | None:
        return self._keys[value] if 0 <= value < len(self._keys) else None

    def contains_value(self, value: int) -> bool:
        return 0 <= value < len(self._keys)


def _slot(key: RowKey) -> object:
    """A row key's place in ``_RowOrder``'s index: its string (a key without one: itself)."""
    return key if key.value is None else key.value


class _RowLines:
    """DataTable's list of (row, line within it) for each line, for rows one line high: what
    DataTable asks of it (its length, a line by index, ``clear``), read off the row order."""

    def __init__(self, locations: Any, count: int) -> None:  # locations: TwoWayDict
        self._locations, self._count = locations, count

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, y: int) -> tuple[RowKey, int]:
        index = y + self._count if y < 0 else y
        if not 0 <= index < self._count:
            raise IndexError(y)
        return self._locations.get_key(index), 0

    def clear(self) -> None:
        """(DataTable.clear clears the list it got: here there is none to clear.)"""


def _discard(cache: Any, stale: Callable[[Any], bool]) -> None:  # cache: textual LRUCache
    for key in [k for k in cache.keys() if stale(k)]:  # noqa: SIM118 (LRUCache is not iterable)
        cache.discard(key)


# --- the footer's key widgets (KeyFooter) --------------------------------------------------------


def footer_ready(footer: Footer) -> None:
    """Tell the Footer its bindings are known (what ``Footer.bindings_changed`` sets first)."""
    footer._bindings_ready = True


def key_enabled(key: FooterKey) -> bool:
    return not key._disabled


def set_key_enabled(key: FooterKey, enabled: bool) -> None:
    """Enable or grey a key widget in place (its click rings the bell when greyed)."""
    key._disabled = not enabled
    key.set_class(not enabled, "-disabled")


# --- the Linux driver's input thread (QuietLinuxDriver) -----------------------------------------


def parser_timeout(parser: XTermParser) -> float | None:
    """Seconds until the parser gives up waiting for the rest of a sequence (a lone escape key
    becomes a key then, by ``parser.tick()``); None: it is not waiting."""
    due = parser._timeout_time
    return None if due is None else max(0.0, due - get_time())


def driver_app(driver: Driver) -> App[Any]:
    return driver._app


def driver_loop(driver: Driver) -> asyncio.AbstractEventLoop:
    return driver._loop


def driver_debug(driver: Driver) -> bool:
    return driver._debug


# --- the Log's last line (FollowLog) ------------------------------------------------------------


def replace_last_line(log: Log, text: str) -> None:
    """Write ``text`` over the Log's last line: a line still being printed (a progress bar's
    carriage returns) shown as it is now. The Log appends only; its lines and its cache of
    rendered lines (by line index) are private."""
    last = len(log._lines) - 1
    log._lines[last] = text
    log._render_line_cache.discard(last)
    log._width = max(log._width, cell_len(log._process_line(text)))
    log.virtual_size = Size(log._width, len(log._lines))
    log.refresh_lines(last)


# --- for tests ----------------------------------------------------------------------------------


def notifications(app: App[Any]) -> list[Notification]:
    """The notifications the app shows now."""
    return list(app._notifications)


def render_screen(screen: Screen[Any]) -> Any:
    """The screen rendered whole, as the compositor sends it to the terminal."""
    return screen._compositor.render_full_update()


def batch_depth(app: App[Any]) -> int:
    """How many ``batch_update`` are open (0: the app paints)."""
    return app._batch_count
