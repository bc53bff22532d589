"""Scrollbar tracks in the colour of the widget they scroll: Textual's default track is
$background-darken-1 (#000000 in the dark theme), which a truecolor terminal and the README's
screenshots draw as a black block beside the table or the help."""

from __future__ import annotations

from pathlib import Path

from textual.containers import VerticalScroll
from textual.widget import Widget

from refine_tui.app import RefineApp
from refine_tui.demo import populate
from refine_tui.screens.help import HelpScreen
from refine_tui.textual_private import render_screen
from refine_tui.widgets.keyed_table import KeyedTable
from tests.helpers.waits import until

NODE = "n1"


def track_matches(widget: Widget) -> None:
    styles = widget.styles
    assert widget.show_vertical_scrollbar, "the test needs a scrollbar on screen"
    for track in (
        styles.scrollbar_background,
        styles.scrollbar_background_hover,
        styles.scrollbar_background_active,
        styles.scrollbar_corner_color,
    ):
        assert track == styles.background, (widget, track, styles.background)


async def test_the_tables_and_the_helps_scrollbar_tracks_are_their_own_colour(
    tmp_path: Path,
) -> None:
    path = populate(tmp_path / "journal.db", node=NODE)  # all 15 goals; no node: nothing moves
    app = RefineApp(journal=path, node=NODE)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: len(app.goal_rows) == 15)
        await pilot.press("h")  # the history pane leaves the table too short for 15 goals
        table = app.query_one("#goals", KeyedTable)
        await until(pilot, lambda: table.show_vertical_scrollbar)
        track_matches(table)
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen))
        help_text = app.screen.query_one("#help", VerticalScroll)
        await until(pilot, lambda: help_text.show_vertical_scrollbar)
        track_matches(help_text)


def screen_lines(app: RefineApp) -> list[str]:
    update = render_screen(app.screen)
    return ["".join(strip.text for strip in line) for line in update.strips]


async def test_the_tables_scrollbar_leaves_the_last_columns_ellipsis_on_screen(
    tmp_path: Path,
) -> None:
    """The Goal columns fill 80 cells exactly; a 2-cell scrollbar covered the Note's last
    character, so a cut note ("superseded by b") read as whole."""
    path = populate(tmp_path / "journal.db", node=NODE)
    app = RefineApp(journal=path, node=NODE)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: len(app.goal_rows) == 15)
        await pilot.press("h")  # the history pane leaves the table too short for 15 goals
        table = app.query_one("#goals", KeyedTable)
        await until(pilot, lambda: table.show_vertical_scrollbar)
        table.select("old-backfill")

        def row() -> str:  # the table's row (the row line below starts "old-backfill:")
            return next((s for s in screen_lines(app) if "old-backfill  " in s), "")

        await until(pilot, lambda: bool(row()))
        assert "superseded by b…" in row(), row()
