"""A DataTable updated in place by row key, never cleared and refilled.

``clear()`` + refill resets the cursor and the scroll; here rows are diffed (Dolphie's pattern):
removed keys go, changed cells are written one by one, new keys are appended, and the cursor
stays on the same row *key* when rows above it disappear.

Repaint only what changed. ``DataTable.update_cell`` bumps a table-wide counter that is part of
every render cache key, so one changed cell re-renders every visible cell (≈ 40 ms at 120×40,
profiled: most of the dashboard's CPU, once a second with ticking elapsed times, and the tail of
its commit-to-screen latency). A fixed-width cell cannot change the layout, so here it is written
into the table's data, only its own cached renders are dropped (before the next frame), and only
its row is repainted. What of this needs DataTable's private members is behind named methods of
``refine_tui.textual_private.DataTableDoor``, this table's base.

This is where text enters a table: a ``str`` cell becomes a literal ``Text`` (DataTable would
parse it as Rich markup) and every cell's control characters are made visible (``cell``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from rich.console import Console, ConsoleOptions, OverflowMethod, RenderableType
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.cache import LRUCache
from textual.color import Color
from textual.css.styles import RenderStyles
from textual.geometry import Region
from textual.scrollbar import ScrollBar
from textual.strip import Strip
from textual.widgets.data_table import ColumnKey, RowDoesNotExist, RowKey

from refine_tui.format import literal, literal_text
from refine_tui.textual_private import DataTableDoor
from refine_tui.widgets.steady_scrollbar import SteadyScrollBar


@dataclass(frozen=True)
class Column:
    key: str
    label: str
    width: int | None = None  # None: sized to content (use for the last column only)


Cells = Sequence[RenderableType]
REBUILD_AT = 10  # removing more rows than this rebuilds the table once (a new list)
CELL_RENDERS = 4_000  # cells' renders kept across new lists (a screen is ≈ 40 rows × 9 cells)
LINE_RENDERS = 2_000  # rows' lines kept by key (a screen is ≈ 40, in both stripes)


class KeyedTable(DataTableDoor):
    """Row-cursor table whose rows are addressed by string keys."""

    def __init__(self, columns: Sequence[Column], **kwargs: object) -> None:
        # Cell renders by what they depend on (place, content, style), not by row key and the
        # table-wide counter: a new list (a filter, a cleared filter) shows many of the same
        # cells at the same places (the same rows back, a status, an empty round).
        self._renders: LRUCache[tuple[Any, ...], list[list[Segment]]] = LRUCache(CELL_RENDERS)
        self._keep_renders = False
        # Each row's rendered lines by its key and stripe: they survive the row moving.
        self._lines: LRUCache[tuple[str, int, int], _Line] = LRUCache(LINE_RENDERS)
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)  # type: ignore[arg-type]
        self.spec = tuple(columns)
        self._column_index = {column.key: i for i, column in enumerate(self.spec)}
        self._fixed = all(column.width is not None for column in self.spec)
        self._cells: dict[str, tuple[RenderableType, ...]] = {}  # by key (the table orders)
        self._stale: dict[RowKey, set[ColumnKey]] = {}  # cells whose cached render is old
        self._frame: dict[object, Any] | None = None  # styles held for one frame (render_lines)

    def on_mount(self) -> None:
        for column in self.spec:
            self.add_column(column.label, key=column.key, width=column.width)

    def on_resize(self, event: events.Resize) -> None:
        # DataTable scrolls to its cursor only when the cursor moves: a terminal made smaller
        # left the selected row below the window until the next key (seen at 80×24 → 60×16).
        if self.row_count:
            self.call_after_refresh(self._cursor_into_view)

    def _cursor_into_view(self) -> None:
        if 0 <= self.cursor_row < self.row_count:
            self.move_cursor(row=self.cursor_row, animate=False)

    @property
    def selected_key(self) -> str | None:
        if not self._cells or self.cursor_row < 0 or self.cursor_row >= self.row_count:
            return None
        row_key, _ = self.coordinate_to_cell_key(self.cursor_coordinate)
        return row_key.value

    def keys(self) -> list[str]:
        """The rows' keys, in row order."""
        return self.row_texts()

    def visible_keys(self) -> list[str]:
        """The keys of the rows in the window (rows are one line high), none while hidden."""
        if not self.display or not self._cells:
            return []
        top = int(self.scroll_y)
        end = min(self.row_count, top + self.size.height)
        keys = (self.row_key_at(i) for i in range(top, end))
        return [k.value for k in keys if k is not None and k.value is not None]

    def select(self, key: str) -> None:
        with contextlib.suppress(RowDoesNotExist):
            self.move_cursor(row=self.get_row_index(key), animate=False)

    # DataTable's home/end scroll to the first/last *column*: with overflow-x hidden (the
    # columns are laid out for the screen) `end` hid the Goal column at 80×24 with nothing on
    # screen saying why. In these row tables they go to the first/last row.
    def action_scroll_home(self) -> None:
        self.action_scroll_top()

    def action_scroll_end(self) -> None:
        self.action_scroll_bottom()

    def set_width(self, column_key: str, width: int) -> None:
        """Resize a fixed-width column (wider terminals give the text columns more room)."""
        column = self.columns.get(ColumnKey(column_key))
        if column is None or column.width == width:
            return
        column.width = width
        self.column_widths_changed()
        self.refresh()

    def upsert(self, key: str, cells: Cells) -> None:
        """Add the row, or write only the cells that changed (and repaint only that row)."""
        new = tuple(cells)
        old = self._cells.get(key)
        if old is None:
            self._append(key, new)
        elif old != new:
            self._write_cells(key, old, new)
        self._cells[key] = new

    def set_cell(self, key: str, column_key: str, value: RenderableType) -> None:
        """Write one cell of an existing row (a ticking time), repainting only that row."""
        old = self._cells.get(key)
        if old is None:
            return
        index = self._column_index[column_key]
        if old[index] != value:
            new = (*old[:index], value, *old[index + 1 :])
            self._write_cells(key, old, new)
            self._cells[key] = new

    def _append(self, key: str, cells: tuple[RenderableType, ...]) -> None:
        """A new last row: with fixed widths the rows above it render exactly as before.

        add_row bumps the table-wide counter (a full repaint per new Goal, profiled under a
        stream of commits); put it back and drop only what depends on the row count. A column
        sized to content may widen: then every row repaints, the table-wide way.
        """
        if not self._fixed:
            self.add_row(*map(cell, cells), key=key)
            return
        # Nothing to measure (no auto widths, labels or heights): the table still recomputes
        # its size, but skips measuring every cell (≈ 0.15 s per 1,000 rows).
        self.add_row_in_place(map(cell, cells), key)

    def _write_cells(self, key: str, old: tuple[RenderableType, ...], new: Cells) -> None:
        row_key = RowKey(key)
        written: list[int] = []
        for index, (column, before, after) in enumerate(zip(self.spec, old, new, strict=True)):
            if before == after:
                continue
            if column.width is None:  # sized to content: may resize, the table-wide path
                self.update_cell(key, column.key, cell(after), update_width=True)
                continue
            column_key = ColumnKey(column.key)
            self.write_cell_in_place(row_key, column_key, cell(after))
            self._stale.setdefault(row_key, set()).add(column_key)
            written.append(index)
        if written:
            self.repaint_cells(self.get_row_index(key), written[0], written[-1])

    def repaint_cells(self, row: int, first: int, last: int) -> None:
        """Repaint columns ``first``..``last`` of one row, not the whole row.

        ``refresh_row`` sums the heights of every row above it, and the compositor then cuts
        and writes the row's full width to the terminal: a ticking elapsed cell is 9 cells of a
        120-cell line. Rows here are one line high; widths are fixed.
        """
        widths = [column.get_render_width(self) for column in self.ordered_columns]
        x = self.row_label_width + sum(widths[:first])
        y = row + (self.header_height if self.show_header else 0)
        region = Region(x, y, sum(widths[first : last + 1]), 1)
        if self.window_region.overlaps(region):  # as DataTable refreshes a region of its own
            self.refresh(region.translate(-self.scroll_offset))

    def caches_cleared(self) -> None:
        self._lines.clear()
        if not self._keep_renders:  # a style, width or cursor change: every render may differ
            self._renders.clear()

    def notify_style_update(self) -> None:
        super().notify_style_update()  # DataTable drops its caches here without the hook
        self._lines.clear()
        self._renders.clear()

    # A row's line is rendered again only when what it shows changed, not when it moved. A Goal
    # added above the cursor moves every row below it (and the screen scrolls a line to keep
    # the cursor's row in view): DataTable keys its line renders by place and by a table-wide
    # counter, so that frame rendered every line again (≈ half a dashboard's CPU under a
    # stream of new Goals, profiled). The stripe is part of the key: after a move the rows
    # below show the other stripe, and after the next one the first again.

    def render_table_line(self, y: int, x1: int, x2: int, base_style: Style) -> Strip:
        place = self._place_of_line(y) if self._lines_kept() else None
        if place is None:
            return super().render_table_line(y, x1, x2, base_style)
        slot, cells, index = place
        cursor, hover = self._held("pointers", self._pointer_rows)
        shape = (x1, x2, base_style, index == cursor, index == hover)
        shape += self._held("shape", self._shape)
        kept = self._lines.get(slot)
        if kept is not None and kept.cells is cells and kept.shape == shape:
            return kept.strip
        strip = super().render_table_line(y, x1, x2, base_style)
        self._lines.discard(slot)  # LRUCache.set keeps the value of a key it has
        self._lines.set(slot, _Line(cells, shape, strip))
        return strip

    def _place_of_line(self, y: int) -> tuple[tuple[str, int, int], object, int] | None:
        """Where the table's line ``y`` is kept (its row's key, the line within the row and its
        stripe), what it shows (its row's cells, or the header) and its row's index (-1: the
        header); None: past the last row."""
        if self.show_header and y < self.header_height:
            return ("", y, 0), _HEADER, -1  # ids are never empty
        found = self.row_at_line(y)
        if found is None or found[0].value is None:
            return None
        cells = self._cells.get(found[0].value)
        index = self.row_index_of(found[0])
        if cells is None or index is None:
            return None
        stripe = index % 2 if self.zebra_stripes else 0
        return (found[0].value, found[1], stripe), cells, index

    def make_vertical_scrollbar(self, thickness: int) -> ScrollBar:
        return SteadyScrollBar(vertical=True, name="vertical", thickness=thickness)

    def one_line_rows(self) -> bool:
        return True  # rows are added at DataTable's default height, one line

    def _lines_kept(self) -> bool:
        """Lines are kept for a row-cursor table of fixed widths with no fixed rows or columns,
        and only within a frame (what they depend on is held for it)."""
        return (
            self._frame is not None
            and self._fixed
            and self.cursor_type == "row"
            and not (self.fixed_rows or self.fixed_columns or self.has_row_labels())
        )

    def _pointer_rows(self) -> tuple[int, int]:
        """The cursor's row and the hover's (-2 while the hover is not shown)."""
        hover = self.hover_coordinate.row if self.hover_shown() else -2
        return self.cursor_coordinate.row, hover

    def _shape(self) -> tuple[object, ...]:
        """What every row's line depends on besides its cells, place and pointers."""
        columns = self.ordered_columns
        widths = tuple(column.get_render_width(self) for column in columns)
        labels = tuple(column.label.plain for column in columns)  # the header's line
        return (self.size.width, widths, labels, self.render_state())

    def place_mouse_meta(self, event: events.MouseEvent) -> None:
        """A kept line's cells carry the row index of where it was rendered: the row under the
        pointer is the one on that line now."""
        row = event.style.meta.get("row")
        offset = event.get_content_offset(self)
        if not isinstance(row, int) or row < 0 or offset is None:
            return  # the header's line (-1), or not on a row
        header = self.header_height if self.show_header else 0
        found = self.row_at_line(offset.y + (int(self.scroll_y) if offset.y >= header else 0))
        index = self.row_index_of(found[0]) if found is not None else None
        if index is not None and index != row:
            event.style = event.style + Style.from_meta({"row": index})

    def render_cell(
        self,
        row_index: int,
        column_index: int,
        base_style: Style,
        width: int,
        cursor: bool = False,
        hover: bool = False,
    ) -> list[list[Segment]]:
        """DataTable's render of a cell, reused when a new list puts the same content there
        (its render carries its row and column index, as mouse meta)."""
        key = self.row_key_at(row_index) if row_index >= 0 else None
        cells = self._cells.get(key.value or "") if key is not None else None
        content = _content(cells[column_index]) if cells and column_index >= 0 else None
        if content is None or not self._fixed:
            return super().render_cell(row_index, column_index, base_style, width, cursor, hover)
        place = (row_index, column_index, content, base_style, width, cursor, hover)
        state = self.render_state()
        lines = self._renders.get((place, state))
        if lines is None:
            lines = self._render_text_cell(
                row_index, column_index, base_style, width, cursor, hover
            )
            if lines is None:
                lines = super().render_cell(
                    row_index, column_index, base_style, width, cursor, hover
                )
            self._renders.set((place, state), lines)
        return lines

    def _render_text_cell(
        self,
        row_index: int,
        column_index: int,
        base_style: Style,
        width: int,
        cursor: bool,
        hover: bool,
    ) -> list[list[Segment]] | None:
        """DataTable's render of a one-line text cell, without Rich's render pipeline.

        DataTable renders every cell through Padding, Styled and ``Console.render_lines``
        (≈ 80 µs a cell, most of a new list's frame: a screen is ≈ 300 cells). A cell of a row
        one line high holding unwrapped text is its text cut to the width, the padding around
        it and the same styles: the same segments (``test_keyed_table_render.py`` compares them).
        None: not such a cell (DataTable renders it).
        """
        row_key = self.row_key_at(row_index)
        row = self.rows.get(row_key) if row_key is not None else None
        if row is None or row.height != 1 or column_index < 0:
            return None
        text = self.row_cell(row_index, column_index)
        if not isinstance(text, Text) or not _one_line(text):
            return None
        component_style, post_style = self.cell_styles(row_index, column_index, hover, cursor)
        meta = Style.from_meta({"row": row_index, "column": column_index})
        pre_style = base_style + meta + component_style
        options = self.console_options()
        return [
            _text_line(
                self.app.console,
                text,
                width,
                self.cell_padding,
                options.overflow,
                pre_style,
                post_style,
            )
        ]

    def render_lines(self, crop: Region) -> list[Strip]:
        self._frame = {}
        try:
            if self._stale:  # cells written since the last frame: their renders are old
                stale, self._stale = self._stale, {}
                self.forget_cell_renders(stale)
            return super().render_lines(crop)
        finally:
            self._frame = None

    # DataTable asks for these for every line, row and cell it renders, and each answer is
    # computed afresh: new styles merged, the ancestors' backgrounds blended (≈ 3 ms of the
    # ≈ 33 a new Goal above the cursor cost the dashboard, measured at 10 a second). Nothing
    # they depend on (CSS, pseudo-classes, size) changes while a frame renders: held for one.

    def _held(self, key: object, compute: Callable[[], Any]) -> Any:
        frame = self._frame
        if frame is None:
            return compute()
        if key not in frame:
            frame[key] = compute()
        return frame[key]

    def get_component_styles(self, *names: str) -> RenderStyles:
        base = super().get_component_styles
        if self._frame is None:
            return base(*names)
        return cast(RenderStyles, self._held(names, lambda: _FrameStyles(base(*names))))

    @property
    def rich_style(self) -> Style:
        return cast(Style, self._held("rich_style", lambda: super(KeyedTable, self).rich_style))

    @property
    def background_colors(self) -> tuple[Color, Color]:
        return cast(
            tuple[Color, Color],
            self._held("background_colors", lambda: super(KeyedTable, self).background_colors),
        )

    def console_options(self) -> ConsoleOptions:
        """The app's console options (a new object per call), held for a frame."""
        return cast(ConsoleOptions, self._held("console_options", lambda: self.app.console_options))

    def drop(self, key: str) -> None:
        if key not in self._cells:
            return
        selected = self.selected_key
        index = self.cursor_row
        del self._cells[key]
        self.remove_row(key)
        self.settle_dimensions()
        if selected is not None and selected != key:
            self.select(selected)  # rows above moved up: follow the key, not the index
        elif self.row_count:
            self.move_cursor(row=min(index, self.row_count - 1), animate=False)

    def drop_many(self, keys: Collection[str]) -> None:
        """Remove these rows in one step (``drop`` makes the row order anew for each one), the
        cursor on its key."""
        gone = [key for key in keys if key in self._cells]
        if not gone:
            return
        selected = self.selected_key
        for key in gone:
            del self._cells[key]
        self.remove_rows(gone)
        self.settle_dimensions()
        if selected is not None and selected in self._cells:
            self.select(selected)

    def sync(self, rows: Mapping[str, Cells]) -> None:
        """Make the table hold exactly ``rows``, in their order."""
        gone = [k for k in self._cells if k not in rows]
        with self.app.batch_update():
            if len(gone) > REBUILD_AT:  # remove_row costs ≈ 2 ms each at 1,000 rows
                self._rebuild(rows)
                return
            for key in gone:
                self.drop(key)
            for key, cells in rows.items():
                self.upsert(key, cells)
            self.order(list(rows))  # new keys were appended (a cleared filter)

    def order(self, keys: list[str]) -> None:
        """Put the rows (exactly ``keys``) in the order of ``keys``, when they are not."""
        if self.keys() != keys:
            self._moved(lambda: self.set_row_order(keys))

    def move(self, key: str, index: int) -> None:
        """Move the row ``key`` to ``index`` (a new row into its place: O(rows moved), not the
        O(rows) in Python of putting every row in order again), cursor on its key."""
        start = self.row_index_of(RowKey(key))
        if start is not None and start != index:
            below = min(start, index) > self.cursor_row  # the cursor's row stays where it is
            self._moved(lambda: self.move_row(key, index), follow=not below)

    def _moved(self, move: Callable[[], None], follow: bool = True) -> None:
        """Rows moved by ``move``: the window repainted if it shows others, the cursor on its
        key (``follow``: it may have moved)."""
        selected, shown = self.selected_key, self.visible_keys()
        move()
        if self.visible_keys() != shown:  # rows moved below the window change nothing on screen
            self.refresh(Region(0, 0, *self.scrollable_content_region.size))  # not the scrollbar
        if selected is not None and follow:
            self.settle_dimensions()
            self.select(selected)

    def _rebuild(self, rows: Mapping[str, Cells]) -> None:
        """Replace most rows at once (a new filter): DataTable's remove_row is O(n) per row.

        Only for an operator's own change of the row set; the cursor goes back to its key.
        """
        selected = self.selected_key
        self._keep_renders = True  # renders depend on content and place, not on the rows
        try:
            self.clear()
        finally:
            self._keep_renders = False
        self._cells = {}
        for key, cells in rows.items():
            self.upsert(key, cells)
        if selected is not None and selected in self._cells:
            self.select(selected)


_HEADER = object()  # what the header's kept line shows (its labels are in the shape)


@dataclass(frozen=True, slots=True)
class _Line:
    """A row's rendered line, with the cells and the shape it was rendered for."""

    cells: object  # the row's cells as written (compared by identity), or _HEADER
    shape: tuple[object, ...]
    strip: Strip


def cell(value: RenderableType) -> RenderableType:
    """A cell shown literally: text is data, never markup or terminal control."""
    if isinstance(value, str):  # as DataTable formats a str cell, without the markup
        text = literal(value)
        text.no_wrap, text.end = True, ""
        return text
    if isinstance(value, Text):
        return literal_text(value)
    return value


def _one_line(text: Text) -> bool:
    """Rendered as one line cut to its width: no line break, tab, wrapping or justification."""
    plain = text.plain
    return (
        text.no_wrap is not False
        and text.justify in (None, "default")
        and "\n" not in plain
        and "\t" not in plain
    )


def _text_line(
    console: Console,
    text: Text,
    width: int,
    padding: int,
    overflow: OverflowMethod | None,
    pre_style: Style,
    post_style: Style,
) -> list[Segment]:
    """``text`` as Padding(text, (0, padding)) in Styled(pre_style, post_style) renders it, on
    one line of ``width`` cells (Rich's Text.wrap with no_wrap, then the line's shape)."""
    inner = max(width - 2 * padding, 0)
    line = text.copy()
    line.truncate(inner, overflow=text.overflow or overflow or "fold")
    segments = [Segment(" " * padding)] if padding else []
    segments += Text("\n").join([line]).render(console, end="")  # its style as a span
    segments = Segment.adjust_line_length(segments, inner + padding)
    if padding:
        segments.append(Segment(" " * padding))
    return list(Segment.apply_style(segments, pre_style, post_style))


def _content(value: RenderableType) -> object:
    """What a cell's render depends on, hashable; None: not known (not reused)."""
    if isinstance(value, (str, int)):
        return (type(value), value)
    if isinstance(value, Text):
        spans = tuple(value.spans)
        return (Text, value.plain, str(value.style), spans, value.justify, value.overflow)
    return None


class _FrameStyles:
    """A component's styles for one frame: its rich style (which blends the ancestors'
    backgrounds on every read) read once; anything else read from the styles themselves."""

    def __init__(self, styles: RenderStyles) -> None:
        self._styles = styles
        self.rich_style = styles.rich_style

    def __getattr__(self, name: str) -> Any:
        return getattr(self._styles, name)
