"""Each private Textual name refine_tui uses (refine_tui/textual_private.py), checked against the
installed Textual: when an upgrade renames, removes or reshapes one, the test that names it
fails here, before the dashboard goes wrong in a way no other test pins down.

And nothing else imports Textual's private modules: the door is the only one.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import re
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.style import Style
from rich.text import Text
from textual.app import App, ComposeResult
from textual.cache import LRUCache
from textual.containers import Horizontal
from textual.coordinate import Coordinate
from textual.drivers.linux_driver import LinuxDriver
from textual.geometry import Region
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import DataTable, Footer, Log, Static
from textual.widgets.data_table import ColumnKey, RowKey

from refine_tui import textual_private as door
from refine_tui.textual_private import DataTableDoor, FooterKey, ParseError, XTermParser
from tests.helpers.examples import examples

ROOT = Path(__file__).resolve().parents[2]
SIZE = (40, 10)


class TableApp(App[None]):
    def compose(self) -> ComposeResult:
        yield DataTableDoor(cursor_type="row")

    def on_mount(self) -> None:
        table = self.query_one(DataTableDoor)
        table.add_column("Id", key="id", width=4)
        table.add_column("Status", key="status", width=8)
        for n in range(5):
            table.add_row(f"r{n}", Text("queued"), key=f"r{n}")


# --- DataTable (KeyedTable's base) ---


def test_datatable_has_the_private_members_the_door_uses() -> None:
    table = DataTable[object]()
    for name in (
        "_row_locations",
        "_update_count",
        "_offset_cache",
        "_new_rows",
        "_data",
        "_require_update_dimensions",
        "_show_hover_cursor",
        "_pseudo_class_state",
        "_labelled_row_exists",
        "_header_row_key",
        "_cell_render_cache",
        "_row_renderable_cache",
        "_row_render_cache",
        "_line_cache",
    ):
        assert hasattr(table, name), name
    assert isinstance(table._update_count, int)
    assert isinstance(table._new_rows, set)
    assert isinstance(table._data, dict)
    for cache in ("_offset_cache", "_cell_render_cache", "_row_renderable_cache", "_line_cache"):
        assert isinstance(getattr(table, cache), LRUCache), cache
    assert isinstance(table._row_render_cache, LRUCache)
    assert isinstance(type(table)._row_label_column_width, property)
    # For one-line rows: the line → row list (a property) is replaced; the rows in order (its
    # cache) are no longer built for a row's region.
    assert isinstance(DataTable._y_offsets, property)
    assert isinstance(table._ordered_row_cache, LRUCache)
    # The vertical scrollbar: made on first use into this slot, then started by the App.
    assert table._vertical_scrollbar is None
    assert list(inspect.signature(App._start_widget).parameters) == ["self", "parent", "widget"]


def test_datatable_private_methods_keep_their_signatures() -> None:
    def params(name: str) -> list[str]:
        return list(inspect.signature(getattr(DataTable, name)).parameters)

    assert params("_render_cell") == [
        "self",
        "row_index",
        "column_index",
        "base_style",
        "width",
        "cursor",
        "hover",
    ]
    assert params("_clear_caches") == ["self"]
    assert params("_update_dimensions") == ["self", "new_rows"]
    assert params("_get_row_renderables") == ["self", "row_index"]
    assert params("_get_row_style") == ["self", "row_index", "base_style"]
    assert params("_should_highlight") == ["self", "cursor", "target_cell", "type_of_cursor"]
    assert params("_render_line") == ["self", "y", "x1", "x2", "base_style"]
    assert params("_get_offsets") == ["self", "y"]
    assert params("_get_row_region") == ["self", "row_index"]
    assert params("_get_fixed_offset") == ["self"]
    assert params("_scroll_update") == ["self", "virtual_size"]  # what a layout does for it
    assert params("_on_click") == ["self", "event"]
    assert params("_on_mouse_move") == ["self", "event"]
    assert len(inspect.signature(DataTable._get_styles_to_render_cell).parameters) == 10


def test_the_row_order_answers_every_method_of_datatables_map() -> None:
    """A method Textual adds to its map would read dicts the row order does not keep."""
    methods = {name for name, value in vars(door.TwoWayDict).items() if callable(value)}
    assert methods <= set(vars(door._RowOrder)), methods - set(vars(door._RowOrder))


@settings(max_examples=examples(300), deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["add", "move", "order"]), st.integers(0, 10**6)), max_size=40
    )
)
def test_the_row_order_moved_appended_and_reordered_agrees_with_a_list(
    steps: list[tuple[str, int]],
) -> None:
    """Rows appended (DataTable's ``add_row``), one moved to another place (a new Goal into
    its place), all put in another order: every key finds its index and every index its key,
    as a plain list of the keys in row order says."""
    rows: list[str] = ["r0"]
    order = door._RowOrder.of_map(door.TwoWayDict({RowKey("r0"): 0}))
    for n, (step, pick) in enumerate(steps, start=1):
        if step == "add":
            order[RowKey(f"r{n}")] = len(rows)
            rows.append(f"r{n}")
        elif step == "move":
            key, place = rows[pick % len(rows)], (pick // 7) % len(rows)
            order.move(key, place)
            rows.insert(place, rows.pop(rows.index(key)))
        else:
            rows = sorted(rows, key=lambda k: (pick * int(k[1:])) % 1009)
            order = door._RowOrder.of(order, rows)
        assert [str(text) for text in order.texts()] == rows
        assert [order.get(RowKey(k)) for k in rows] == list(range(len(rows)))
        assert [order.get_key(i) for i in range(len(rows))] == [RowKey(k) for k in rows]
        assert len(order) == len(rows) and all(RowKey(k) in order for k in rows)


async def test_the_row_locations_map_keys_and_indexes_both_ways() -> None:
    app = TableApp()
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one(DataTableDoor)
        await pilot.pause()
        assert table.row_key_at(2) == RowKey("r2") and table.row_key_at(9) is None
        assert table._row_locations.get(RowKey("r3")) == 3
        count = table._update_count
        table.set_row_order(["r4", "r3", "r2", "r1", "r0"])
        assert table._update_count == count + 1
        assert table.coordinate_to_cell_key(Coordinate(0, 0)).row_key == RowKey("r4")


class OneLineDoor(DataTableDoor):
    def one_line_rows(self) -> bool:
        return True


class OneLineApp(TableApp):
    def compose(self) -> ComposeResult:
        yield OneLineDoor(cursor_type="row")


async def test_one_line_rows_map_lines_and_place_rows_as_datatable_does() -> None:
    """Read off the row order instead of lists rebuilt: every line's row, the rows' regions and
    the table's height are DataTable's own, after rows were added in place and put in another
    order, and no list was built; a cleared table has none."""
    app = OneLineApp()
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one(OneLineDoor)
        await pilot.pause()
        table.add_row_in_place(["r9", Text("new")], "r9")
        table.set_row_order(["r9", "r4", "r0", "r3", "r2", "r1"])
        table._offset_cache.clear()
        table._ordered_row_cache.clear()
        offsets = [table._get_offsets(y) for y in range(table.header_height + 6)]
        with pytest.raises(LookupError):
            table._get_offsets(table.header_height + 7)
        regions = [table._get_row_region(i) for i in range(6)]
        assert not table._offset_cache and not table._ordered_row_cache  # no list was built
        theirs = DataTable._y_offsets.fget(table)  # type: ignore[attr-defined]
        assert offsets[1:] == theirs == list(table._y_offsets) and len(table._y_offsets) == 6
        assert table._y_offsets[-1] == theirs[-1]
        assert regions == [DataTable._get_row_region(table, i) for i in range(6)]
        assert regions == [Region(0, 1 + i, table.size.width, 1) for i in range(6)]
        assert table._get_row_region(6) == Region(0, 0, 0, 0)  # no such row
        table.move_cursor(row=5)
        await pilot.pause()
        assert table.virtual_size.height == table.header_height + 6
        assert table.coordinate_to_cell_key(table.cursor_coordinate).row_key == RowKey("r1")
        table.clear()
        assert len(table._y_offsets) == 0


async def test_rows_put_in_order_are_found_as_datatables_own_map_finds_them() -> None:
    """The row order kept as keys and an index by their text answers every question DataTable
    asks of its map as the map ``DataTable.sort`` builds would, after rows were put in order
    twice and a row was added; reuses the rows' keys; and DataTable's own row removal and
    clearing still work on it."""
    app = TableApp()
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one(DataTableDoor)
        await pilot.pause()
        keys = {key.value: key for key in table.rows}
        table.set_row_order(["r4", "r0", "r3", "r2", "r1"])
        table.set_row_order(["r3", "r4", "r0", "r2", "r1"])
        table.add_row("r9", Text("new"), key="r9")
        order = ["r3", "r4", "r0", "r2", "r1", "r9"]
        theirs = door.TwoWayDict({RowKey(k): i for i, k in enumerate(order)})
        ours = table._row_locations
        assert type(ours) is not door.TwoWayDict and len(ours) == len(theirs) == 6
        assert [key.value for key in ours] == order
        assert all(key is keys[key.value] for key in ours if key.value != "r9")  # not made anew
        for text in [*order, "r7"]:
            for key in (text, RowKey(text)):
                assert ours.get(key) == theirs.get(key) and (key in ours) == (key in theirs)
        for index in range(-2, 8):
            assert ours.get_key(index) == theirs.get_key(index)
            assert ours.contains_value(index) == theirs.contains_value(index)
        with pytest.raises(TypeError):
            del ours[RowKey("r3")]
        with pytest.raises(IndexError):
            ours[RowKey("r8")] = 9
        assert table.get_row_index("r0") == 2 and table.get_row_at(5)[0] == "r9"
        table.remove_row("r4")
        assert [table.coordinate_to_cell_key(Coordinate(i, 0)).row_key.value for i in range(5)] == [
            "r3",
            "r0",
            "r2",
            "r1",
            "r9",
        ]
        table.clear()
        assert table.row_count == 0


async def test_one_line_rows_fixed_room_is_datatables_without_the_rows_list() -> None:
    """The fixed rows' and columns' room is DataTable's own, with and without fixed rows and
    columns, and is found without building DataTable's list of rows in order."""
    app = OneLineApp()
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one(OneLineDoor)
        await pilot.pause()
        for fixed_rows, fixed_columns in [(0, 0), (2, 1), (9, 0)]:
            table.fixed_rows, table.fixed_columns = fixed_rows, fixed_columns
            table.set_row_order(["r4", "r0", "r3", "r2", "r1"])
            table._ordered_row_cache.clear()
            ours = table._get_fixed_offset()
            assert not table._ordered_row_cache  # no list was built
            assert ours == DataTable._get_fixed_offset(table), (fixed_rows, fixed_columns)
        table.fixed_rows = table.fixed_columns = 0
        table.move_cursor(row=3)
        await pilot.pause()
        assert not table._ordered_row_cache  # nor for a cursor's move and scroll


class WideningApp(App[None]):
    CSS = "OneLineDoor { height: 1fr; }"  # its size never waits on its rows

    def compose(self) -> ComposeResult:
        yield OneLineDoor(cursor_type="row")

    def on_mount(self) -> None:
        table = self.query_one(OneLineDoor)
        table.add_column("Note", key="note")  # sized to its content, before another column
        table.add_column("Id", key="id", width=4)
        for n in range(3):
            table.add_row(f"n{n}", f"r{n}", key=f"r{n}")


def table_text(app: App[Any]) -> list[str]:
    return ["".join(strip.text for strip in line) for line in door.render_screen(app.screen).strips]


async def test_a_one_line_table_that_grew_shows_its_new_rows_and_its_wider_columns() -> None:
    """The new height only lays the table out: the rows it added are drawn, and a column
    that widened (what follows it moves) draws every line again, as a fresh table draws them."""
    app = WideningApp()
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one(OneLineDoor)
        await pilot.pause()
        table.add_row("n3", "r3", key="r3")
        await pilot.pause()
        assert table_text(app)[4].split() == ["n3", "r3"]
        table.add_row("a much longer note", "r4", key="r4")
        await pilot.pause()
        grown = table_text(app)
    fresh = WideningApp()
    async with fresh.run_test(size=SIZE) as pilot:
        table = fresh.query_one(OneLineDoor)
        table.add_row("n3", "r3", key="r3")
        table.add_row("a much longer note", "r4", key="r4")
        await pilot.pause()
        assert grown == table_text(fresh)
        assert grown[1].split() == ["n0", "r0"] and grown[1].index("r0") > 18


async def test_a_row_added_in_place_keeps_the_counter_and_is_not_measured() -> None:
    app = TableApp()
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one(DataTableDoor)
        await pilot.pause()
        count = table._update_count
        table.add_row_in_place(["r9", Text("new")], "r9")
        assert table._update_count == count
        assert RowKey("r9") not in table._new_rows
        assert table.get_row_index("r9") == 5


async def test_rows_removed_at_once_leave_the_table_as_remove_row_one_by_one_does() -> None:
    for app, remove in ((TableApp(), "at once"), (TableApp(), "one by one")):
        async with app.run_test(size=SIZE) as pilot:
            table = app.query_one(DataTableDoor)
            table.move_cursor(row=4)
            await pilot.pause()
            if remove == "at once":
                table.remove_rows(["r1", "r3", "r4"])
            else:
                for key in ("r1", "r3", "r4"):
                    table.remove_row(key)
            await pilot.pause()
            assert table.row_texts() == ["r0", "r2"] and table.row_count == 2
            assert set(table.rows) == set(table._data) == {RowKey("r0"), RowKey("r2")}
            assert table.get_row_index("r2") == 1 and table.cursor_row == 1  # clamped
            assert [table.get_row_at(i)[0] for i in range(2)] == ["r0", "r2"]
            assert app.screen._compositor.render_update(full=True) is not None  # it draws


async def test_a_cell_written_in_place_is_rendered_from_the_table_data() -> None:
    app = TableApp()
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one(DataTableDoor)
        await pilot.pause()
        table.write_cell_in_place(RowKey("r1"), ColumnKey("status"), Text("running"))
        assert str(table.get_cell("r1", "status")) == "running"
        table.forget_cell_renders({RowKey("r1"): {ColumnKey("status")}})
        assert str(table.row_cell(1, 1)) == "running"


async def test_a_cell_is_shown_as_datatable_formats_it() -> None:
    """``row_cell`` reads a non-empty Text as stored; anything else as DataTable formats its row
    (a str, an empty Text, a number): the same renderable ``_get_row_renderables`` gives."""
    app = TableApp()
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one(DataTableDoor)
        await pilot.pause()
        table.add_row("plain [b]str[/b]", Text(""), key="odd")
        table.add_row(Text("text", style="red"), 3.14159, key="more")
        await pilot.pause()
        for row in (5, 6):
            formatted = table._get_row_renderables(row).cells
            for column in (0, 1):
                shown = table.row_cell(row, column)
                assert type(shown) is type(formatted[column]), (row, column)
                assert str(shown) == str(formatted[column]), (row, column)
                if isinstance(shown, Text):
                    assert shown.spans == formatted[column].spans, (row, column)
        assert table.row_cell(6, 0) is table.get_cell("more", "id")  # stored, not copied


async def test_the_render_caches_have_the_key_shapes_the_door_reads() -> None:
    """Cell renders are keyed (row key, column key, ...), row renders (row key, line, base
    style, cursor, hover, cursor type, ...), row renderables (update count, row index)."""
    app = TableApp()
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one(DataTableDoor)
        await pilot.pause()
        cell = next(iter(table._cell_render_cache.keys()))
        assert isinstance(cell[0], RowKey) and isinstance(cell[1], ColumnKey)
        row = next(k for k in table._row_render_cache.keys() if k[0].value)  # noqa: SIM118
        row_key, line_no, base_style, cursor, hover, cursor_type = row[:6]
        assert isinstance(row_key, RowKey) and isinstance(line_no, int)
        assert isinstance(base_style, Style)
        assert isinstance(cursor, Coordinate) and isinstance(hover, Coordinate)
        assert cursor_type == "row"
        renders = table._row_render_cache.get(row)
        assert renders is not None and len(renders) == 2  # (fixed, scrollable) lines
        update_count, row_index = next(iter(table._row_renderable_cache.keys()))
        assert isinstance(update_count, int) and isinstance(row_index, int)


async def test_the_render_hooks_are_called_by_datatable() -> None:
    called: list[str] = []

    class Probe(DataTableDoor):
        def render_cell(self, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
            called.append("render_cell")
            return super().render_cell(*args, **kwargs)  # type: ignore[arg-type]

        def caches_cleared(self) -> None:
            called.append("caches_cleared")

    class ProbeApp(TableApp):
        def compose(self) -> ComposeResult:
            yield Probe(cursor_type="row")

    app = ProbeApp()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        table = app.query_one(Probe)
        assert "render_cell" in called
        table.column_widths_changed()
        assert "caches_cleared" in called
        assert table._require_update_dimensions
        style, post = table.cell_styles(0, 0, hover=False, cursor=True)
        assert isinstance(style, Style) and isinstance(post, Style)
        assert isinstance(table.row_style(0, Style()), Style)
        assert len(table.render_state()) == 3
        assert isinstance(table.row_label_width, int)


async def test_lines_rows_and_mouse_meta_as_the_door_reads_them() -> None:
    """``render_table_line`` renders DataTable's line y (the header's first); ``row_at_line``
    finds the row on a line; DataTable's mouse handlers take the row from the event's meta, and
    ``place_mouse_meta`` runs before them (a click moves the cursor to the meta's row)."""
    placed: list[object] = []

    class Probe(DataTableDoor):
        def place_mouse_meta(self, event: Any) -> None:
            placed.append(event.style.meta.get("row"))
            event.style = event.style + Style.from_meta({"row": 3})

    class ProbeApp(TableApp):
        def compose(self) -> ComposeResult:
            yield Probe(cursor_type="row")

    app = ProbeApp()
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one(Probe)
        await pilot.pause()
        header = table.render_table_line(0, 0, 12, Style())
        assert header.text.startswith(" Id ") and not table.has_row_labels()
        assert table.row_at_line(0) is None  # the header's line
        row_key, line = table.row_at_line(3) or (None, None)
        assert row_key == RowKey("r2") and line == 0 and table.row_index_of(RowKey("r2")) == 2
        assert " r2 " in table.render_table_line(3, 0, 12, Style()).text
        assert table.row_at_line(99) is None
        await pilot.click(Probe, offset=(1, 2))  # r1's line: the meta names row 1
        assert placed[-1] == 1 and table.cursor_row == 3  # DataTable moved to the meta's row
        await pilot.hover(Probe, offset=(1, 1))
        assert placed[-1] == 0 and table.hover_row == 3 and table.hover_shown()


# --- the footer's keys (KeyFooter) ---


def test_footer_key_is_a_widget_with_the_fields_keyfooter_writes() -> None:
    assert issubclass(FooterKey, Widget)
    params = list(inspect.signature(FooterKey.__init__).parameters)
    assert params[:7] == [
        "self",
        "key",
        "key_display",
        "description",
        "action",
        "disabled",
        "tooltip",
    ]
    key = FooterKey("s", "s", "Stop", "stop", disabled=True)
    assert (key.key, key.key_display, key.description, key.action) == ("s", "s", "Stop", "stop")
    assert not door.key_enabled(key) and key.has_class("-disabled")
    door.set_key_enabled(key, True)
    assert door.key_enabled(key) and not key.has_class("-disabled")


def test_footer_has_its_bindings_ready_flag() -> None:
    assert "_bindings_ready" in Footer._reactives
    footer = Footer()
    door.footer_ready(footer)
    assert footer._bindings_ready is True


# --- the Log's last line (FollowLog) ---


class LogApp(App[None]):
    def compose(self) -> ComposeResult:
        yield Log()


async def test_the_last_line_of_a_log_is_written_over_and_drawn_anew() -> None:
    app = LogApp()
    async with app.run_test(size=SIZE) as pilot:
        log = app.query_one(Log)
        log.write_lines(["first", "progress 1%"])
        await pilot.pause()
        assert log.render_line(1).text.startswith("progress 1%")  # drawn: its render cached
        door.replace_last_line(log, "progress 100% and a long tail of text")
        await pilot.pause()
        assert list(log.lines) == ["first", "progress 100% and a long tail of text"]
        assert log.render_line(1).text.startswith("progress 100% and a long")
        assert log.virtual_size.width >= len("progress 100% and a long tail of text")


# --- the Linux driver (QuietLinuxDriver) ---


def test_the_xterm_parser_times_out_a_lone_escape() -> None:
    parser = XTermParser(False)
    assert door.parser_timeout(parser) is None
    assert list(parser.feed("\x1b")) == []  # maybe a sequence: it waits for the rest
    waiting = door.parser_timeout(parser)
    assert waiting is not None and 0 <= waiting <= 1
    assert issubclass(ParseError, Exception)


def test_the_linux_driver_runs_the_input_thread_this_one_replaces() -> None:
    assert list(inspect.signature(LinuxDriver.run_input_thread).parameters) == ["self"]
    assert "self.run_input_thread()" in inspect.getsource(LinuxDriver._run_input_thread)
    init = inspect.getsource(LinuxDriver.__init__)
    assert "self.exit_event = Event()" in init and "self.fileno" in init
    assert "self.exit_event.set()" in inspect.getsource(LinuxDriver.disable_input)


async def test_a_driver_knows_its_app_loop_and_debug_flag() -> None:
    app: App[None] = App()
    driver = LinuxDriver(app, debug=True)
    assert door.driver_app(driver) is app
    assert door.driver_loop(driver) is asyncio.get_running_loop()
    assert door.driver_debug(driver) is True


# --- for tests ---


async def test_notifications_compositor_and_batch_depth() -> None:
    app = TableApp()
    async with app.run_test(size=SIZE) as pilot:
        app.notify("hello")
        await pilot.pause()
        assert [n.message for n in door.notifications(app)] == ["hello"]
        lines = ["".join(s.text for s in strip) for strip in door.render_screen(app.screen).strips]
        assert any("r0" in line for line in lines)
        assert door.batch_depth(app) == 0
        with app.batch_update():
            assert door.batch_depth(app) == 1


# --- the door is the only one ---


def private_textual_imports(path: Path) -> list[str]:
    """The Textual modules with a private part (``textual._x``, ``textual.widgets._y``) that
    ``path`` imports."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "textual" and any(p.startswith("_") for p in parts[1:]):
                found.append(name)
    return found


def test_only_the_door_imports_textuals_private_modules() -> None:
    door_file = ROOT / "refine_tui" / "textual_private.py"
    offenders = {
        str(path.relative_to(ROOT)): names
        for folder in ("refine_tui", "tests", "bench", "scripts")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if path != door_file and (names := private_textual_imports(path))
    }
    assert offenders == {}
    assert private_textual_imports(door_file)  # the check itself sees them


# --- the screen's compositor (crop_renders) ---


class TickScreen(Screen[None]):
    def __init__(self, *, cropped: bool) -> None:
        super().__init__()
        if cropped:
            door.crop_renders(self)

    def compose(self) -> ComposeResult:
        yield Static("top line", id="top")
        with Horizontal():
            yield DataTableDoor(cursor_type="row")
            yield Static("side\npanel", id="side")
        yield Static("bottom line", id="bottom")

    def on_mount(self) -> None:
        table = self.query_one(DataTableDoor)
        table.add_column("Id", key="id", width=4)
        table.add_column("Elapsed", key="elapsed", width=8)
        for n in range(12):
            table.add_row(f"r{n}", Text(f"{n}s"), key=f"r{n}")


class TickApp(App[None]):
    CSS = """
    #top, #bottom { height: 1; }
    Horizontal { height: 1fr; }
    DataTableDoor { width: 1fr; }
    #side { width: 8; }
    """

    def __init__(self, *, cropped: bool) -> None:
        super().__init__()
        self.cropped = cropped

    def get_default_screen(self) -> Screen[None]:
        return TickScreen(cropped=self.cropped)


def test_a_screen_has_a_compositor_whose_renders_the_cropped_one_replaces() -> None:
    (textuals,) = door.CroppedCompositor.__bases__
    assert isinstance(Screen()._compositor, textuals)
    assert list(inspect.signature(textuals._get_renders).parameters) == ["self", "crop"]
    assert list(inspect.signature(textuals._render_chops).parameters) == [
        "self",
        "crop",
        "is_rendered_line",
    ]
    assert isinstance(textuals().visible_widgets, dict)


async def until_idle(pilot: Any, compositor: Any) -> None:
    """Until nothing is left to paint (the toast's arrival painted, under load too)."""
    for _ in range(100):
        await pilot.pause(0.02)
        if not compositor._dirty_regions:
            return
    raise AssertionError("the screen never settled")


async def test_a_cropped_frame_sends_what_textuals_sends_and_skips_the_widgets_it_misses() -> None:
    """``crop_renders``: a frame of a few cells (three elapsed cells written in place, a toast over
    one) sends the terminal the same bytes as Textual's own compositor sends for the same dirty
    regions, computed right after it (but for a cursor move that writes nothing, which
    Textual sends for a widget's first column just past the update); the widgets away from the
    cells render nothing for it (each frame's crop is recorded: under load the toast's own
    frame can come late, and a widget its crop meets renders, as it should), nor do the
    containers the table covers there (Textual's own compositor renders all four)."""
    app = TickApp(cropped=True)
    async with app.run_test(size=(40, 14), notifications=True) as pilot:
        app.notify("a toast over the rows")
        await pilot.pause()
        screen, frames, rendered = app.screen, list[tuple[str, str]](), list[set[str]]()
        compositor = screen._compositor
        assert isinstance(compositor, door.CroppedCompositor)
        await until_idle(pilot, compositor)
        (textuals,) = door.CroppedCompositor.__bases__
        render_update = compositor.render_update
        crops: list[Region] = []

        def cropping(crop: Region | None = None) -> Any:
            crops.append(crop or screen.region)
            return door.CroppedCompositor._get_renders(compositor, crop)

        def sending(*args: Any, **kwargs: Any) -> Any:
            """The cropped update, then Textual's own for the same regions (not sent)."""
            dirty = set(compositor._dirty_regions)
            rendered.append(set())
            compositor._get_renders = cropping  # type: ignore[method-assign]
            try:
                update = render_update(*args, **kwargs)
            finally:
                del compositor._get_renders
            if update is None:  # nothing dirty: nothing sent either way
                rendered.pop()
                return update
            rendered.append(set())
            compositor._dirty_regions.update(dirty)
            compositor._get_renders = partial(textuals._get_renders, compositor)  # type: ignore[method-assign]
            try:
                reference = render_update(*args, **kwargs)
            finally:
                del compositor._get_renders
            sent = (update.render_segments(app.console), reference.render_segments(app.console))
            frames.append((idle_moves_dropped(sent[0]), idle_moves_dropped(sent[1])))
            return update

        compositor.render_update = sending  # type: ignore[method-assign]
        watched = {"top": screen.query_one("#top"), "side": screen.query_one("#side")}
        watched.update(horizontal=screen.query_one(Horizontal), screen=screen)
        for name, widget in watched.items():
            lines = widget.render_lines
            widget.render_lines = (  # type: ignore[method-assign]
                lambda crop, n=name, f=lines: rendered[-1].add(n) or f(crop)
            )
        table = screen.query_one(DataTableDoor)
        toast = screen.query_one("Toast").region
        for row in (2, 5, 9):
            table.write_cell_in_place(RowKey(f"r{row}"), ColumnKey("elapsed"), Text("1m05s"))
            table.forget_cell_renders({RowKey(f"r{row}"): {ColumnKey("elapsed")}})
            line = Region(0, row + 1, table.size.width, 1)  # the row's line, under the header
            table.refresh(line)
        assert toast.overlaps(line.translate(table.region.offset))  # the toast covers row 9's
        await pilot.pause()
        assert frames and any("1m05s" in cropped for cropped, _ in frames)
        for cropped, reference in frames:
            assert cropped == reference
        away = {name: screen.query_one(f"#{name}").region for name in ("top", "side")}
        met = [{n for n, region in away.items() if region.overlaps(crop)} for crop in crops]
        assert len(met) == len(frames) and set() in met  # a frame whose crop meets neither
        for drawn, widgets in zip(rendered[0::2], met, strict=True):
            assert drawn <= widgets  # the cropped: only an away widget its crop meets
        assert set(watched) <= set().union(*rendered[1::2])  # Textual's own: all four


def idle_moves_dropped(sent: str) -> str:
    """``sent`` without the cursor moves that write nothing (another move or a line's end next:
    every chop is written after a move of its own)."""
    return re.sub(r"\x1b\[\d+;\d+H(?=\x1b\[\d+;\d+H|\n|$)", "", sent)
