"""KeyedTable repaints only the rows that changed, and the screen always shows the data.

The table writes fixed-width cells without Textual's table-wide cache reset (see its module
docstring); these tests read the composed screen and compare it with a table built fresh from
the same rows, so a stale cached render would show up as a difference.
"""

from __future__ import annotations

from typing import Any

import pytest
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.app import App, ComposeResult
from textual.css.styles import RenderStyles
from textual.widgets import DataTable
from textual.widgets.data_table import RowKey

from refine_tui.textual_private import render_screen
from refine_tui.widgets.keyed_table import Column, KeyedTable

COLUMNS = (Column("id", "Id", 6), Column("status", "Status", 9), Column("age", "Age", 5))
SIZE = (40, 12)


class TableApp(App[None]):
    def __init__(self, columns: tuple[Column, ...] = COLUMNS) -> None:
        super().__init__()
        self.columns = columns

    def compose(self) -> ComposeResult:
        yield KeyedTable(self.columns)


class FullHeightApp(TableApp):
    CSS = "KeyedTable { height: 1fr; }"  # as the dashboard's: its size never waits on its rows


def rows(n: int, status: str = "queued", age: str = "1s") -> dict[str, tuple]:
    return {f"r{i:02d}": (f"r{i:02d}", Text(status, style="cyan"), age) for i in range(n)}


def screen(app: App) -> list[str]:
    update = render_screen(app.screen)
    return ["".join(strip.text for strip in line) for line in update.strips]


async def fresh_screen(
    data: dict[str, tuple],
    cursor: str | None,
    scroll: float,
    columns: tuple = COLUMNS,
    app_type: type[TableApp] = TableApp,
) -> list[str]:
    app = app_type(columns)
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one(KeyedTable)
        table.sync(data)
        if cursor is not None:
            table.select(cursor)
        await pilot.pause()
        table.scroll_to(y=scroll, animate=False)
        await pilot.pause()
        return screen(app)


async def test_a_changed_cell_is_on_screen_and_nothing_else_moves() -> None:
    app = TableApp()
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one(KeyedTable)
        data = rows(30)
        table.sync(data)
        await pilot.pause()
        before = screen(app)
        data["r03"] = ("r03", Text("running", style="green"), "2s")
        table.upsert("r03", data["r03"])
        await pilot.pause()
        after = screen(app)
        changed = [i for i, (a, b) in enumerate(zip(before, after, strict=True)) if a != b]
        assert len(changed) == 1 and "running" in after[changed[0]] and "2s" in after[changed[0]]
        assert after == await fresh_screen(data, "r00", 0)


async def test_rows_changed_off_screen_show_their_new_cells_when_scrolled_to() -> None:
    app = TableApp()
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one(KeyedTable)
        data = rows(40)
        table.sync(data)
        await pilot.pause()
        for tick in range(3):  # like elapsed times ticking: every row, several frames
            for key in data:
                data[key] = (key, data[key][1], f"{tick}m")
                table.upsert(key, data[key])
            await pilot.pause()
        table.select("r25")
        await pilot.pause()
        for key in ("r24", "r25", "r26"):
            data[key] = (key, Text("done", style="dim"), "9m")
            table.upsert(key, data[key])
        await pilot.pause()
        assert screen(app) == await fresh_screen(data, "r25", table.scroll_y)
        table.select("r00")
        await pilot.pause()
        assert screen(app) == await fresh_screen(data, "r00", table.scroll_y)


@pytest.mark.parametrize("app_type", [TableApp, FullHeightApp])  # auto height; the dashboard's
async def test_appended_and_dropped_rows_leave_no_stale_line(app_type: type[TableApp]) -> None:
    app = app_type()
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one(KeyedTable)
        data = rows(4)
        table.sync(data)
        await pilot.pause()
        data["r01"] = ("r01", Text("running", style="green"), "5s")
        table.upsert("r01", data["r01"])
        for i in range(4, 7):  # new rows below, on screen
            data[f"r{i:02d}"] = (f"r{i:02d}", Text("queued"), "0s")
            table.upsert(f"r{i:02d}", data[f"r{i:02d}"])
        await pilot.pause()
        assert screen(app) == await fresh_screen(data, "r00", 0, app_type=app_type)
        table.drop("r02")
        del data["r02"]
        for i in range(7, 30):  # enough to scroll; the cursor follows the last one
            data[f"r{i:02d}"] = (f"r{i:02d}", Text("held"), f"{i}s")
            table.upsert(f"r{i:02d}", data[f"r{i:02d}"])
            await pilot.pause()
        table.select("r29")
        await pilot.pause()
        data["r28"] = ("r28", Text("done"), "1m")
        table.upsert("r28", data["r28"])
        data["r30"] = ("r30", Text("new"), "0s")
        table.upsert("r30", data["r30"])
        await pilot.pause()
        assert screen(app) == await fresh_screen(data, "r29", table.scroll_y, app_type=app_type)


@pytest.mark.parametrize("app_type", [TableApp, FullHeightApp])
async def test_a_column_sized_to_content_widens_for_new_and_changed_rows(
    app_type: type[TableApp],
) -> None:
    columns = (Column("id", "Id", 6), Column("note", "Note", None))
    app = app_type(columns)
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one(KeyedTable)
        data = {f"r{i}": (f"r{i}", "ok") for i in range(3)}
        table.sync(data)
        await pilot.pause()
        data["r3"] = ("r3", "a much longer note")
        table.upsert("r3", data["r3"])
        await pilot.pause()
        assert screen(app) == await fresh_screen(data, "r0", 0, columns, app_type)
        data["r1"] = ("r1", "an even longer note here")
        table.upsert("r1", data["r1"])
        await pilot.pause()
        assert screen(app) == await fresh_screen(data, "r0", 0, columns, app_type)


def styled_screen(app: App) -> list[list[tuple[str, str]]]:
    """The composed screen with each run's style (what a patched row render must keep)."""
    update = render_screen(app.screen)
    lines = []
    for line in update.strips:
        segments = [s for strip in line for s in strip]
        lines.append([(s.text, str(s.style)) for s in segments if s.text])
    return lines


async def focused_table(
    app: TableApp, pilot: Any, n: int, cursor: str
) -> tuple[KeyedTable, dict[str, tuple]]:
    """``app``'s table focused, holding ``rows(n)``, the cursor on ``cursor``, painted."""
    table = app.query_one(KeyedTable)
    table.focus()
    data = rows(n)
    table.sync(data)
    table.select(cursor)
    await pilot.pause()
    return table, data


async def fresh_styled_screen(
    data: dict[str, tuple], cursor: str, app_type: type[TableApp] = TableApp
) -> list[list[tuple[str, str]]]:
    """The styled screen of a focused table built fresh with ``data``, the cursor on its key."""
    app = app_type()
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one(KeyedTable)
        table.focus()
        table.sync(data)
        table.select(cursor)
        await pilot.pause()
        return styled_screen(app)


async def test_a_cell_written_in_place_keeps_its_row_style_cursor_and_stripes() -> None:
    """The written cell's render goes into its row's cached render: the cursor row, zebra
    stripes and a focused table look exactly as a table built fresh with those cells."""
    app = TableApp()
    async with app.run_test(size=SIZE) as pilot:
        table, data = await focused_table(app, pilot, 20, "r02")
        for tick in range(3):  # several frames of ticking cells: cursor, odd and even rows
            for key in ("r01", "r02", "r03", "r04"):
                data[key] = (key, data[key][1], f"{tick}s")
                table.set_cell(key, "age", f"{tick}s")
            await pilot.pause()
        patched = styled_screen(app)
    assert patched == await fresh_styled_screen(data, "r02")


async def test_a_new_list_reuses_cell_renders_only_where_content_and_place_match() -> None:
    """A new list (a filter, the filter cleared) reuses the renders of cells with the same
    content at the same place; the screen is exactly a fresh table's, styles included."""
    app = TableApp()
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one(KeyedTable)
        table.focus()
        everything = rows(20)
        table.sync(everything)
        await pilot.pause()
        rendered = len(table._renders)
        table.sync({k: everything[k] for k in ("r05", "r07", "r15")})  # a filter
        await pilot.pause()
        table.sync(everything)  # cleared: the same cells at the same places again
        await pilot.pause()
        assert len(table._renders) == rendered + 3 * 3  # only the filter's own rows were new
        changed = dict(everything)
        changed["r01"] = ("r01", Text("running", style="green"), "2s")
        changed["r03"] = changed.pop("r03")  # content moved: r03 is now last, r04 second
        for _ in range(12):
            table.sync({k: everything[k] for k in list(everything)[:12:2]})  # > REBUILD_AT gone
            await pilot.pause()
            table.sync(changed)
            table.select("r04")
            await pilot.pause()
        reused = styled_screen(app)
    assert reused == await fresh_styled_screen(changed, "r04")


TEXT_CELLS = (
    "",
    "ok",
    "exactly-9",  # the cell's width
    "a much longer title than fits",
    "日本語のタイトル",  # wide characters, cut inside one at an odd width
    "🚀 launch 🚀",
    "[bold]not markup[/]",
    "\x1b[31mescape\x07 \u202ertl",  # made visible by cell()
    Text("running", style="bold green"),
    Text("needs cleanup", style="on red"),
    Text.assemble(("can", "yellow"), "cel", ("ling…", "italic")),
    Text("a cut with an ellipsis at the end", overflow="ellipsis"),
    Text("cropped text that is long", overflow="crop"),
)


async def test_a_text_cell_renders_as_datatable_renders_it() -> None:
    """The one-line text cell path gives DataTable's segments, styles and mouse meta included:
    cursor, hover, stripes, focus, cut and wide characters."""
    columns = (Column("a", "A", 9), Column("b", "B", 4), Column("c", "C", 1))
    app = TableApp(columns)
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one(KeyedTable)
        data = {f"r{i}": (v, v, v) for i, v in enumerate(TEXT_CELLS)}
        table.sync(data)
        await pilot.pause()
        compared = 0
        for focused in (False, True):
            if focused:
                table.focus()
                await pilot.pause()
            for row in range(len(TEXT_CELLS)):
                for column, spec in enumerate(columns):
                    width = table.ordered_columns[column].get_render_width(table)
                    assert width == spec.width + 2 * table.cell_padding
                    for cursor, hover in ((False, False), (True, False), (False, True)):
                        style = table.row_style(row, table.rich_style)
                        args = (row, column, style, width, cursor, hover)
                        fast = table._render_text_cell(*args)
                        slow = DataTable._render_cell(table, *args)
                        assert fast is not None
                        assert _runs(fast) == _runs(slow), (TEXT_CELLS[row], spec, args)
                        compared += 1
        assert compared == 2 * len(TEXT_CELLS) * 3 * 3


async def test_other_cells_are_left_to_datatable() -> None:
    columns = (Column("a", "A", 9),)
    app = TableApp(columns)
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one(KeyedTable)
        wrapped = Text("wraps at words")
        wrapped.no_wrap = False
        cells = (wrapped, Text("right", justify="right"))  # (a line break is shown escaped)
        table.sync({f"r{i}": (c,) for i, c in enumerate(cells)})
        await pilot.pause()
        width = table.ordered_columns[0].get_render_width(table)
        for row in range(len(cells)):
            assert table._render_text_cell(row, 0, table.rich_style, width, False, False) is None
        assert table._render_text_cell(-1, 0, table.rich_style, width, False, False) is None


def _runs(lines: list[list[Segment]]) -> list[list[tuple[str, Style | None]]]:
    """Lines as runs of equal style (how the segments are split does not show)."""
    return [[(s.text, s.style) for s in Segment.simplify(line)] for line in lines]


class HotApp(TableApp):
    CSS = "KeyedTable.hot > .datatable--even-row { background: red; }"


async def test_styles_held_through_a_frame_follow_a_change_at_the_next() -> None:
    """The table holds its component styles and backgrounds for one frame (DataTable asks for
    them per line): a style changed between frames shows in the next one, as a fresh table."""
    app = HotApp()
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one(KeyedTable)
        data = rows(20)
        table.sync(data)
        await pilot.pause()
        before = styled_screen(app)
        table.add_class("hot")
        await pilot.pause()
        after = styled_screen(app)
        assert isinstance(table.get_component_styles("datatable--even-row"), RenderStyles)
    fresh = HotApp()
    async with fresh.run_test(size=SIZE) as pilot:
        table = fresh.query_one(KeyedTable)
        table.add_class("hot")
        table.sync(data)
        await pilot.pause()
        assert after == styled_screen(fresh) != before


async def test_a_row_added_above_the_cursor_scrolls_with_the_rows_before_any_frame() -> None:
    """The cursor at the bottom follows its row down, and the table scrolls as the rows move,
    not a frame later (DataTable waits for its idle re-size: a frame showed the rows moved and
    not the scroll, then layout and scroll each took one more, ≈ 7 ms of a new Goal's ≈ 32 ms
    at the dashboard, measured under 10 new Goals a second)."""
    app = FullHeightApp()
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one(KeyedTable)
        data = rows(30)
        table.sync(data)
        table.select("r29")
        await pilot.pause()
        for n in range(3):
            scrolled = table.scroll_y
            key = f"r05-{n}"
            data = dict(sorted({**data, key: (key, Text("new"), "0s")}.items()))
            table.upsert(key, data[key])
            table.order(list(data))
            assert table.selected_key == "r29" and table.scroll_y == scrolled + 1  # no await
            await pilot.pause()
        assert screen(app) == await fresh_screen(
            data, "r29", table.scroll_y, app_type=FullHeightApp
        )
        table.drop("r00")  # a row gone above: the same, the other way
        del data["r00"]
        assert table.selected_key == "r29" and table.scroll_y == scrolled
        await pilot.pause()
        assert screen(app) == await fresh_screen(
            data, "r29", table.scroll_y, app_type=FullHeightApp
        )


async def test_rows_moved_into_their_place_are_a_fresh_tables_rows_cursor_on_its_key() -> None:
    """A new row appended and moved to its place (a Goal between others: O(rows moved), not the
    whole order again) above the window, into it and below it, after a row dropped (DataTable's
    own map again) and back to the end: the keys, every row's index, the cursor's key and the
    scroll are a table's whose rows were put in order, and so is the screen."""
    app = FullHeightApp()
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one(KeyedTable)
        data = rows(30)
        table.sync(data)
        table.select("r15")
        await pilot.pause()
        for key in ("r00-a", "r14-a", "r27-a", "r03-a", "r29-a"):
            if key == "r03-a":
                table.drop("r02")
                del data["r02"]
            data = dict(sorted({**data, key: (key, Text("new"), "0s")}.items()))
            table.upsert(key, data[key])
            assert table.keys()[-1] == key
            table.move(key, list(data).index(key))
            assert table.keys() == list(data)
            assert [table.row_index_of(RowKey(k)) for k in data] == list(range(len(data)))
            assert table.selected_key == "r15" and "r15" in table.visible_keys()  # no await
            await pilot.pause()
            assert screen(app) == await fresh_screen(
                data, "r15", table.scroll_y, app_type=FullHeightApp
            )
        table.move("r00", len(data) - 1)  # and back: a row moved down
        moved = [k for k in data if k != "r00"] + ["r00"]
        assert table.keys() == moved and table.selected_key == "r15"
        assert [table.row_index_of(RowKey(k)) for k in moved] == list(range(len(moved)))


def counting_data_lines(table: KeyedTable) -> list[str]:
    """Record the key of each row whose line DataTable renders from now on (what a line costs:
    its cells and styles put together), "(header)" for the header's."""
    rendered: list[str] = []
    render = table._render_line_in_row

    def rendering(row_key: Any, *args: Any, **kwargs: Any) -> Any:
        known = table.row_index_of(row_key) is not None
        rendered.append(str(row_key.value) if known else "(header)")
        return render(row_key, *args, **kwargs)

    table._render_line_in_row = rendering  # type: ignore[method-assign]
    return rendered


def insert_above(table: KeyedTable, data: dict[str, tuple], key: str) -> dict[str, tuple]:
    data = dict(sorted({**data, key: (key, Text("new"), "0s")}.items()))
    table.upsert(key, data[key])
    table.order(list(data))
    return data


async def test_a_row_that_only_moved_is_not_rendered_again() -> None:
    """Rows added above the cursor move every row below them and the screen scrolls a line:
    each row's line is kept by its key and stripe, so once a row was drawn in both stripes a
    move draws nothing again; the screen is a fresh table's, styles, stripes and cursor too."""
    app = FullHeightApp()
    async with app.run_test(size=SIZE) as pilot:
        table, data = await focused_table(app, pilot, 30, "r29")
        data["r20"] = ("r20", data["r20"][1], "9s")  # a line kept before, its cell written since
        table.set_cell("r20", "age", "9s")
        await pilot.pause()
        rendered = counting_data_lines(table)
        data = insert_above(table, data, "r05-0")
        await pilot.pause()
        first = set(rendered)  # every row on screen below the new one, in its other stripe
        assert len(first - {"(header)"}) >= SIZE[1] - 2
        rendered.clear()
        for n in range(1, 4):
            data = insert_above(table, data, f"r05-{n}")
            await pilot.pause()
        assert set(rendered) <= {"r05-1", "r05-2", "r05-3"}  # on screen only if scrolled to;
        # the header is kept too (DataTable's own cache of it is keyed by a counter new rows bump)
        moved = styled_screen(app)
    assert moved == await fresh_styled_screen(data, "r29", FullHeightApp)


def counting_window_lines(table: KeyedTable) -> list[int]:
    """Record each line of the table the styles cache asks for from now on (a repaint)."""
    asked: list[int] = []
    render_line = table.render_line

    def rendering(y: int) -> Any:
        asked.append(y)
        return render_line(y)

    table.render_line = rendering  # type: ignore[method-assign]
    return asked


async def test_rows_added_below_the_window_repaint_nothing_in_it() -> None:
    """A new row sorted below the window grows the table (its scrollbar shows it) but draws no
    line of the window again; one sorted into the window repaints it; the screen is a fresh
    table's after each."""
    app = FullHeightApp()
    async with app.run_test(size=SIZE) as pilot:
        table, data = await focused_table(app, pilot, 30, "r00")
        asked = counting_window_lines(table)
        for n in range(3):
            data = insert_above(table, data, f"r25-{n}")
            await pilot.pause()
        assert asked == [] and table.virtual_size.height == 1 + 33
        assert styled_screen(app) == await fresh_styled_screen(data, "r00", FullHeightApp)
        data = insert_above(table, data, "r03-0")
        await pilot.pause()
        assert len(set(asked)) >= SIZE[1] - 4  # the rows below the new one moved down
        assert styled_screen(app) == await fresh_styled_screen(data, "r00", FullHeightApp)


async def test_rows_put_in_order_while_the_table_was_hidden_show_when_it_is_shown() -> None:
    app = FullHeightApp()
    async with app.run_test(size=SIZE) as pilot:
        table, data = await focused_table(app, pilot, 30, "r00")
        table.display = False
        await pilot.pause()
        data = insert_above(table, data, "r03-0")  # in the window it will show
        await pilot.pause()
        table.display = True
        table.focus()  # hiding it took the focus away
        await pilot.pause()
        assert styled_screen(app) == await fresh_styled_screen(data, "r00", FullHeightApp)


async def test_a_click_selects_the_row_on_that_line_after_rows_moved() -> None:
    """A kept line carries, in its cells' mouse meta, the row index where it was drawn; a
    click (and the hover) goes to the row on that line now."""
    app = FullHeightApp()
    async with app.run_test(size=SIZE) as pilot:
        table, data = await focused_table(app, pilot, 30, "r29")
        for n in range(2):  # both stripes drawn: the lines on screen are kept ones now
            data = insert_above(table, data, f"r05-{n}")
            await pilot.pause()
        assert table.scroll_y > 0
        line = 4  # the table's fifth line: the header, then rows from the scroll offset
        shown = table.row_at_line(line + int(table.scroll_y))
        assert shown is not None and shown[0].value != "r29"
        await pilot.hover(KeyedTable, offset=(2, line))
        assert table.hover_row == table.row_index_of(shown[0])
        await pilot.click(KeyedTable, offset=(2, line))
        await pilot.pause()
        assert table.selected_key == shown[0].value


async def test_kept_lines_follow_focus_leaving_and_the_hover_going() -> None:
    """The hover shows on the row under the mouse until a key, and the cursor's row looks
    different focused and not: kept lines show each only while it is so (the screens are those
    of a table whose lines were never kept elsewhere)."""

    async def hover_key_blur(app: FullHeightApp, pilot: Any, moved: bool) -> list[Any]:
        table = app.query_one(KeyedTable)
        table.focus()
        table.sync(rows(30))
        table.select("r03")
        await pilot.pause()
        if moved:  # the rows' lines drawn, then kept, at other places
            for n in range(2):
                table.upsert(f"r00-{n}", (f"r00-{n}", Text("new"), "0s"))
                table.order(sorted(table.keys()))
                await pilot.pause()
            for key in ("r00-0", "r00-1"):
                table.drop(key)
            await pilot.pause()
        if moved:  # the hover on r04, then r05: r05's line is kept with the hover drawn
            for line in (5, 6):
                await pilot.hover(KeyedTable, offset=(2, line))
                await pilot.pause()
        await pilot.hover(KeyedTable, offset=(2, 8))  # then on r07
        await pilot.pause()
        hovered = styled_screen(app)
        await pilot.press("down")  # a key hides the hover
        table.blur()
        await pilot.pause()
        return [hovered, styled_screen(app)]

    app = FullHeightApp()
    async with app.run_test(size=SIZE) as pilot:
        kept = await hover_key_blur(app, pilot, moved=True)
    fresh = FullHeightApp()
    async with fresh.run_test(size=SIZE) as pilot:
        assert kept == await hover_key_blur(fresh, pilot, moved=False)
    assert kept[0] != kept[1]


def counting_layouts(app: App) -> list[int]:
    """Every layout of the screen from now on (Textual's reflow of its widgets)."""
    laid_out: list[int] = []
    refresh_layout = app.screen._refresh_layout

    def counted(*args: Any, **kwargs: Any) -> None:
        laid_out.append(1)
        refresh_layout(*args, **kwargs)

    app.screen._refresh_layout = counted  # type: ignore[method-assign]
    return laid_out


@pytest.mark.parametrize("app_type", [TableApp, FullHeightApp])
async def test_rows_added_lay_out_the_screen_only_when_the_table_or_its_bar_changes_size(
    app_type: type[TableApp],
) -> None:
    """A table whose height is not its rows' (the dashboard's) grows without a layout of the
    screen, its scrollbar lengthened in place; the layout comes when the scrollbar appears. A
    table sized by its rows is laid out for each. The screen is a fresh table's after each."""
    app = app_type()
    async with app.run_test(size=SIZE) as pilot:
        table, data = await focused_table(app, pilot, 6, "r00")
        laid_out = counting_layouts(app)
        for i in range(6, 14):  # the window fills (12 lines): the scrollbar appears
            data[f"r{i:02d}"] = (f"r{i:02d}", Text("queued"), "0s")
            table.upsert(f"r{i:02d}", data[f"r{i:02d}"])
            await pilot.pause()
        assert table.show_vertical_scrollbar
        appeared = len(laid_out)
        assert appeared >= 1
        for i in range(14, 30):  # below the window, the bar already there
            data[f"r{i:02d}"] = (f"r{i:02d}", Text("held"), f"{i}s")
            table.upsert(f"r{i:02d}", data[f"r{i:02d}"])
            await pilot.pause()
        if app_type is FullHeightApp:
            assert len(laid_out) == appeared  # where each new row made one
        else:
            assert len(laid_out) >= appeared + 16
        assert styled_screen(app) == await fresh_styled_screen(data, "r00", app_type)
        table.select("r29")
        data["r30"] = ("r30", Text("new"), "0s")
        table.upsert("r30", data["r30"])
        await pilot.pause()
        assert styled_screen(app) == await fresh_styled_screen(data, "r29", app_type)
