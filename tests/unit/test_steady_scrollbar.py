"""The table's scrollbar repaints only the lines where the bar changed, and the screen is the
one Textual's own scrollbar draws, step for step (rows added under the cursor, a jump, a
resize, a position past the end, the pointer over the bar)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from rich.segment import Segment
from textual.app import App, ComposeResult
from textual.geometry import Offset
from textual.scrollbar import ScrollBar
from textual.widget import Widget

from refine_tui.textual_private import DataTableDoor, render_screen
from refine_tui.widgets.keyed_table import Column, KeyedTable
from refine_tui.widgets.steady_scrollbar import SteadyScrollBar

SIZE = (30, 12)
ROWS = 60


class SteadyTable(DataTableDoor):
    def make_vertical_scrollbar(self, thickness: int) -> ScrollBar:
        return SteadyScrollBar(vertical=True, name="vertical", thickness=thickness)


class TableApp(App[None]):
    def __init__(self, table: type[DataTableDoor]) -> None:
        super().__init__()
        self.table_class = table

    def compose(self) -> ComposeResult:
        yield self.table_class(cursor_type="row")

    def on_mount(self) -> None:
        table = self.query_one(DataTableDoor)
        table.add_column("Id", key="id", width=6)
        table.add_column("Status", key="status", width=10)


def screen(app: App[Any]) -> list[list[tuple[str, object]]]:
    """Every cell's character and look, as the compositor would send the whole screen."""
    lines = render_screen(app.screen).strips  # each line: the strips of its cuts
    return [
        [cell for strip in line for segment in strip for cell in cells(segment)] for line in lines
    ]


def cells(segment: Segment) -> list[tuple[str, object]]:
    style = segment.style
    look = (style.color, style.bgcolor, style.reverse) if style else None
    return [(char, look) for char in segment.text]


async def run(table: type[DataTableDoor], renders: Counter[str]) -> list[object]:
    """The screens after each step, and the bar's lines rendered (in ``renders``)."""
    app = TableApp(table)
    screens: list[object] = []
    async with app.run_test(size=SIZE) as pilot:
        door = app.query_one(DataTableDoor)
        await pilot.pause()
        for n in range(ROWS):
            door.add_row(f"r{n}", "queued", key=f"r{n}")
            door.move_cursor(row=n, animate=False)
            await pilot.pause()
            screens.append(screen(app))
        bar = door.vertical_scrollbar
        renders["added"] = renders["bar"]
        door.move_cursor(row=0, animate=False)
        await pilot.pause()
        screens.append(screen(app))
        await pilot.resize_terminal(SIZE[0], SIZE[1] - 3)
        await pilot.pause()
        screens.append(screen(app))
        bar.position = bar.window_virtual_size  # past the end, as a layout may leave it
        await pilot.pause()
        screens.append(screen(app))
        door.styles.scrollbar_color = "red"  # the table's style: the bar's colours
        await pilot.pause()
        screens.append(screen(app))
        bar.styles.tint = "blue 40%"  # the bar's own style
        await pilot.pause()
        screens.append(screen(app))
        await pilot.hover(bar, offset=Offset(0, 2))
        await pilot.pause()
        assert bar.mouse_over
        screens.append(screen(app))
    return screens


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    renders: Counter[str] = Counter()
    render_line = Widget.render_line

    def counting(widget: Widget, y: int) -> Any:
        if isinstance(widget, ScrollBar):
            renders["bar"] += 1
        return render_line(widget, y)

    monkeypatch.setattr(Widget, "render_line", counting)
    return renders


async def test_the_steady_bar_draws_what_textuals_draws_rendering_fewer_lines(
    counted: Counter[str],
) -> None:
    steady = await run(SteadyTable, counted)
    steady_lines = counted["added"]
    counted.clear()
    textuals = await run(DataTableDoor, counted)
    assert len(steady) == len(textuals) == ROWS + 6
    for step, (ours, theirs) in enumerate(zip(steady, textuals, strict=True)):
        assert ours == theirs, step
    # 60 rows added, the thumb moving down: Textual drew the bar whole at each (11 lines).
    assert counted["added"] >= 5 * ROWS
    assert steady_lines <= counted["added"] // 4, (steady_lines, counted["added"])


def test_the_keyed_tables_scrollbar_is_the_steady_one() -> None:
    table = KeyedTable([Column("id", "Id", 4)])
    assert type(table.make_vertical_scrollbar(1)) is SteadyScrollBar
