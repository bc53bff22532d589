"""Keys a newcomer can find, greyed where they cannot work, and 60×16 (issue 24, items 3–5)."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import Footer, Static

from refine_tui.app import RefineApp
from refine_tui.screens.confirm import SCROLL_HINT, ConfirmModal
from refine_tui.screens.help import HelpScreen
from refine_tui.textual_private import FooterKey, notifications, render_screen
from refine_tui.widgets.keyed_table import KeyedTable
from tests.helpers.dashboard import goals_table, loaded, select
from tests.helpers.waits import until

NODE = "n1"


def footer(app: RefineApp) -> dict[str, bool]:
    """The footer's keys on screen, whole: "key description" → enabled."""
    keys = app.query_one(Footer).query_children(FooterKey)
    width = app.size.width
    return {
        f"{k.key_display} {k.description}": not k.has_class("-disabled")
        for k in keys
        if k.display and k.region.width and k.region.right <= width
    }


def screen_lines(app: RefineApp) -> list[str]:
    return ["".join(strip.text for strip in line) for line in render_screen(app.screen).strips]


def why_line(app: RefineApp) -> str:
    return str(app.screen.query_one("#why", Static).render())


# --- item 3: keys you can discover -----------------------------------------------------------


async def test_the_footer_shows_enter_and_escape_where_they_go_somewhere(
    journal_path: Path,
) -> None:
    """enter and escape were never in the footer: a newcomer did not know how to drill down
    into a Goal's Runs, nor how to come back."""
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        await select(pilot, "unit-tests")
        await until(pilot, lambda: "⏎ Runs" in footer(app))
        assert not any(k.startswith("esc ") for k in footer(app))  # nowhere to go back to
        await pilot.press("enter")
        await until(pilot, lambda: "⏎ Attempts" in footer(app) and "esc Back" in footer(app))
        await pilot.press("enter")
        await until(pilot, lambda: app.dashboard.stack.view == "attempts")
        await until(pilot, lambda: "esc Back" in footer(app) and "⏎ Attempts" not in footer(app))
        await pilot.press("escape", "escape")
        await until(pilot, lambda: app.dashboard.stack.view == "goals")
        await until(pilot, lambda: "⏎ Runs" in footer(app) and "esc Back" not in footer(app))


async def test_escape_on_the_goals_table_clears_the_filter(journal_path: Path) -> None:
    """After a filter, escape on the table did nothing: the header kept `filter "report"`."""
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        await pilot.press("slash", *"report", "enter")
        await until(pilot, lambda: list(app.goal_rows) == ["nightly-report"])
        await until(pilot, lambda: app.focused is goals_table(app))
        await pilot.press("escape")
        await until(pilot, lambda: len(app.goal_rows) == 8 and not app.header_state.filter)
        assert app.dashboard.stack.view == "goals"


async def test_the_footer_shows_escape_while_a_filter_is_on(journal_path: Path) -> None:
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        await pilot.press("slash", *"report", "enter")
        await until(pilot, lambda: list(app.goal_rows) == ["nightly-report"])
        await until(pilot, lambda: "esc Back" in footer(app))
        await pilot.press("escape")
        await until(pilot, lambda: len(app.goal_rows) == 8)
        await until(pilot, lambda: "esc Back" not in footer(app))


async def test_help_lists_every_key_the_footer_leaves_out(journal_path: Path) -> None:
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen))
        text = (Path(__file__).parents[2] / "refine_tui" / "help.md").read_text()
        for key in ("`enter`", "`escape`", "`w`", "`p`", "`r`", "`n`", "`l`", "`h`"):
            assert f"- {key}" in text or f"· {key}" in text, key


# --- item 4: Stop greyed where it cannot work ------------------------------------------------


async def test_stop_is_greyed_on_a_needs_cleanup_row_and_the_reason_line_says_why(
    journal_path: Path,
) -> None:
    """On `needs cleanup` (no process of the attempt is left here) `s` was offered, then
    refused (NO_PROCESS_RECORD); the reason line said only `R: not held`."""
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        assert app.goal_rows["nightly-report"].needs_cleanup
        await select(pilot, "nightly-report")
        await until(pilot, lambda: footer(app).get("s Stop") is False)
        assert footer(app)["x Cleanup"] is True  # what to do instead
        assert "s: no process here — x confirms cleanup" in why_line(app)
        await pilot.press("s")  # anyway: the store's typed refusal, and no dialog opens
        await until(pilot, lambda: bool(notifications(app)))
        said = [n.message for n in notifications(app)]
        assert any("(NO_PROCESS_RECORD)" in m for m in said), said
        assert not isinstance(app.screen, ConfirmModal)
        await select(pilot, "gpu-train")  # another node's running goal: its own reason
        await until(pilot, lambda: "s: on n2" in why_line(app))


# --- item 5: 60×16 ----------------------------------------------------------------------------


def fits(table: KeyedTable, upto: str) -> bool:
    """The columns up to ``upto`` are on screen without scrolling."""
    width = 0
    for key, column in table.columns.items():
        width += column.get_render_width(table)
        if key.value == upto:
            return width <= table.scrollable_content_region.width
    raise AssertionError(upto)


async def test_at_60x16_the_note_and_the_filter_key_stay_on_screen(journal_path: Path) -> None:
    """At 60 columns the Note (needs cleanup, R: release) was the first column to go, and the
    footer was cut after `h Hi`: the Filter was off screen."""
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=(60, 16)) as pilot:
        await loaded(pilot)
        goals = goals_table(app)
        assert fits(goals, "note")
        await until(pilot, lambda: any("needs cleanup" in line for line in screen_lines(app)))
        await until(pilot, lambda: any("R: release" in line for line in screen_lines(app)))
        # Waited for whole: under load the footer lays its keys out over more than one frame.
        wanted = ("/ Filter", "? Help", "q Quit", "⏎ Runs", "s Stop", "x Cleanup")
        await until(pilot, lambda: all(key in footer(app) for key in wanted))
        shown = [k for k in app.query_one(Footer).query_children(FooterKey) if k.display]
        assert all(k.region.right <= 60 for k in shown)  # whole keys only, none cut


async def test_at_60x16_the_cleanup_warning_is_whole_and_the_log_says_it_scrolls(
    journal_path: Path,
) -> None:
    """The Confirm cleanup modal cut its warning after "Confirm only if this attempt's work
    has really", and nothing said the log lines below it scroll."""
    app = RefineApp(journal=journal_path, node=NODE, operator="dana")
    async with app.run_test(size=(60, 16)) as pilot:
        await loaded(pilot)
        await select(pilot, "nightly-report")
        await pilot.press("x")
        await until(pilot, lambda: isinstance(app.screen, ConfirmModal))
        dialog = app.screen.query_one("#dialog")
        await until(pilot, lambda: dialog.border_subtitle == SCROLL_HINT)
        shown = " ".join(line.strip(" █▂▆▇") for line in screen_lines(app))
        assert "Confirm only if this attempt's work has really ended (process gone or fenced)." in (
            " ".join(shown.split())
        )
        body = app.screen.query_one("#dialog-body")
        text = str(app.screen.query_one("#dialog-body Static", Static).render())
        assert "last log lines (↑↓ scroll):" in text
        await pilot.press("down", "down")
        await until(pilot, lambda: body.scroll_y == 2)
        await pilot.press("up")
        await until(pilot, lambda: body.scroll_y == 1)
        assert isinstance(app.screen, ConfirmModal)  # the keys scrolled, nothing else
