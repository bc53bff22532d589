"""Marks (issue 23, DESIGN §15): space, `*` and `u` in the Goals view; with marks, `c` `s` `R`
act on the marked goals through one confirmation. Real journal, real dashboard under Pilot."""

from __future__ import annotations

from pathlib import Path

from refine_tui.app import RefineApp
from refine_tui.screens.confirm import CancelModal, ConfirmModal
from refine_tui.textual_private import notifications
from refine_tui.views.goals import MARK
from refine_tui.widgets.text_line import TextLine
from store.journal.sqlite import Journal
from store.model.goals import Goals
from tests.helpers.dashboard import goals_table, loaded, select
from tests.helpers.waits import until

NODE = "n1"
SIZE = (100, 30)


def hint_line(app: RefineApp) -> str:
    return str(app.query_one("#why", TextLine).render())


def notes(app: RefineApp) -> list[str]:
    return [n.message for n in notifications(app)]


def goal_cell(app: RefineApp, goal_id: str) -> str:
    return str(goals_table(app).get_cell(goal_id, "goal"))


def add_queued(path: Path, *goal_ids: str) -> None:
    with Journal.open(path) as journal:
        for goal_id in goal_ids:
            Goals(journal).create(
                goal_id=goal_id, title=f"batch {goal_id}", argv=["true"], node_id="n9"
            )


async def test_space_marks_and_unmarks_with_a_glyph(journal_path: Path) -> None:
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        await select(pilot, "migrate-db")
        await pilot.press("space")
        assert goal_cell(app, "migrate-db").startswith(f"{MARK} migrate")
        assert not goal_cell(app, "lint").startswith(MARK)
        assert "1 marked" in hint_line(app)
        await pilot.press("space")
        assert not goal_cell(app, "migrate-db").startswith(MARK)
        assert "marked" not in hint_line(app)


async def test_star_marks_what_the_filter_shows_and_hidden_marks_are_counted(
    journal_path: Path,
) -> None:
    add_queued(journal_path, "batch-a", "batch-b", "batch-c")
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        await select(pilot, "lint")
        await pilot.press("space")
        app.dashboard.set_filter("batch")
        await until(pilot, lambda: set(app.goal_rows) == {"batch-a", "batch-b", "batch-c"})
        await pilot.press("asterisk")
        await until(pilot, lambda: "4 marked (1 hidden by the filter)" in hint_line(app))
        assert all(goal_cell(app, g).startswith(MARK) for g in app.goal_rows)
        await pilot.press("u")
        await until(pilot, lambda: "marked" not in hint_line(app))
        assert not any(goal_cell(app, g).startswith(MARK) for g in app.goal_rows)


async def test_cancel_on_three_marked_goals(journal_path: Path) -> None:
    add_queued(journal_path, "batch-a", "batch-b", "batch-c")
    app = RefineApp(journal=journal_path, node=NODE, operator="dana")
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        for goal_id in ("batch-a", "batch-b", "batch-c"):
            await select(pilot, goal_id)
            await pilot.press("space")
        await select(pilot, "lint")  # the selected row is not what c acts on: the marks are
        before = len(notes(app))
        await pilot.press("c")
        await until(pilot, lambda: isinstance(app.screen, CancelModal))
        body = str(app.screen.query_one("#dialog-text").render())
        assert body.startswith("Cancel 3 goals: 3 queued")
        assert "3 marked goals" in str(app.screen.query_one("#dialog-title").render())
        await pilot.press(*"retired", "enter")
        await until(pilot, lambda: len(notes(app)) > before)  # the batch's summary
        with Journal.open(journal_path, read_only=True) as journal:
            for goal_id in ("batch-a", "batch-b", "batch-c"):
                goal = Goals(journal).read(goal_id)
                assert goal.status == "cancelled" and goal.cancel_reason == "retired"
            assert Goals(journal).read("lint").status == "completed"
        new = notes(app)[before:]
        assert len(new) == 1 and new[0].startswith("cancel: 3 of 3 goals done (3 cancelled)")
        await until(pilot, lambda: "marked" not in hint_line(app))  # cleared after
        await until(pilot, lambda: app.goal_rows["batch-a"].status == "cancelled")


async def test_marks_survive_backing_out_and_without_marks_keys_act_on_the_row(
    journal_path: Path,
) -> None:
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await select(pilot, "migrate-db")  # held
        await pilot.press("space")
        await pilot.press("R")
        await until(pilot, lambda: isinstance(app.screen, ConfirmModal))
        body = str(app.screen.query_one("#dialog-body Static").render())
        assert body.startswith("Release 1 goal: 1 held")
        await pilot.press("n")
        await until(pilot, lambda: not isinstance(app.screen, ConfirmModal))
        assert "1 marked" in hint_line(app)
        await pilot.press("u")
        await pilot.press("R")
        await until(pilot, lambda: isinstance(app.screen, ConfirmModal))
        assert "Release goal migrate-db" in str(app.screen.query_one("#dialog-title").render())


async def test_cancel_on_marked_goals_with_nothing_to_do_asks_for_no_reason(
    journal_path: Path,
) -> None:
    """Every marked Goal is already terminal: nothing would be written, so no dialog asks for a
    reason; the plan's sentence is said, and the marks stay for the operator to change."""
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        for goal_id in ("lint", "build-docs"):  # completed
            await select(pilot, goal_id)
            await pilot.press("space")
        before = len(notes(app))
        await pilot.press("c")
        await until(pilot, lambda: len(notes(app)) > before)
        assert notes(app)[before:] == ["Cancel 2 goals: 2 already terminal (nothing to do)"]
        await pilot.pause(0.2)
        assert len(app.screen_stack) == 1 and "2 marked" in hint_line(app)
        with Journal.open(journal_path, read_only=True) as journal:
            assert Goals(journal).read("lint").status == "completed"


async def test_a_batch_names_each_goal_it_skipped_on_a_line_of_its_own(journal_path: Path) -> None:
    """A marked Goal cancelled elsewhere while the dialog was open is skipped; the summary names
    it on its own line (the lines were joined by a newline the notification showed as `\\n`)."""
    add_queued(journal_path, "batch-a", "batch-b")
    app = RefineApp(journal=journal_path, node=NODE, operator="dana")
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        for goal_id in ("batch-a", "batch-b"):
            await select(pilot, goal_id)
            await pilot.press("space")
        await pilot.press("c")
        await until(pilot, lambda: isinstance(app.screen, CancelModal))
        with Journal.open(journal_path) as journal:  # another operator, meanwhile
            Goals(journal).cancel(goal_id="batch-b", reason="first", command_id="elsewhere")
        before = len(notes(app))
        await pilot.press(*"retired", "enter")
        await until(pilot, lambda: len(notes(app)) > before)
        (said,) = notes(app)[before:]
        summary, skipped = said.split("\n")
        assert summary == "cancel: 1 of 2 goals done (1 cancelled); 1 skipped"
        assert skipped.startswith("cancel batch-b: skipped: it changed since the plan (queued")
        assert "\\n" not in said
