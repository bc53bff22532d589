"""The dashboard driven through Pilot: real journals, real processes, real file events."""

from __future__ import annotations

import asyncio
import gc
import os
import sqlite3
import subprocess
import threading
from collections.abc import Callable, Iterable
from dataclasses import replace
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from textual import events
from textual.widgets import Button, Input, Label

import refine_tui.app
from refine_tui.app import RefineApp
from refine_tui.demo import populate
from refine_tui.detail import DetailPane
from refine_tui.goal_index import GoalIndex
from refine_tui.messages import JournalUpdate
from refine_tui.screens.confirm import CancelModal, ConfirmModal
from refine_tui.screens.help import HelpScreen
from refine_tui.textual_private import batch_depth, notifications
from refine_tui.views.goals import FILL_CHUNK, GoalsView
from refine_tui.widgets.keyed_table import KeyedTable
from refine_tui.widgets.text_line import TextLine
from store.journal.sqlite import Journal
from store.model.goals import Goals
from store.ops.operator import default_node, default_operator
from tests.helpers.dashboard import commit_in_process, end, goals_table, loaded, row_line, select
from tests.helpers.registry import node_registry, record_worker
from tests.helpers.waits import until

NODE = "n1"
SIZE = (100, 30)
OBSERVE_S = 5.5  # a little more than one of the dashboard's liveness rounds


def notes(app: RefineApp) -> list[str]:
    return [n.message for n in notifications(app)]


def read_goal(path: Path, goal_id: str):
    with Journal.open(path, read_only=True) as j:
        return Goals(j).read(goal_id)


# --- reading ---------------------------------------------------------------------------------


async def test_goals_table_shows_the_journal(journal_path: Path) -> None:
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        table = goals_table(app)
        assert set(table.keys()) == {
            "build-docs",
            "lint",
            "unit-tests",
            "deploy-stage",
            "old-backfill",
            "migrate-db",
            "gpu-train",
            "nightly-report",
        }
        rows = app.goal_rows
        assert rows["deploy-stage"].status == "exhausted"
        assert rows["nightly-report"].needs_cleanup
        assert "needs cleanup" in str(table.get_cell("nightly-report", "note"))
        assert rows["old-backfill"].note == "superseded by backfill-v2"
        assert str(table.get_cell("old-backfill", "note")).startswith("superseded by")
        assert str(table.get_cell("unit-tests", "attempts")) == "2/3"
        assert str(table.get_cell("gpu-train", "worker")) == "w-n2-7"
        assert app.header_state.last_sequence > 0 and app.header_state.total == 8


async def test_the_dashboard_collects_young_garbage_less_often_and_gives_the_setting_back(
    journal_path: Path,
) -> None:
    """Each frame under a stream of commits makes thousands of short-lived objects: while the
    dashboard runs, a young collection every 5,000 allocations, not 700; its process's own
    thresholds after."""
    before = gc.get_threshold()
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        assert gc.get_threshold() == (refine_tui.app.YOUNG_COLLECTIONS_EVERY, *before[1:])
        assert refine_tui.app.YOUNG_COLLECTIONS_EVERY == 5000 != before[0]
    assert gc.get_threshold() == before


async def test_drill_down_to_runs_attempts_history_and_log(journal_path: Path) -> None:
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await select(pilot, "unit-tests")
        await pilot.press("enter")
        runs = app.query_one("#runs", KeyedTable)
        await until(pilot, lambda: runs.keys() == ["unit-tests.r1"])
        assert app.dashboard.stack.view == "runs"
        await pilot.press("enter")
        attempts = app.query_one("#attempts", KeyedTable)
        await until(pilot, lambda: attempts.keys() == ["1", "2"])
        assert str(attempts.get_cell("1", "state")) == "failed (exit 1)"
        assert str(attempts.get_cell("2", "state")) == "completed"
        await pilot.press("h")
        detail = app.query_one("#detail")
        await until(pilot, lambda: detail.line_count >= 5)
        lines = [str(line) for line in detail.lines]
        assert lines[0].startswith("#") and "run.submitted" in lines[0]
        assert any("attempt.failed" in line for line in lines)
        await pilot.press("escape")  # closes the pane
        assert app.dashboard.detail is None
        await pilot.press("escape", "escape")
        assert app.dashboard.stack.view == "goals"
        assert app.selected_goal().goal_id == "unit-tests"


def fits(table: KeyedTable, upto: str) -> bool:
    """The columns up to ``upto`` are on screen without scrolling."""
    width = 0
    for key, column in table.columns.items():
        width += column.get_render_width(table)
        if key.value == upto:
            return width <= table.scrollable_content_region.width
    raise AssertionError(upto)


async def test_80_columns_show_the_walkthroughs_facts(journal_path: Path) -> None:
    """Issue 13.4: at 80×24 the Note, an attempt's State and its Worker were cut or off screen."""
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        goals = goals_table(app)
        assert fits(goals, "note")
        await select(pilot, "old-backfill")
        await until(pilot, lambda: "superseded by backfill-v2" in row_line(app))
        await select(pilot, "migrate-db")
        await pilot.press("enter", "enter")
        attempts = app.query_one("#attempts", KeyedTable)
        await until(pilot, lambda: attempts.keys() == ["1"])
        assert fits(attempts, "memory")  # all nine columns, Worker included
        assert str(attempts.get_cell("1", "worker")) == "w-e5"
        assert str(attempts.get_cell("1", "state")).endswith("…")
        whole = "interrupted (sigterm by dana@n1)"
        await until(pilot, lambda: whole in row_line(app) and "w-e5" in row_line(app))
        await pilot.resize_terminal(120, 30)
        await until(pilot, lambda: str(attempts.get_cell("1", "state")) == whole)


async def test_log_follows_the_attempt(journal_path: Path) -> None:
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=SIZE) as pilot:
        detail = await open_log(pilot)
        await until(pilot, lambda: any("querying warehouse" in str(x) for x in detail.lines))
        log = node_registry(journal_path, NODE).log_path("nightly-report.r1", 1)
        with open(log, "a") as f:
            f.write("still querying\n")
        await until(pilot, lambda: any("still querying" in str(x) for x in detail.lines))
        assert detail.following


def record_process(journal_path: Path, run_id: str, proc: subprocess.Popen[bytes]) -> None:
    record_worker(journal_path, NODE, run_id, proc, worker="w-loop")


def start_loop_goal(journal_path: Path) -> subprocess.Popen:
    """A running goal of this node with a real process group recorded for its attempt."""
    with Journal.open(journal_path) as j:
        goals = Goals(j)
        goals.create(goal_id="loop", title="stuck loop", node_id=NODE, argv=["sleep", "60"])
        goals.start(goal_id="loop", node_id=NODE, worker="w-loop", token="t")
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    record_process(journal_path, "loop.r1", proc)
    return proc


async def test_workers_view_lists_this_nodes_processes(journal_path: Path) -> None:
    proc = start_loop_goal(journal_path)
    app = RefineApp(journal=journal_path, node=NODE)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await loaded(pilot)
            await pilot.press("w")
            workers = app.query_one("#workers", KeyedTable)
            await until(pilot, lambda: workers.keys() == ["loop.r1/1"])
            assert str(workers.get_cell("loop.r1/1", "pid")) == str(proc.pid)
            assert str(workers.get_cell("loop.r1/1", "alive")) == "yes"
            assert str(workers.get_cell("loop.r1/1", "memory")).endswith("M")
            # Actions apply to goals, not here: not shown, and the hint line has none to explain.
            assert app.check_action("stop", ()) is False
            assert str(app.query_one("#why").render()) == ""
            await pilot.press("escape")
            assert app.dashboard.stack.view == "goals"
    finally:
        end(proc)


async def test_filter_queries_the_journal(journal_path: Path) -> None:
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await pilot.press("slash")
        assert isinstance(app.focused, Input)
        await pilot.press(*"running", "enter")
        await until(pilot, lambda: set(goals_table(app).keys()) == {"gpu-train", "nightly-report"})
        assert app.header_state.filter == "running"
        await pilot.press("slash", *["backspace"] * 7, "enter")
        await until(pilot, lambda: len(goals_table(app).keys()) == 8)


async def test_filter_index_follows_commits_and_long_lists_arrive_whole(tmp_path: Path) -> None:
    """Issue 16: the filter searches an in-memory index kept current by the commits it reads;
    a list longer than a screen is shown first screen first, then whole, in order."""
    path = tmp_path / "journal.db"
    with Journal.open(path) as j:
        goals = Goals(j)
        for n in range(150):
            goals.create(goal_id=f"q{n:03d}", title=f"queued {n}", node_id=NODE, argv=["true"])
    app = RefineApp(journal=path, node=NODE)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await until(pilot, lambda: app.live.indexed)  # built after the first paint
        commit_in_process(
            path,
            "goals.create(goal_id='late', title='Zebra crossing', node_id='n9', argv=['true'])\n"
            "goals.cancel(goal_id='q007', reason='obsolete', command_id='op:c:q007')",
        )
        await until(pilot, lambda: "late" in app.goal_rows)
        await pilot.press("slash", *"zebra", "enter")
        await until(pilot, lambda: goals_table(app).keys() == ["late"])
        await pilot.press("slash", "ctrl+u", *"cancelled", "enter")
        await until(pilot, lambda: goals_table(app).keys() == ["q007"])
        await pilot.press("slash", "ctrl+u", *"queued", "enter")
        # Status or title: the late goal is queued, q007 still has "queued" in its title.
        expected = ["late", *(f"q{n:03d}" for n in range(150))]
        await until(pilot, lambda: goals_table(app).keys() == expected)
        assert app.header_state.shown == 151


async def test_a_new_filter_paints_nothing_of_the_old_list(
    journal_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 16: closing the box and focusing the table would repaint the whole old list
    (focus is in every cached render's key) while the new one is read; nothing is painted
    until the new list is in the table, and no garbage collection runs meanwhile."""
    monkeypatch.setattr(refine_tui.app, "HOLD_PAINT_S", 60.0)  # only the new list releases it
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        table = goals_table(app)
        painted: list[list[str]] = []
        render_lines = table.render_lines

        def noting(crop: Any) -> Any:
            painted.append(table.keys())
            return render_lines(crop)

        table.render_lines = noting  # type: ignore[method-assign]
        await pilot.press("slash", *"running")
        painted.clear()
        gc_during: list[bool] = []
        feed_read = app.live.read

        def reading(*args: Any) -> Any:
            gc_during.append(__import__("gc").isenabled())
            return feed_read(*args)

        app.live.read = reading  # type: ignore[method-assign]
        await pilot.press("enter")
        await until(pilot, lambda: set(table.keys()) == {"gpu-train", "nightly-report"})
        await pilot.pause()
        await until(pilot, lambda: bool(painted))
        assert all(set(keys) == {"gpu-train", "nightly-report"} for keys in painted)
        assert gc_during == [False] and __import__("gc").isenabled()
        assert not app.query_one("#filter", Input).display


async def test_a_filter_while_paused_is_painted_after_the_hold(journal_path: Path) -> None:
    """Paused, no read comes: the held paint is released by its timer (box closed, crumbs)."""
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await pilot.press("p")
        await pilot.press("slash", *"running", "enter")
        await until(pilot, lambda: not app.dashboard.paint.held)
        assert not batch_depth(app)
        # The collector comes back after the next refresh (and the filter's index, built after
        # the first paint, holds it off while it builds): it must come back.
        await until(pilot, lambda: __import__("gc").isenabled())
        assert "running" in str(app.query_one("#crumbs", Label).render())
        await pilot.press("p")
        await until(pilot, lambda: set(goals_table(app).keys()) == {"gpu-train", "nightly-report"})


async def test_commits_show_while_the_index_builds_and_the_index_takes_them_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The filter's index is built beside the live reads: a commit made after the build read
    the journal (held there by a gate) is shown at once, and the index takes it in after."""
    path = tmp_path / "journal.db"
    with Journal.open(path) as j:
        goals = Goals(j)
        for n in range(150):
            goals.create(goal_id=f"q{n:03d}", title=f"queued {n}", node_id=NODE, argv=["true"])
    read, release = threading.Event(), threading.Event()
    build = GoalIndex.build

    def gated(journal: Journal) -> tuple[int, GoalIndex]:
        built = build(journal)
        read.set()
        release.wait(30)
        return built

    monkeypatch.setattr(GoalIndex, "build", staticmethod(gated))
    app = RefineApp(journal=path, node=NODE)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await loaded(pilot)
            await until(pilot, read.is_set)
            commit_in_process(
                path,
                "goals.create(goal_id='late', title='Zebra crossing', node_id='n9', argv=['true'])"
                "\ngoals.cancel(goal_id='q007', reason='obsolete', command_id='op:c:q007')",
            )
            await until(pilot, lambda: app.goal_rows["q007"].status == "cancelled")
            await until(pilot, lambda: "late" in app.goal_rows)
            assert not app.live.indexed  # shown before the build finished
            release.set()
            await until(pilot, lambda: app.live.indexed)
            await pilot.press("slash", *"zebra", "enter")
            await until(pilot, lambda: goals_table(app).keys() == ["late"])
            await pilot.press("slash", "ctrl+u", *"cancelled", "enter")
            await until(pilot, lambda: goals_table(app).keys() == ["q007"])
    finally:
        release.set()


class ChunkProbe(RefineApp):
    """The real app; each chunk of a long list notes the table it found, and a step the test
    gives runs inside a chunk (a key press, a newer filter, a commit's update)."""

    CSS_PATH = str(Path(refine_tui.app.__file__).with_name("app.tcss"))  # relative to RefineApp

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.seen: list[tuple[int, int]] = []  # (rows in the table, cursor row) at each chunk
        self.steps: list[Callable[[], None]] = []
        self.dashboard.goals._fill = self._fill  # type: ignore[method-assign]

    def _fill(self, generation: int) -> None:
        table = goals_table(self)
        self.seen.append((len(table.keys()), table.cursor_row))
        if self.steps and generation == self.dashboard.goals.generation:
            self.steps.pop(0)()
        GoalsView._fill(self.dashboard.goals, generation)


async def test_a_long_list_fills_in_chunks_that_let_keys_through_and_keep_order(
    tmp_path: Path,
) -> None:
    """Filter at 100,000 Goals: the ~1,200 rows after the first screen went in at once, keys
    waited 40–400 ms. Now a chunk per turn: a key pressed during one is handled before the
    next; a newer filter cancels the rest; a commit read meanwhile keeps the list's order."""
    path = tmp_path / "journal.db"
    with Journal.open(path, synchronous="NORMAL") as j:
        goals = Goals(j)
        for n in range(900):
            word = "alpha" if n % 2 else "beta"
            goals.create(goal_id=f"g{n:03d}", title=f"{word} {n}", node_id=NODE, argv=["true"])
    app = ChunkProbe(journal=path, node=NODE)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        table = goals_table(app)
        everything = [f"g{n:03d}" for n in range(900)]
        await until(pilot, lambda: table.keys() == everything and not app.dashboard.goals.filling)
        counts = [rows for rows, _ in app.seen]
        assert len(counts) >= 4 and all(b - a <= FILL_CHUNK for a, b in pairwise(counts))
        alphas = everything[1::2]
        await pilot.press("slash", "ctrl+u", *"alpha", "enter")
        await until(pilot, lambda: table.keys() == alphas and not app.dashboard.goals.filling)
        assert table.keys() == list(app.goal_rows)
        # A key pressed during a chunk is handled while the rest of the list is still coming.
        app.seen.clear()
        app.steps = [lambda: app.post_message(events.Key("down", None))]  # as a terminal sends
        await pilot.press("slash", "ctrl+u", "enter")
        await until(pilot, lambda: table.keys() == everything and not app.dashboard.goals.filling)
        before = app.seen[0][1]
        assert before == 1  # the cursor stayed on its Goal: g001, row 1 of the whole list
        assert any(cursor == before + 1 for _, cursor in app.seen[1:]), app.seen
        # A newer filter during a chunk: the older list's other chunks never go in.
        betas = everything[::2]
        app.steps = [lambda: app.dashboard.set_filter("beta")]
        await pilot.press("slash", "ctrl+u", *"gamma", "enter")  # nothing matches
        await pilot.press("slash", "ctrl+u", "enter")  # the whole list: its chunks begin
        await until(pilot, lambda: table.keys() == betas and not app.dashboard.goals.filling)
        assert app.dashboard.goals.filter == "beta" and list(app.goal_rows) == betas
        # A commit read during a chunk: a row not in the table yet stays in its place, changed;
        # a new Goal comes last.
        waiting = everything[-1]
        fresh = replace(app.goal_rows[betas[0]], goal_id="g999", title="late")

        def commit_read() -> None:
            cancelled = replace(app.goal_rows[waiting], status="cancelled")
            update = JournalUpdate(False, {waiting: cancelled, "g999": fresh}, 0, 0, 0)
            app.on_journal_update(update)

        app.steps = [commit_read]
        await pilot.press("slash", "ctrl+u", "enter")
        await until(
            pilot, lambda: table.keys() == [*everything, "g999"] and not app.dashboard.goals.filling
        )
        assert "cancelled" in str(table.get_cell(waiting, "status"))


async def test_clearing_a_filter_restores_the_order(journal_path: Path) -> None:
    """Issue 13.1: rows that matched stayed on top after the filter was cleared."""
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        table = goals_table(app)
        order = table.keys()
        assert order == sorted(order)
        await pilot.press("slash", *"test", "enter")
        await until(pilot, lambda: set(table.keys()) == {"unit-tests"})
        await pilot.press("slash", "ctrl+u", "enter")
        await until(pilot, lambda: len(table.keys()) == 8)
        assert table.keys() == order
        assert [table.coordinate_to_cell_key((i, 0))[0].value for i in range(8)] == order
        # escape in the filter clears it; r puts the rows back in order too
        await pilot.press("slash", *"deploy", "enter")
        await until(pilot, lambda: table.keys() == ["deploy-stage"])
        await pilot.press("slash", "escape")
        await until(pilot, lambda: len(table.keys()) == 8)
        assert app.dashboard.goals.filter == "" and table.keys() == order
        assert not app.query_one("#filter", Input).display
        await pilot.press("r")
        await until(pilot, lambda: "reloaded" in " ".join(notes(app)))
        assert [table.coordinate_to_cell_key((i, 0))[0].value for i in range(8)] == order


async def test_help_and_command_palette(journal_path: Path) -> None:
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        titles = {c.title for c in app.get_system_commands(app.screen)}
        assert {"Stop", "Cancel goal", "Confirm cleanup", "Release", "Filter"} <= titles


# --- live updates ----------------------------------------------------------------------------


async def test_commit_by_another_process_updates_the_row_in_place(journal_path: Path) -> None:
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await select(pilot, "nightly-report")
        table = goals_table(app)
        index = table.cursor_row
        orders: list[list[str]] = []  # every row put in order again: none, the new ones moved
        set_row_order = table.set_row_order

        def counting(keys: Iterable[str]) -> None:
            orders.append(list(keys))
            set_row_order(orders[-1])

        table.set_row_order = counting  # type: ignore[method-assign]
        commit_in_process(
            journal_path,
            "goals.cancel(goal_id='migrate-db', reason='not needed', command_id='op:cancel:t1')\n"
            "goals.create(goal_id='aaa-first', title='sorts first', node_id='n1', argv=['true'])\n"
            "goals.create(goal_id='m-between', title='between', node_id='n1', argv=['true'])",
        )
        await until(pilot, lambda: app.goal_rows["migrate-db"].status == "cancelled")
        await until(pilot, lambda: {"aaa-first", "m-between"} <= set(app.goal_rows))
        assert "not needed" in app.goal_rows["migrate-db"].note
        # The new goals take their places by id (issue 24: appended, they stayed last until a
        # re-read), the cursor stays on the same goal, two rows down (both sort above it).
        assert table.keys()[0] == "aaa-first"
        assert table.keys() == sorted(table.keys()) == list(app.goal_rows)
        assert app.selected_goal().goal_id == "nightly-report"
        assert table.cursor_row == index + 2
        assert orders == []


async def test_pause_holds_the_screen_still(journal_path: Path) -> None:
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await pilot.press("p")
        assert app.header_state.state == "paused"
        commit_in_process(
            journal_path,
            "goals.cancel(goal_id='migrate-db', reason='later', command_id='op:cancel:t2')",
        )
        await pilot.pause(0.4)
        assert app.goal_rows["migrate-db"].status == "held"
        await pilot.press("p")
        await until(pilot, lambda: app.goal_rows["migrate-db"].status == "cancelled")
        assert app.header_state.state == "live"


# --- actions ---------------------------------------------------------------------------------


async def test_cancel_asks_for_a_reason(journal_path: Path) -> None:
    app = RefineApp(journal=journal_path, node=NODE, operator="dana")
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await select(pilot, "migrate-db")
        await pilot.press("c")
        await until(pilot, lambda: isinstance(app.screen, CancelModal))
        assert isinstance(app.focused, Input)
        await pilot.press("enter")  # empty reason: refused in words, modal stays
        error = app.screen.query_one("#dialog-error", Label)
        assert "reason is required" in str(error.render())
        assert isinstance(app.screen, CancelModal)
        await pilot.press(*"no longer wanted", "enter")
        await until(pilot, lambda: app.goal_rows["migrate-db"].status == "cancelled")
        goal = read_goal(journal_path, "migrate-db")
        assert goal.status == "cancelled" and goal.cancel_reason == "no longer wanted"


async def test_cancel_escape_writes_nothing(journal_path: Path) -> None:
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        before = app.header_state.last_sequence
        await select(pilot, "migrate-db")
        await pilot.press("c")
        await until(pilot, lambda: isinstance(app.screen, CancelModal))
        await pilot.press(*"oops", "escape")
        await until(pilot, lambda: not isinstance(app.screen, CancelModal))
        with Journal.open(journal_path, read_only=True) as j:
            assert j.last_sequence() == before


async def test_confirm_cleanup_shows_evidence_and_backs_out_safely(journal_path: Path) -> None:
    app = RefineApp(journal=journal_path, node=NODE, operator="dana")
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await select(pilot, "nightly-report")
        await pilot.press("x")
        await until(pilot, lambda: isinstance(app.screen, ConfirmModal))
        assert isinstance(app.focused, Button) and app.focused.id == "back"  # the safe choice
        body = str(app.screen.query_one("#dialog-body Static").render())
        assert "\\n" not in body  # its lines are lines, not escapes
        assert "no process" in body and "querying warehouse" in body
        assert "attempt 1 by w-f6, started " in body
        assert "confirmed by dana@n1); the goal will be requeued (attempt 2 of 3)" in body
        await pilot.press("n")
        await until(pilot, lambda: not isinstance(app.screen, ConfirmModal))
        assert read_goal(journal_path, "nightly-report").status == "running"
        await pilot.press("x")
        await until(pilot, lambda: isinstance(app.screen, ConfirmModal))
        await pilot.press("y")
        await until(pilot, lambda: app.goal_rows["nightly-report"].status == "queued")
        # One wording in the modal, the notification and the attempt's state (issue 13).
        await until(pilot, lambda: any("confirmed by dana@n1" in n for n in notes(app)))
        assert not any("operator-confirmed by" in n for n in notes(app))
        await pilot.press("enter")
        await until(pilot, lambda: app.query_one("#runs", KeyedTable).keys() != [])
        await pilot.press("enter")
        attempts = app.query_one("#attempts", KeyedTable)
        await until(pilot, lambda: attempts.keys() == ["1"])
        assert str(attempts.get_cell("1", "state")) == "interrupted (confirmed by dana@n1)"


async def test_release_a_held_goal(journal_path: Path) -> None:
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await select(pilot, "migrate-db")
        await pilot.press("R")
        await until(pilot, lambda: isinstance(app.screen, ConfirmModal))
        await pilot.press("y")
        await until(pilot, lambda: app.goal_rows["migrate-db"].status == "queued")


async def test_greyed_actions_say_why(journal_path: Path) -> None:
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await select(pilot, "gpu-train")  # running on another node
        assert app.check_action("stop", ()) is None
        assert app.check_action("cancel_goal", ()) is True
        assert "s: on n2" in str(app.query_one("#why", TextLine).render())
        await pilot.press("s")
        assert any("runs on node n2" in m for m in notes(app))
        assert not isinstance(app.screen, ConfirmModal)
        await select(pilot, "build-docs")
        for action in ("stop", "cancel_goal", "cleanup", "release"):
            assert app.check_action(action, ()) is None
        await pilot.press("c")
        assert any("already completed" in m for m in notes(app))


async def test_refusal_from_the_store_is_a_notification(journal_path: Path) -> None:
    """Stop of an attempt with no process record: the store refuses, the operator reads why."""
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await select(pilot, "nightly-report")  # running, but no process record here
        await pilot.press("s")
        await until(pilot, lambda: any("(" in m and "_" in m for m in notes(app)))
        assert not isinstance(app.screen, ConfirmModal)
        assert read_goal(journal_path, "nightly-report").status == "running"


async def test_stop_a_real_process(journal_path: Path) -> None:
    """A real process group on this node: Stop signals it and requeues the goal."""
    proc = start_loop_goal(journal_path)
    app = RefineApp(journal=journal_path, node=NODE, operator="dana", grace_s=2)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await loaded(pilot)
            await select(pilot, "loop")
            assert not app.goal_rows["loop"].needs_cleanup  # its process proves it
            await pilot.press("s")
            await until(pilot, lambda: isinstance(app.screen, ConfirmModal))
            body = str(app.screen.query_one("#dialog-body Static").render())
            assert f"SIGTERM to process group {proc.pid}" in body
            assert "requeued (attempt 2 of 3)" in body
            await pilot.press("y")
            await until(pilot, lambda: app.goal_rows["loop"].status == "queued", timeout=20)
            proc.wait(timeout=5)  # gone (the stopper may have reaped it already)
            assert any("loop" in m and "SIGTERM" in m.upper() for m in notes(app))
    finally:
        end(proc)


async def test_after_a_stop_attempts_open_on_the_latest_and_keep_the_last_pid(
    journal_path: Path,
) -> None:
    """Issue 13.5: Attempts opened on attempt 1, its PID went blank, its log said "following"."""
    proc = start_loop_goal(journal_path)
    app = RefineApp(journal=journal_path, node=NODE, operator="dana", grace_s=2)
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            await loaded(pilot)
            await select(pilot, "loop")
            await pilot.press("enter", "enter")
            attempts = app.query_one("#attempts", KeyedTable)
            await until(pilot, lambda: str(attempts.get_cell("1", "pid")) == str(proc.pid))
            await pilot.press("s")
            await until(pilot, lambda: isinstance(app.screen, ConfirmModal))
            await pilot.press("y")
            await until(pilot, lambda: app.goal_rows["loop"].status == "queued", timeout=20)
            proc.wait(timeout=5)
            await until(pilot, lambda: str(attempts.get_cell("1", "alive")) == "no")
            node_registry(journal_path, NODE).remove("loop.r1", 1)  # as the node tidies up
            with Journal.open(journal_path) as j:  # the node starts attempt 2
                Goals(j).start(goal_id="loop", node_id=NODE, worker="w-two", token="t2")
            await until(pilot, lambda: attempts.keys() == ["1", "2"])
            await pilot.press("escape", "enter")  # back to Runs, and into Attempts again
            await until(pilot, lambda: attempts.keys() == ["1", "2"])
            await until(pilot, lambda: attempts.selected_key == "2")
            await pilot.pause(OBSERVE_S)  # a liveness round: the last observation stays
            assert str(attempts.get_cell("1", "pid")) == str(proc.pid)
            assert str(attempts.get_cell("1", "alive")) == "no"
            attempts.select("1")
            await until(pilot, lambda: "last observation" in row_line(app))
            await pilot.press("l")
            detail = app.query_one("#detail")
            await until(pilot, lambda: "attempt ended" in str(detail.border_subtitle))
            assert "following" not in str(detail.border_subtitle)
            await pilot.press("tab")
            attempts.select("2")
            await until(pilot, lambda: str(detail.border_subtitle).startswith("following"))
    finally:
        end(proc)


async def test_stop_refuses_when_the_goal_moved_on_while_the_modal_was_open(
    journal_path: Path,
) -> None:
    proc = start_loop_goal(journal_path)
    app = RefineApp(journal=journal_path, node=NODE, operator="dana", grace_s=2)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await loaded(pilot)
            await select(pilot, "loop")
            await pilot.press("s")
            await until(pilot, lambda: isinstance(app.screen, ConfirmModal))
            commit_in_process(  # the worker reports success while the operator hesitates
                journal_path,
                "goals.settle(goal_id='loop', run_id='loop.r1', epoch=1, outcome='completed')",
            )
            await pilot.press("y")
            await until(pilot, lambda: any("changed while the dialog" in m for m in notes(app)))
            assert proc.poll() is None  # nothing was signalled
            assert read_goal(journal_path, "loop").status == "completed"
    finally:
        end(proc)


async def test_corrupt_goal_record_is_shown_not_interpreted(journal_path: Path) -> None:
    with sqlite3.connect(journal_path) as db:  # fixture: break one stored record
        db.execute("UPDATE aggregates SET state = '{\"oops\": 1}' WHERE aggregate_id = 'goal:lint'")
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        assert app.goal_rows["lint"].status == "corrupt"
        assert app.goal_rows["unit-tests"].status == "completed"  # the others still read
        await select(pilot, "lint")
        assert app.check_action("cancel_goal", ()) is None
        assert "corrupt" in app.dashboard.why_not("cancel_goal")


async def test_read_only_greys_every_action_and_writes_nothing(journal_path: Path) -> None:
    before = os.stat(journal_path).st_mtime_ns
    app = RefineApp(journal=journal_path, node=NODE, read_only=True)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await select(pilot, "migrate-db")
        for action in ("stop", "cancel_goal", "cleanup", "release"):
            assert app.check_action(action, ()) is None
        assert "read-only" in str(app.query_one("#why", TextLine).render())
        await pilot.press("R", "c", "x")
        assert not isinstance(app.screen, ConfirmModal | CancelModal)
        assert any("read-only" in m for m in notes(app))
        assert app.check_action("history", ()) is True  # reading still works
    assert os.stat(journal_path).st_mtime_ns == before
    assert read_goal(journal_path, "migrate-db").status == "held"


# --- a broken journal ------------------------------------------------------------------------


async def test_missing_journal_waits_and_recovers(tmp_path: Path) -> None:
    path = tmp_path / "later" / "journal.db"
    app = RefineApp(journal=path, node=NODE)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.header_state.state == "missing")
        assert app.query_one("#trouble").display
        assert f"create it with `refine --journal {path} init`" in app.header_state.detail
        assert app.check_action("cancel_goal", ()) is None
        assert not path.exists()  # the dashboard never creates a journal
        await asyncio.to_thread(populate, path, node=NODE, live=False)
        await loaded(pilot)
        assert not app.query_one("#trouble").display
        assert len(goals_table(app).keys()) == 8


async def test_a_journal_without_goals_says_how_to_add_one(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    Journal.open(path).close()
    app = RefineApp(journal=path, node=NODE)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.header_state.state == "live")
        line = app.query_one("#rowline")
        await until(pilot, lambda: "No goals in this journal yet" in str(line.render()))
        assert "goal add --title" in str(line.render())
        await pilot.press("slash", *"zzz", "enter")
        await until(pilot, lambda: "No goal matches “zzz”" in str(line.render()))


async def test_not_sqlite_is_a_clear_message(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    path.write_text("these are my notes, not a journal\n" * 50)
    app = RefineApp(journal=path, node=NODE)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.header_state.state == "broken")
        assert "not" in app.header_state.detail
        assert "these are my notes" in path.read_text()


async def test_a_url_that_can_never_work_says_so_and_keeps_its_password() -> None:
    """An embedded dashboard on an unparsable URL stayed at 'connecting' with no word."""
    app = RefineApp(journal="postgresql://dana:s3cret@[::1/refine", node=NODE)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.header_state.state == "broken")
        assert "not a usable journal URL" in app.header_state.detail
        assert app.query_one("#trouble").display
        assert "s3cret" not in app.header_state.detail + app.header_state.journal


async def test_deleted_then_restored_journal(journal_path: Path, tmp_path: Path) -> None:
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await select(pilot, "lint")
        aside = tmp_path / "aside.db"
        os.replace(journal_path, aside)
        await until(pilot, lambda: app.header_state.state == "missing")
        assert "missing" in app.header_state.detail
        os.replace(aside, journal_path)
        await until(pilot, lambda: app.header_state.state == "live")
        assert len(goals_table(app).keys()) == 8
        assert app.selected_goal().goal_id == "lint"  # picks up where it was
        # ... keys included: the table had lost the focus while the notice took its place
        assert app.focused is goals_table(app)
        await pilot.press("down")
        assert app.selected_goal().goal_id != "lint"


async def test_locked_journal_is_stale_then_recovers(journal_path: Path) -> None:
    locker = sqlite3.connect(journal_path, isolation_level=None)
    locker.execute("PRAGMA locking_mode=EXCLUSIVE")
    locker.execute("BEGIN EXCLUSIVE")
    app = RefineApp(journal=journal_path, node=NODE)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.header_state.state == "stale", timeout=20)
            assert "locked" in app.header_state.detail
            assert app.check_action("cancel_goal", ()) is None
            locker.execute("COMMIT")
            locker.close()
            await loaded(pilot)  # retried without any file event
    finally:
        locker.close()


async def test_log_stops_following_when_scrolled_up(journal_path: Path) -> None:
    log = node_registry(journal_path, NODE).log_path("nightly-report.r1", 1)
    log.write_text("".join(f"line {n}\n" for n in range(200)))
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=SIZE) as pilot:
        detail = await open_log(pilot)
        await until(pilot, lambda: detail.line_count >= 200)
        # The Log scrolls to its end after the next layout: wait for it, however busy the box.
        await until(pilot, lambda: detail.following)
        detail.scroll_home(animate=False)
        await pilot.pause()
        assert not detail.following and "paused" in str(detail.border_subtitle)
        with open(log, "a") as f:
            f.write("new while reading\n")
        await until(pilot, lambda: "new while reading" in str(detail.lines[-1]))
        assert detail.scroll_y == 0  # nothing moved under the operator
        detail.scroll_end(animate=False)
        await until(pilot, lambda: detail.following)
        with open(log, "a") as f:
            f.write("followed again\n")
        await until(pilot, lambda: "followed again" in str(detail.lines[-1]))
        await until(pilot, lambda: detail.is_vertical_scroll_end)


async def test_log_pane_scrolls_by_keys_and_end_always_resumes(journal_path: Path) -> None:
    """Issue 13.2: after `l` the keys moved the table, and `end` resumed following 2 times in 4."""
    log = node_registry(journal_path, NODE).log_path("nightly-report.r1", 1)
    log.write_text("".join(f"line {n}\n" for n in range(200)))
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=SIZE) as pilot:
        detail = await open_log(pilot)
        assert app.focused is detail
        await until(pilot, lambda: detail.line_count >= 200 and detail.is_vertical_scroll_end)
        for n in range(4):
            await pilot.press("pageup", "up")
            assert goals_table(app).selected_key == "nightly-report"  # the table did not move
            assert not detail.following and "paused" in str(detail.border_subtitle)
            await pilot.press("end")
            with open(log, "a") as f:  # lines arrive right after `end`
                f.write(f"after end {n}\n")
            await until(pilot, lambda n=n: f"after end {n}" in str(detail.lines[-1]))
            await until(pilot, lambda: detail.is_vertical_scroll_end)
            assert detail.following and "following" in str(detail.border_subtitle)
        await pilot.press("tab")
        assert app.focused is goals_table(app)


async def test_an_empty_log_says_no_output_yet(journal_path: Path) -> None:
    node_registry(journal_path, NODE).log_path("nightly-report.r1", 1).write_text("")
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=SIZE) as pilot:
        detail = await open_log(pilot)
        await until(pilot, lambda: any("no output yet" in str(x) for x in detail.lines))
        log = node_registry(journal_path, NODE).log_path("nightly-report.r1", 1)
        log.write_text("first line\n")
        await until(pilot, lambda: [str(x) for x in detail.lines] == ["first line"])


async def test_a_line_still_being_printed_shows_as_it_is_now(journal_path: Path) -> None:
    """A progress bar (carriage returns, no newline until it ends) showed nothing until its
    newline, then every update as a line of its own; a terminal shows its last form."""
    log = node_registry(journal_path, NODE).log_path("nightly-report.r1", 1)
    log.write_text("starting\n\rprogress 1%")
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=SIZE) as pilot:
        detail = await open_log(pilot)
        await until(pilot, lambda: list(detail.lines) == ["starting", "progress 1%"])
        with open(log, "a") as f:
            f.write("\rprogress 2%")
        await until(pilot, lambda: list(detail.lines) == ["starting", "progress 2%"])
        with open(log, "a") as f:
            f.write("\rprogress 100%\r\ndone\nhalf")
        await until(pilot, lambda: list(detail.lines)[1:] == ["progress 100%", "done", "half"])
        with open(log, "a") as f:
            f.write(" and the rest\n")
        await until(pilot, lambda: list(detail.lines)[-1] == "half and the rest")
        assert list(detail.lines) == ["starting", "progress 100%", "done", "half and the rest"]


async def open_log(pilot: Any) -> DetailPane:
    """The log pane of nightly-report's running attempt (n1's), open."""
    await loaded(pilot)
    await select(pilot, "nightly-report")
    await pilot.press("l")
    return pilot.app.query_one("#detail", DetailPane)


def on_screen(app: RefineApp, widget) -> bool:
    region = widget.region
    width, height = app.size
    return region.width > 0 and region.right <= width and region.bottom <= height


def header_lines(app: RefineApp) -> list[str]:
    return str(app.query_one("#header").render()).split("\n")


async def test_a_60x16_terminal_keeps_buttons_keys_and_the_journal_state(tmp_path: Path) -> None:
    """Issue 13.3: modals lost their buttons, the footer lost ? and q, the header wrapped."""
    deep = tmp_path / "srv" / "refine" / "production" / "journals" / "team-a"
    deep.mkdir(parents=True)
    path = populate(deep / "journal.db", node=NODE, live=False)
    app = RefineApp(journal=path, node=NODE)
    async with app.run_test(size=(60, 16)) as pilot:
        await loaded(pilot)

        def footer_shows(*names: str) -> bool:
            keys = {k.description: k for k in app.query("FooterKey")}
            return all(n in keys and on_screen(app, keys[n]) for n in names)

        await until(pilot, lambda: footer_shows("Help", "Quit"))
        top, bottom = header_lines(app)
        assert top.endswith("● live") and "…/journal.db" in top and len(top) <= 58
        assert bottom.startswith("last commit")
        for key, modal in (("c", CancelModal), ("x", ConfirmModal)):
            await select(pilot, "nightly-report")
            await pilot.press(key)
            await until(pilot, lambda modal=modal: isinstance(app.screen, modal))
            await pilot.pause()
            for button in app.screen.query(Button):
                assert on_screen(app, button), (key, button.id, button.region)
            await pilot.press("escape")
            await until(pilot, lambda: len(app.screen_stack) == 1)
        await pilot.resize_terminal(len(str(path)) + 40, 24)  # grown back: the whole path again
        await until(pilot, lambda: str(path) in header_lines(app)[0])
    app = RefineApp(journal=path, node=NODE, read_only=True)
    async with app.run_test(size=(60, 16)) as pilot:
        await loaded(pilot)
        top = header_lines(app)[0]
        assert "read-only" in top and top.endswith("● live") and len(top) <= 58


def frozen(folder: Path, request: pytest.FixtureRequest) -> None:
    """Make ``folder`` unwritable for everyone, root too (``chattr +i``), until the test ends."""
    if subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not available here (needs root on ext4/xfs)")
    request.addfinalizer(lambda: subprocess.run(["chattr", "-i", str(folder)], check=True))


async def test_a_journal_in_a_read_only_folder_is_shown_as_a_snapshot_not_live(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A snapshot never changes: the header said "● live" over a journal nobody can write."""
    deep = tmp_path / "srv" / "refine" / "production" / "journals" / "team-a"
    deep.mkdir(parents=True)
    path = populate(deep / "journal.db", node=NODE, live=False)
    assert not Path(f"{path}-wal").exists()  # the last connection checkpointed it
    frozen(deep, request)
    for read_only in (True, False):  # without --read-only too: nobody can write there
        await shows_a_snapshot(RefineApp(journal=path, node=NODE, read_only=read_only))


async def shows_a_snapshot(app: RefineApp) -> None:
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: bool(app.goal_rows))
        assert app.header_state.state == "snapshot"
        for width, height in ((80, 24), (60, 16)):
            await pilot.resize_terminal(width, height)
            await until(pilot, lambda w=width: len(header_lines(app)[0]) <= w - 2)
            top, bottom = header_lines(app)
            assert top.endswith("read-only · snapshot") and "live" not in top, top
            assert "…/journal.db" in top and bottom.startswith("last commit")
        assert "read-only" in str(app.query_one("#why", TextLine).render())
        await select(pilot, "nightly-report")
        await pilot.press("x")  # refused in words, no modal: nothing could be written
        await pilot.pause()
        assert len(app.screen_stack) == 1
        await pilot.press("p", "p")  # pause and resume: back to the snapshot, not live
        assert app.header_state.state == "snapshot"


async def test_needs_cleanup_appears_when_the_process_dies_without_a_commit(
    journal_path: Path,
) -> None:
    """Processes die silently: the periodic liveness check marks the row, with no commit."""
    proc = start_loop_goal(journal_path)
    app = RefineApp(journal=journal_path, node=NODE)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await loaded(pilot)
            assert not app.goal_rows["loop"].needs_cleanup
            sequence = app.header_state.last_sequence
            end(proc)  # SIGKILL and reap: no journal commit says so
            await until(pilot, lambda: app.goal_rows["loop"].needs_cleanup, timeout=15)
            table = app.query_one("#goals", KeyedTable)
            assert "needs cleanup" in str(table.get_cell("loop", "note"))
            assert app.header_state.last_sequence == sequence
    finally:
        end(proc)


def test_the_dashboard_takes_operator_and_node_where_the_cli_does(
    journal_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REFINE_OPERATOR", "dana")
    monkeypatch.setenv("REFINE_NODE", "n7")
    app = RefineApp(journal=journal_path)
    assert (app.operator, app.node) == ("dana", "n7")
    app = RefineApp(journal=journal_path, node=NODE, operator="lee")
    assert (app.operator, app.node) == ("lee", NODE)
    monkeypatch.delenv("REFINE_OPERATOR")
    monkeypatch.delenv("REFINE_NODE")
    app = RefineApp(journal=journal_path)
    assert (app.operator, app.node) == (default_operator(), default_node())
    assert "." not in app.node  # the short host name, as `refine node` uses


async def test_timers_firing_during_shutdown_touch_no_removed_widget(journal_path: Path) -> None:
    """run_test shuts the app down without exit(): Textual's timers keep firing while the
    widgets are being removed. A tick then hit NoMatches, which run_test re-raised (a flake)."""
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await select(pilot, "nightly-report")
        await pilot.press("l")
        await until(pilot, lambda: app.dashboard.detail == "log")
        pane = app.query_one(DetailPane)
    assert not app.is_running
    app.dashboard.tick()  # the widgets are gone: each periodic callback must see that, do nothing
    pane.follow_log_file()


async def test_header_counts_one_goal_in_the_singular(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    with Journal.open(path) as j:
        Goals(j).create(goal_id="only", title="The only one", node_id=NODE, argv=["true"])
    app = RefineApp(journal=path, node=NODE)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        header = str(app.query_one("#header").render())
        assert "· 1 goal" in header and "1 goals" not in header


async def test_elapsed_tick_repaints_only_visible_rows_whose_text_changed(tmp_path: Path) -> None:
    """Issue 16: a busy journal left open costs a repaint per visible changed elapsed cell only."""
    path = tmp_path / "journal.db"
    with Journal.open(path) as j:
        goals = Goals(j)
        for n in range(60):
            gid = f"run{n:02d}"
            goals.create(goal_id=gid, title=gid, node_id="other", argv=["true"])
            goals.start(goal_id=gid, node_id="other", worker=f"w{n}", token=f"t{n}")
            __import__("time").sleep(0.03)
        started = j.last_commit()[1]
    now = [started + 30.2]
    app = RefineApp(journal=path, node=NODE, clock=lambda: now[0])
    async with app.run_test(size=(100, 24)) as pilot:
        await loaded(pilot)
        table = goals_table(app)
        # The first screen is listed ahead of the rest; scroll once all 60 rows are in and the
        # table has taken their height (header + rows), or `scroll_end` has nowhere to go.
        await until(pilot, lambda: table.row_count == 60 and table.virtual_size.height == 61)
        repainted: list[int] = []
        repaint_cells = table.repaint_cells
        elapsed = [c.key for c in table.spec].index("elapsed")

        def counting(index: int, first: int, last: int) -> None:
            assert (first, last) == (elapsed, elapsed)  # the elapsed cell, not the whole row
            repainted.append(index)
            repaint_cells(index, first, last)

        table.repaint_cells = counting  # type: ignore[method-assign]
        visible = table.visible_keys()
        assert 5 < len(visible) < 60  # the window shows some of the 60 running rows

        def step(seconds: float) -> list[int]:
            repainted.clear()
            now[0] += seconds
            app.dashboard.tick()  # the 1 s timer may have run it first: then this writes nothing
            return sorted(repainted)

        # Each row ticks from its own claim time, which is earlier than the last commit by as
        # long as the 60 starts took (over 0.8 s under load: "32s"): count from this row's.
        claimed = app.goal_rows[visible[0]].started_at
        assert claimed is not None and started - 60 < claimed <= started
        now[0] = claimed + 30.2
        step(0)
        assert step(0) == []  # same text: nothing written
        assert step(1) == sorted(table.get_row_index(k) for k in visible)  # visible rows only
        assert table.get_cell(visible[0], "elapsed").plain == "31s"
        now[0] = claimed + 1805.2  # past ten minutes the text shows minutes
        step(0)
        assert step(1) == [] and step(1) == []  # 30m twice: no repaint
        assert table.get_cell(visible[0], "elapsed").plain == "30m"
        now[0] = claimed + 7205.2  # and past an hour, hours and minutes
        step(0)
        assert step(1) == [] and step(1) == []  # 2h00m twice: no repaint
        assert table.get_cell(visible[0], "elapsed").plain == "2h00m"
        table.scroll_end(animate=False)
        await until(pilot, lambda: table.visible_keys() != visible)
        last = table.visible_keys()[-1]
        # caught up at once
        await until(pilot, lambda: table.get_cell(last, "elapsed").plain == "2h00m")


async def test_a_goal_just_claimed_is_starting_not_needs_cleanup(
    journal_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between a claim's commit and its worker's process record the row is starting: never
    `needs cleanup`. When the launch window ends it is read again: the record proves one, the
    other (no record ever) needs cleanup then, without any commit."""
    from store.ops import reads

    monkeypatch.setattr(reads, "LAUNCH_WINDOW_S", 3.0)  # the same rule, a shorter wait
    with Journal.open(journal_path) as j:
        goals = Goals(j)
        for goal_id in ("fresh", "lost"):
            goals.create(goal_id=goal_id, title=goal_id, node_id=NODE, argv=["sleep", "60"])
            goals.start(goal_id=goal_id, node_id=NODE, worker=f"w-{goal_id}", token="t")
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    app = RefineApp(journal=journal_path, node=NODE)
    marked: set[str] = set()

    def watch() -> bool:
        marked.update(k for k in ("fresh", "lost") if app.goal_rows[k].needs_cleanup)
        return "lost" in marked

    try:
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: {"fresh", "lost"} <= set(app.goal_rows))
            assert app.goal_rows["fresh"].starting and app.goal_rows["lost"].starting
            assert not app.goal_rows["lost"].needs_cleanup
            assert "needs cleanup" not in str(goals_table(app).get_cell("lost", "note"))
            record_process(journal_path, "fresh.r1", proc)  # its worker records itself
            sequence = app.header_state.last_sequence
            await until(pilot, watch, timeout=15)
            assert marked == {"lost"}  # the recorded one never showed the marker
            assert "needs cleanup" in str(goals_table(app).get_cell("lost", "note"))
            await until(pilot, lambda: not app.goal_rows["fresh"].starting)
            assert not app.goal_rows["fresh"].needs_cleanup
            assert app.header_state.last_sequence == sequence  # no commit told it
    finally:
        end(proc)


async def test_the_views_push_what_the_next_read_needs(journal_path: Path) -> None:
    """Structure II: the follower builds the next read from what the open views pushed to it
    (the filter, the Goal the Runs view is about, the Run the Attempts view is about, the
    history the pane shows), not from the App."""
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        wants = app.follower.wants
        await select(pilot, "unit-tests")
        await pilot.press("enter")
        await until(pilot, lambda: app.query_one("#runs", KeyedTable).keys() == ["unit-tests.r1"])
        assert (wants.view, wants.goal_id, wants.goal_node) == ("runs", "unit-tests", "n1")
        await pilot.press("enter", "h")
        await until(pilot, lambda: wants.history_after > 0)
        assert (wants.view, wants.run_id, wants.history_run) == (
            "attempts",
            "unit-tests.r1",
            "unit-tests.r1",
        )
        request = wants.request(full=False)
        assert (request.goal_id, request.run_id, request.history_run) == (
            "unit-tests",
            "unit-tests.r1",
            "unit-tests.r1",
        )
        await pilot.press("escape", "escape", "escape")
        assert (wants.view, wants.goal_id, wants.run_id, wants.history_run) == (
            "goals",
            None,
            None,
            None,
        )
        await pilot.press("slash", *"lint", "enter")
        await until(pilot, lambda: goals_table(app).keys() == ["lint"])
        assert wants.filter == "lint" and app.dashboard.goals.filter == "lint"
