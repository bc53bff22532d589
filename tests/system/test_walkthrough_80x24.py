"""WALKTHROUGH facts at 80×24 found by running the story in tmux (issue 13): each one whole."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text
from textual.widgets import Static

from refine_tui.app import RefineApp
from refine_tui.screens.confirm import ConfirmModal
from refine_tui.widgets.keyed_table import KeyedTable
from refine_tui.widgets.text_line import TextLine
from store.host.processes import ProcessRegistry
from store.journal.sqlite import Journal
from store.model.goals import Goals
from tests.helpers.dashboard import (
    commit_in_process,
    end,
    loaded,
    row_line,
    select,
)
from tests.helpers.registry import record_worker
from tests.helpers.waits import until

NODE = "n1"
WORKER = "n1/d1d9ec596d1e4ccaa841c972b3528756"  # as long as the node's worker names


def shown_lines(line: Static) -> int:
    """How many lines the row line's text needs at its width (wrapped as Textual wraps)."""
    width = line.content_region.width
    return len(Text(str(line.render())).wrap(Console(width=width), width))


def running_loop(journal_path: Path, argv: tuple[str, ...]) -> subprocess.Popen[bytes]:
    """Goal "loop" running attempt 1, its worker a real process recorded with ``argv``."""
    with Journal.open(journal_path) as j:
        goals = Goals(j)
        goals.create(goal_id="loop", title="stuck loop", node_id=NODE, argv=["sleep", "60"])
        goals.start(goal_id="loop", node_id=NODE, worker=WORKER, token="t")
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    record_worker(journal_path, NODE, "loop.r1", proc, worker=WORKER, argv=argv)
    return proc


async def test_a_stopped_attempts_row_line_is_whole(journal_path: Path) -> None:
    """After a Stop, the attempt's line (state, long worker name, last observation) took three
    lines at 80 columns and the row line showed two: "(last observation)" was cut."""
    proc = running_loop(journal_path, ("sleep", "60"))
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
            await until(pilot, lambda: "last observation" in row_line(app), timeout=20)
            line = app.query_one("#rowline", TextLine)
            assert "interrupted (sigterm by dana@n1)" in row_line(app)
            await until(pilot, lambda: line.content_region.height >= shown_lines(line))
            assert shown_lines(line) == 3
    finally:
        end(proc)


async def test_a_read_in_flight_when_pause_is_pressed_waits_for_resume(journal_path: Path) -> None:
    """The flaky test_pause_holds_the_screen_still: a read that started before `p` (a watcher
    wake-up) and read a commit made after it was applied while paused. Here the read is
    held at its start until the commit is made, as a busy machine does by chance."""
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=(100, 30)) as pilot:
        await loaded(pilot)
        started, go = threading.Event(), threading.Event()
        read = app.live.read

        def slow_read(*args: Any, **kwargs: Any) -> Any:
            started.set()
            go.wait(30)
            return read(*args, **kwargs)

        app.live.read = slow_read  # type: ignore[method-assign]
        app.wake()
        await until(pilot, started.is_set)
        await pilot.press("p")
        commit_in_process(
            journal_path,
            "goals.cancel(goal_id='migrate-db', reason='later', command_id='op:cancel:t2')",
        )
        go.set()
        await until(pilot, lambda: not app.follower.read_lock.locked())
        await pilot.pause(0.2)
        assert app.goal_rows["migrate-db"].status == "held"
        assert app.header_state.state == "paused"
        await pilot.press("p")
        await until(pilot, lambda: app.goal_rows["migrate-db"].status == "cancelled")
        assert app.header_state.state == "live"


async def test_end_in_the_goals_table_goes_to_the_last_goal_not_sideways(
    journal_path: Path,
) -> None:
    """`end` scrolled the Goals table to its last column (DataTable's binding): at 80 columns
    the Goal and Title columns vanished, with no scrollbar saying why (overflow-x: hidden)."""
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        table = app.query_one("#goals", KeyedTable)
        assert table.max_scroll_x > 0  # round and worker lie off screen at 80 columns
        await pilot.press("end")
        await until(pilot, lambda: table.cursor_row == table.row_count - 1)
        assert table.scroll_x == 0
        assert app.selected_goal().goal_id == table.keys()[-1]
        await pilot.press("home")
        await until(pilot, lambda: table.cursor_row == 0)
        assert table.scroll_x == 0


async def test_cleanup_evidence_shows_a_log_lines_bell_and_backspace(journal_path: Path) -> None:
    """The Confirm cleanup modal's last log lines went through Rich's Text.append, which drops
    BEL, backspace, VT and FF: a line read as if they were not there (the log pane shows
    them as \\x07)."""
    with Journal.open(journal_path) as j:
        log = ProcessRegistry.for_journal(j, NODE).log_path("nightly-report.r1", 1)
    with open(log, "ab") as out:
        out.write(b"beep\x07 back\x08space\n")
    app = RefineApp(journal=journal_path, node=NODE, operator="dana")
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        await select(pilot, "nightly-report")
        await pilot.press("x")
        await until(pilot, lambda: isinstance(app.screen, ConfirmModal))
        body = str(app.screen.query_one("#dialog-body Static", Static).render())
        assert "beep\\x07 back\\x08space" in body


async def test_a_goal_with_a_200_character_title_keeps_its_status_in_the_row_line(
    journal_path: Path,
) -> None:
    """The row line shows three lines at most: a 200-character word as a title filled them
    and its status, node and worker were cut off."""
    with Journal.open(journal_path) as j:
        Goals(j).create(goal_id="longword", title="W" * 200, node_id=NODE, argv=["true"])
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        await select(pilot, "longword")
        line = app.query_one("#rowline", TextLine)
        await until(pilot, lambda: row_line(app).startswith("longword:"))
        assert "— queued · node n1 · round 1 · attempts 0/3" in row_line(app)
        await until(pilot, lambda: line.content_region.height >= shown_lines(line))
        assert shown_lines(line) <= 3


async def test_a_journal_deleted_under_the_dashboard_is_waited_for_not_re_created(
    journal_path: Path, tmp_path: Path
) -> None:
    """A journal deleted by mistake (WALKTHROUGH 7) was met with "create it with `refine
    init`": a new, empty journal in its place, not the one to restore."""
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        os.replace(journal_path, tmp_path / "aside.db")
        await until(pilot, lambda: app.header_state.state == "missing")
        assert "restore the file" in app.header_state.detail
        assert "create it with" not in app.header_state.detail
        os.replace(tmp_path / "aside.db", journal_path)
        await until(pilot, lambda: app.header_state.state == "live")


async def test_another_nodes_attempt_says_where_its_process_is(journal_path: Path) -> None:
    """DESIGN §12: another node's process liveness reads "on node n2", never guessed. Its
    attempt row showed empty PID and Alive cells and a row line that did not say why."""
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        await select(pilot, "gpu-train")  # the demo's goal on node n2, running
        await pilot.press("enter", "enter")
        attempts = app.query_one("#attempts", KeyedTable)
        await until(pilot, lambda: attempts.row_count == 1)
        await until(pilot, lambda: row_line(app).startswith("attempt 1 — running"))
        assert "on node n2: its process is not observed from here" in row_line(app)
        assert str(attempts.get_cell("1", "alive")) == ""  # not guessed


async def test_the_workers_view_shows_the_selected_command_whole(journal_path: Path) -> None:
    """`w` at 80 columns left its Command column four cells ("/roo") and no row line: the
    command a worker runs could not be read at all."""
    argv = ("/root/.pyenv/versions/3.11.7/bin/python", "-m", "store.worker", "--goal", "loop")
    proc = running_loop(journal_path, argv)
    app = RefineApp(journal=journal_path, node=NODE)
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            await loaded(pilot)
            await pilot.press("w")
            workers = app.query_one("#workers", KeyedTable)
            await until(pilot, lambda: workers.keys() == ["loop.r1/1"])
            await until(pilot, lambda: row_line(app).startswith("loop.r1 attempt 1"))
            assert f"pid {proc.pid} alive" in row_line(app)
            assert " ".join(argv) in row_line(app)
    finally:
        end(proc)


async def test_the_log_of_a_goal_without_an_attempt_says_so_on_its_border(
    journal_path: Path,
) -> None:
    """`l` on a goal that never had an attempt: the pane said "No attempt selected" while its
    border said "attempt ended"."""
    from refine_tui.widgets.follow_log import FOLLOWING, NO_ATTEMPT

    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        await select(pilot, "old-backfill")  # cancelled before its first claim
        await pilot.press("l")
        detail = app.query_one("#detail")
        await until(pilot, lambda: any("No attempt selected" in str(x) for x in detail.lines))
        await until(pilot, lambda: detail.border_subtitle == NO_ATTEMPT)
        await select(pilot, "nightly-report")  # its attempt 1 still runs in the journal
        await until(pilot, lambda: detail.border_subtitle == FOLLOWING)
        await select(pilot, "old-backfill")
        await until(pilot, lambda: detail.border_subtitle == NO_ATTEMPT)


async def test_the_cleanup_modal_writes_its_ages_one_way(journal_path: Path) -> None:
    """The Confirm cleanup modal said "last output 3 min ago" (the store's way) above
    "started 2m34s ago" (the dashboard's way)."""
    app = RefineApp(journal=journal_path, node=NODE, operator="dana")
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        await select(pilot, "nightly-report")  # the demo's orphan: its log, no process
        await pilot.press("x")
        await until(pilot, lambda: isinstance(app.screen, ConfirmModal))
        body = str(app.screen.query_one("#dialog-body Static", Static).render())
        assert re.search(r"started \d+s ago; last output \d+s ago", body), body
        assert " s ago" not in body and "min ago" not in body


async def test_cleanup_of_another_nodes_live_worker_names_what_can_be_done_here(
    journal_path: Path,
) -> None:
    """Two nodes on one host: the cleanup modal of n2's live attempt, opened on n1, said
    "stop it first (s)" while `s` was greyed ("s: on n2")."""
    token = "5f0c2a9e4b7d4e1f8a3c6b2d9e0f1a7c"
    with Journal.open(journal_path) as j:
        Goals(j).create(goal_id="n2-job", title="job", node_id="n2", argv=["sleep", "60"])
        Goals(j).start(goal_id="n2-job", node_id="n2", worker=f"n2/{token}", token=token)
    argv = ["-c", "import time; time.sleep(120)", "store.worker", "--journal", str(journal_path)]
    worker = subprocess.Popen(
        [sys.executable, *argv, "--node", "n2", "--token", token], start_new_session=True
    )
    app = RefineApp(journal=journal_path, node=NODE, operator="dana")
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            await loaded(pilot)
            await select(pilot, "n2-job")
            assert app.check_action("stop", ()) is None  # greyed: Stop is n2's
            await pilot.press("x")
            await until(pilot, lambda: isinstance(app.screen, ConfirmModal), timeout=30)
            body = " ".join(str(app.screen.query_one("#dialog-body Static").render()).split())
            assert "That process is still alive: stop it on node n2" in body, body
            assert "refine --node n2 stop n2-job" in body and "cancel the goal (c)" in body
            assert "(s)" not in body
    finally:
        end(worker)
