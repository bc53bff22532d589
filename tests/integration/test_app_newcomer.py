"""What a newcomer tripped on at 80×24 (issue 24, "What the screen shows"): each a Pilot test."""

from __future__ import annotations

import subprocess
from pathlib import Path

import psycopg
import pytest
from textual.widget import Widget

from refine_tui.app import RefineApp
from refine_tui.screens.confirm import ConfirmModal
from refine_tui.screens.help import HelpScreen
from refine_tui.textual_private import render_screen
from refine_tui.widgets.follow_log import FOLLOWING
from refine_tui.widgets.keyed_table import KeyedTable
from store.journal.postgres import PostgresJournal
from store.journal.sqlite import Journal
from store.journal.url import login_role
from store.model.goals import Goals
from tests.helpers.dashboard import commit_in_process, end, goals_table, loaded, row_line, select
from tests.helpers.postgres_server import PostgresServer
from tests.helpers.registry import record_worker
from tests.helpers.waits import until
from tests.integration.test_app_nodes import silent

NODE = "n1"
SIZE = (80, 24)
REFUSAL = (
    "Cleanup of nightly-report.r1 attempt 1 refused: its process is still alive on this node; "
    "stop it first"
)


def toasts(app: RefineApp) -> list[Widget]:
    return list(app.screen.query("Toast"))


def screen_lines(app: RefineApp) -> list[str]:
    """The screen as the terminal gets it, one string a row."""
    return ["".join(s.text for s in strip) for strip in render_screen(app.screen).strips]


async def test_notifications_cover_neither_the_row_line_nor_the_hint_line(
    journal_path: Path,
) -> None:
    """Toasts sat at the bottom right for 7 s, over the row line and the hint line (what the
    selection is, why a key is greyed) — just what a refusal asks the operator to read."""
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await loaded(pilot)
        await select(pilot, "nightly-report")  # a three-line row line
        for n in range(3):
            app.notify(f"{REFUSAL} ({n})", title="Refused", severity="warning")
        await until(pilot, lambda: len(toasts(app)) == 3)
        await pilot.pause(0.2)
        lines = screen_lines(app)
        assert any("▌ Refused" in line for line in lines)  # the toasts are there
        below = lines[app.query_one("#rowline").region.y :]  # the row line, hint line, footer
        assert not any("▌" in line or "refused" in line for line in below), "\n".join(below)
        assert below[0].startswith(" nightly-report: Nightly sales report")
        header_rows = app.query_one("#goals").region.y + 1
        assert not any("▌" in line for line in lines[:header_rows])  # nor the column headers


async def test_a_notification_waits_for_the_dialog_to_close(journal_path: Path) -> None:
    """A toast drew over the cleanup modal's border (and its buttons); said while a dialog is
    open, it is shown when the dialog closes, for its whole time."""
    app = RefineApp(journal=journal_path, node=NODE, operator="dana")
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await loaded(pilot)
        await select(pilot, "nightly-report")
        await pilot.press("x")
        await until(pilot, lambda: isinstance(app.screen, ConfirmModal))
        app.notify(REFUSAL, title="Alert", severity="warning")
        await pilot.pause(0.3)
        assert toasts(app) == []
        await pilot.press("n")
        await until(pilot, lambda: not isinstance(app.screen, ConfirmModal))
        await until(pilot, lambda: len(toasts(app)) == 1)


async def test_nothing_of_the_table_shows_beside_a_dialog_or_the_help(journal_path: Path) -> None:
    """At 80 columns the dialog and the help were 76 wide: the table's first letters and its
    Note's "…" showed through the 2-column margins on either side."""
    app = RefineApp(journal=journal_path, node=NODE, operator="dana")
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await select(pilot, "nightly-report")
        await pilot.press("x")
        await until(pilot, lambda: isinstance(app.screen, ConfirmModal))
        await pilot.pause()
        dialog = app.screen.query_one("#dialog").region
        assert (dialog.x, dialog.width) == (0, SIZE[0])
        await pilot.press("n", "question_mark")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen))
        await pilot.pause()
        help_region = app.screen.query_one("#help").region
        assert (help_region.x, help_region.width) == (0, SIZE[0])


async def test_the_history_pane_marks_cut_lines_and_says_left_and_right(journal_path: Path) -> None:
    """History lines wider than the pane were cut with nothing to say so (no "…", no ←/→ in
    the hint), and the pane's last line had a horizontal scrollbar's lone thumb."""
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await select(pilot, "deploy-stage")  # exhausted: its failures carry long reasons
        await pilot.press("h")
        detail = app.query_one("#detail")

        def failed() -> list[str]:
            return [line for line in screen_lines(app) if "attempt.failed" in line]

        await until(pilot, lambda: len(failed()) >= 2)
        assert all(line.rstrip(" │").endswith("…") for line in failed()), failed()
        assert "←→" in str(detail.border_subtitle)
        region = detail.region
        last = screen_lines(app)[region.bottom - 2][region.x + 1 : region.right - 1]
        assert not set(last) & set("▁▂▃▄▅▆▇█▌▐▔"), last  # no scrollbar on the last line
        await pilot.press("right", "right", "right")
        await until(pilot, lambda: all(line.startswith("│…") for line in failed()))


async def test_the_log_of_another_nodes_attempt_says_where_it_is(journal_path: Path) -> None:
    """`l` on n2's running attempt: the pane said the log is on that machine while its border
    said "following" (nothing here follows it)."""
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await select(pilot, "gpu-train")  # running on node n2
        await pilot.press("l")
        detail = app.query_one("#detail")
        await until(pilot, lambda: any("on node n2" in str(x) for x in detail.lines))
        await until(pilot, lambda: detail.border_subtitle == "on node n2")
        await select(pilot, "nightly-report")  # this node's: its log is here
        await until(pilot, lambda: detail.border_subtitle == FOLLOWING)


async def attempt_of(pilot, goal_id: str) -> KeyedTable:
    await select(pilot, goal_id)
    await pilot.press("enter", "enter")
    attempts = pilot.app.query_one("#attempts", KeyedTable)
    await until(pilot, lambda: attempts.keys() == ["1"] and row_line(pilot.app).startswith("att"))
    return attempts


async def test_an_orphaned_attempt_needs_cleanup_in_the_attempts_view_too(
    journal_path: Path,
) -> None:
    """The Goals table marks nightly-report `needs cleanup` (its worker died without a process
    record); its Attempts view said only `running`, with blank PID and Alive."""
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        attempts = await attempt_of(pilot, "nightly-report")
        await until(pilot, lambda: str(attempts.get_cell("1", "state")) == "needs cleanup")
        assert "running (needs cleanup" in row_line(app)


async def test_an_attempt_of_a_silent_node_needs_cleanup_in_the_attempts_view(
    journal_path: Path,
) -> None:
    silent(journal_path, "n2")
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        attempts = await attempt_of(pilot, "gpu-train")
        await until(pilot, lambda: str(attempts.get_cell("1", "alive")) == "silent")
        assert str(attempts.get_cell("1", "state")) == "needs cleanup"


def running_loop(journal_path: Path, argv: tuple[str, ...]) -> subprocess.Popen[bytes]:
    """Goal "loop" running attempt 1, its worker a real process recorded with ``argv``."""
    worker = "n1/d1d9ec596d1e4ccaa841c972b3528756"
    with Journal.open(journal_path) as j:
        goals = Goals(j)
        goals.create(goal_id="loop", title="stuck loop", node_id=NODE, argv=["sleep", "60"])
        goals.start(goal_id="loop", node_id=NODE, worker=worker, token="t")
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    record_worker(journal_path, NODE, "loop.r1", proc, worker=worker, argv=argv)
    return proc


async def test_the_workers_command_column_shows_the_command_at_80_columns(
    journal_path: Path,
) -> None:
    """The Command column came last and had four cells at 80 columns: "/roo", the first folder
    of the interpreter's path. It shows the command's file name and its arguments."""
    argv = ("/root/.pyenv/versions/3.11.7/bin/python", "-m", "store.worker", "--goal", "loop")
    proc = running_loop(journal_path, argv)
    app = RefineApp(journal=journal_path, node=NODE)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await loaded(pilot)
            await pilot.press("w")
            workers = app.query_one("#workers", KeyedTable)
            await until(pilot, lambda: workers.keys() == ["loop.r1/1"])
            await pilot.pause()
            row = next(line for line in screen_lines(app) if line.startswith(" loop.r1 "))
            assert "python -m store.worker -…" in row, row  # cut, and says so
            assert " ".join(argv) in row_line(app)  # and whole in the row line
            await pilot.resize_terminal(130, 30)
            await until(pilot, lambda: "Started" in "".join(screen_lines(app)))
            row = next(line for line in screen_lines(app) if line.startswith(" loop.r1 "))
            assert "python -m store.worker --goal loop" in row, row
    finally:
        end(proc)


async def test_a_goal_added_while_the_dashboard_is_open_takes_its_sorted_place(
    journal_path: Path,
) -> None:
    """Goals added from the CLI were appended at the end of the table ("aaa-first" under
    "unit-tests") until a filter or a reload sorted the list again."""
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        table = goals_table(app)
        await select(pilot, "migrate-db")
        for goal_id in ("aaa-first", "lint-2"):
            commit_in_process(
                journal_path,
                f"goals.create(goal_id={goal_id!r}, title='new', node_id='n9', argv=['true'])",
            )
        await until(pilot, lambda: {"aaa-first", "lint-2"} <= set(table.keys()))
        assert table.keys() == sorted(table.keys())
        assert list(app.goal_rows) == table.keys()
        assert app.selected_goal().goal_id == "migrate-db"  # the cursor stays on its goal


async def test_goals_whose_ids_grow_are_appended_without_putting_the_list_in_order(
    journal_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """New Goals that sort after every listed one are in their place as appended: the list is
    not sorted again nor the table's order checked against it (O(n) each); one that sorts
    between still takes its place, moved there alone (the table is not put in order again)."""
    orders: list[int] = []  # the table asked to check its order against the whole list
    moves: list[tuple[str, int]] = []  # a row moved into its place
    order, move = KeyedTable.order, KeyedTable.move

    def counting(table: KeyedTable, keys: list[str]) -> None:
        orders.append(len(keys))
        order(table, keys)

    def counting_moves(table: KeyedTable, key: str, index: int) -> None:
        moves.append((key, index))
        move(table, key, index)

    monkeypatch.setattr(KeyedTable, "order", counting)
    monkeypatch.setattr(KeyedTable, "move", counting_moves)
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        table = goals_table(app)
        orders.clear()
        for goal_id in ("zz-1", "zz-2", "zz-3"):
            commit_in_process(
                journal_path,
                f"goals.create(goal_id={goal_id!r}, title='new', node_id='n9', argv=['true'])",
            )
            await until(pilot, lambda goal_id=goal_id: {goal_id} <= set(table.keys()))
        assert orders == []
        assert table.keys() == sorted(table.keys()) == list(app.goal_rows)
        commit_in_process(
            journal_path, "goals.create(goal_id='lint-2', title='new', node_id='n9', argv=['true'])"
        )
        await until(pilot, lambda: {"lint-2"} <= set(table.keys()))
        assert orders == [] and moves == [("lint-2", table.keys().index("lint-2"))]
        assert table.keys() == sorted(table.keys()) == list(app.goal_rows)


async def test_the_read_only_header_says_which_role_reads_before_the_url_is_cut(
    postgres_server: PostgresServer, postgres_url: str
) -> None:
    """At 80 columns the header cut the URL in its middle, its user name first: "read-only"
    did not say as whom (a viewer role that may not write, or the owner)."""
    with PostgresJournal.connect(postgres_url) as j:
        Goals(j).create(goal_id="g1", title="one", node_id=NODE, argv=["true"])
    dbname = postgres_url.rsplit("/", 1)[1]
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("DROP ROLE IF EXISTS refine_viewer")
        conn.execute("CREATE ROLE refine_viewer LOGIN PASSWORD 'view-pw-77'")
        conn.execute(f'GRANT CONNECT ON DATABASE "{dbname}" TO refine_viewer')
        conn.execute("GRANT USAGE ON SCHEMA refine TO refine_viewer")
        conn.execute("GRANT SELECT ON ALL TABLES IN SCHEMA refine TO refine_viewer")
    viewer = postgres_server.url(dbname, user="refine_viewer", password="view-pw-77")
    try:
        app = RefineApp(journal=viewer, node=NODE, read_only=True)
        async with app.run_test(size=SIZE) as pilot:
            await loaded(pilot)
            await pilot.pause()
            lines = screen_lines(app)
            assert "read-only as refine_viewer  ● live" in lines[0], lines[0]
            assert "…" in lines[0]  # the URL was cut, the role was not
            assert not any("view-pw-77" in line for line in lines)
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute("DROP OWNED BY refine_viewer")
            conn.execute("DROP ROLE refine_viewer")


def test_the_reading_role_is_libpqs_user(monkeypatch: pytest.MonkeyPatch) -> None:
    """The URL's user, its ?user=, else $PGUSER: never the password; none for a file."""
    monkeypatch.setenv("PGUSER", "from_env")
    assert login_role("postgresql://viewer:pw@db/refine") == "viewer"
    assert login_role("postgresql://db/refine?user=viewer%5F2&password=pw") == "viewer_2"
    assert login_role("postgresql://:pw@db/refine") == "from_env"
    assert login_role("/srv/refine/journal.db") is None
