"""A terminal made smaller keeps the selected Goal in the window (seen in tmux: 80×24 → 60×16
with the cursor on the last Goal left it below the window until the next key)."""

from __future__ import annotations

from pathlib import Path

from refine_tui.app import RefineApp
from refine_tui.demo import populate
from refine_tui.widgets.keyed_table import KeyedTable
from store.journal.sqlite import Journal
from store.model.goals import Goals
from tests.helpers.dashboard import goals_table
from tests.helpers.waits import until

NODE = "n1"


def in_window(table: KeyedTable) -> bool:
    """The cursor's row is one of the lines the table shows (below its header)."""
    rows = table.size.height - (table.header_height if table.show_header else 0)
    top = round(table.scroll_y)
    return top <= table.cursor_row < top + rows


async def test_the_selected_goal_stays_in_the_window_when_the_terminal_shrinks(
    tmp_path: Path,
) -> None:
    path = populate(tmp_path / "journal.db", node=NODE, live=False)
    with Journal.open(path) as journal:  # more Goals than a 60×16 window shows
        for n in range(12):
            Goals(journal).create(goal_id=f"q{n:02d}", title="queued", node_id=NODE, argv=["true"])
    app = RefineApp(journal=path, node=NODE)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: len(app.goal_rows) >= 12)
        table = goals_table(app)
        for key, size in (("end", (60, 16)), ("home", (80, 24)), ("end", (60, 12))):
            await pilot.press(key)
            await pilot.pause()
            selected = table.selected_key
            await pilot.resize_terminal(*size)
            await pilot.pause()
            await until(pilot, lambda: table.size.height > 0)
            await pilot.pause()
            assert table.selected_key == selected, size
            assert in_window(table), (size, table.cursor_row, table.scroll_y, table.size)


async def test_toasts_keep_off_the_row_line_unless_the_terminal_is_short(tmp_path: Path) -> None:
    """At 60×16 the table shows seven rows: an alert there hid what Stop answered below it, so
    the toasts may then cover the row line too, down to the footer (at 80×24 they stop above
    the row line, which says what the keys act on)."""
    path = populate(tmp_path / "journal.db", node=NODE, live=False)
    app = RefineApp(journal=path, node=NODE)
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await until(pilot, lambda: len(app.goal_rows) > 5)
        app.notify("one", timeout=30)
        await pilot.pause()
        rack = app.screen.query_one("#textual-toastrack")
        line, footer = app.screen.query_one("#rowline"), app.screen.query_one("KeyFooter")
        for size, reaches in (((80, 24), "row line"), ((60, 16), "footer"), ((80, 24), "row line")):
            await pilot.resize_terminal(*size)
            await pilot.pause()
            await pilot.pause()
            top = rack.styles.margin.top  # the rack is docked at the top, this far down
            end = top + int(rack.styles.max_height.value)  # type: ignore[union-attr]
            bottom = line.region.y if reaches == "row line" else footer.region.y
            assert end <= bottom, (size, end, bottom)
            assert reaches == "row line" or end == footer.region.y, (size, end)
