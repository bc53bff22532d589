"""Text from the journal, a log or a process is data (DESIGN §10): a hostile corpus of Rich markup,
terminal escapes, bidi controls, NUL, wide and very long strings goes through every dashboard
screen (Pilot), a real `refine tui` under tmux, and the CLI's tables: nothing crashes, nothing is
interpreted, control characters are shown as escapes, and ``--json`` stays exact.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.cells import cell_len
from rich.text import Text

from refine_tui.app import RefineApp
from refine_tui.cli import main
from refine_tui.screens.confirm import CancelModal, ConfirmModal
from refine_tui.textual_private import notifications
from refine_tui.visible import cells, visible
from refine_tui.widgets.keyed_table import KeyedTable
from store.host.processes import ProcessRecord, ProcessRegistry
from store.journal.sqlite import Journal
from store.model.goals import Goals
from tests.helpers.cli import dump, refine
from tests.helpers.registry import node_registry
from tests.helpers.tmux import session_alive, tmux, wait_for_screen
from tests.helpers.waits import until

NODE = "n1"
MARKUP = "[b]x[/b] [/] [@click=app.quit]q[/] [red on blue]r"
# Titles refuse control characters (check_title); bidi, wide and markup text is a valid title.
TITLE = MARKUP + " \u202eevil 日本語🎉"
ESCAPES = "\x1b]0;pwned\x07\x1b[2J\x1b[31m"
REASON = ESCAPES + MARKUP + " \u202e\x00nul " + "長" * 40
ARGV = ("sh", "-c", "echo " + MARKUP, ESCAPES + "\u202e" + "z" * 300)
LOG = f"{ESCAPES}{MARKUP} \u202eevil \x00nul 日本語🎉 " + "long " * 200 + "\n"


def corpus_journal(tmp_path: Path) -> Path:
    """Goals whose every text field is hostile: queued, cancelled, failed, running (live + dead)."""
    path = tmp_path / "journal.db"
    with Journal.open(path) as journal:
        goals = Goals(journal)

        def add(goal_id: str, title: str = TITLE, **kw: object) -> None:
            goals.create(goal_id=goal_id, title=title, node_id=NODE, argv=ARGV, **kw)  # type: ignore[arg-type]

        add("hostile", max_attempts=3)
        add("long", title="[b]" + "w" * 190 + "[/]")
        add("cancelled")
        goals.cancel(goal_id="cancelled", reason=REASON, command_id="op:cancel:t")
        add("failed", max_attempts=1)
        started = goals.start(goal_id="failed", node_id=NODE, worker="w-1", token="t1")
        goals.settle(
            goal_id="failed",
            run_id="failed.r1",
            epoch=started.attempt.epoch,
            outcome="failed",
            reason=REASON,
            evidence=["log:x"],
        )
        add("orphan")
        goals.start(goal_id="orphan", node_id=NODE, worker="w-2", token="t2")
        add("live")
        goals.start(goal_id="live", node_id=NODE, worker="w-3", token="t3")
    registry = node_registry(path, NODE)
    dead = subprocess.Popen(["true"])
    dead.wait()
    record(registry, "orphan.r1", dead.pid, create_time=1.0, worker="w-2")
    for run_id in ("orphan.r1", "live.r1"):
        log = registry.log_path(run_id, 1)
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(LOG * 3)
    return path


def record(registry: ProcessRegistry, run_id: str, pid: int, create_time: float, worker: str):
    registry.record(
        ProcessRecord(
            node_id=NODE,
            pid=pid,
            create_time=create_time,
            pgid=pid,
            run_id=run_id,
            epoch=1,
            worker=worker,
            argv=ARGV,
            log_path=str(registry.log_path(run_id, 1)),
            started_at=time.time(),
        )
    )


@pytest.fixture
def hostile(tmp_path: Path):
    """The corpus journal, with a real live process for the `live` goal's attempt."""
    path = corpus_journal(tmp_path)
    proc = subprocess.Popen(["sleep", "120"], start_new_session=True)
    create = psutil.Process(proc.pid).create_time()
    record(node_registry(path, NODE), "live.r1", proc.pid, create_time=create, worker="w-3")
    yield path
    proc.kill()
    proc.wait()


def plain(value: object) -> str:
    return value.plain if isinstance(value, Text) else str(value)


def assert_literal(cell: object, expected_start: str) -> None:
    """The cell is literal Text: the markup's characters are there and styled by nothing."""
    assert isinstance(cell, Text), cell
    assert cell.plain.startswith(expected_start), cell.plain
    assert not any("@click" in str(span.style) for span in cell.spans)
    assert "\x1b" not in cell.plain and "\u202e" not in cell.plain


def screen_text(app: RefineApp) -> str:
    """What the terminal shows, as text (the SVG screenshot's characters)."""
    svg = app.export_screenshot()
    return svg.replace("&#160;", " ").replace("&amp;", "&").replace("&lt;", "<")


async def test_every_screen_shows_hostile_text_literally(hostile: Path) -> None:
    app = RefineApp(journal=hostile, node=NODE, operator="dana")
    async with app.run_test(size=(120, 36)) as pilot:
        await until(pilot, lambda: len(app.goal_rows) == 6)
        goals = app.query_one("#goals", KeyedTable)
        await pilot.pause()
        assert_literal(goals.get_cell("hostile", "title"), "[b]x[/b]")
        assert_literal(goals.get_cell("long", "title"), "[b]www")
        assert plain(goals.get_cell("long", "title")).endswith("…")
        note = goals.get_cell("cancelled", "note")
        assert_literal(note, "\\x1b]0;pwned\\x07\\x1b[2J")
        assert "[b]x[/b]" in screen_text(app)

        # Runs, Attempts (state with the reason), history and log of the failed goal.
        goals.select("failed")
        await pilot.press("enter")
        runs = app.query_one("#runs", KeyedTable)
        await until(pilot, lambda: runs.keys() == ["failed.r1"])
        await pilot.press("h")
        detail = app.query_one("#detail")
        await until(pilot, lambda: any("pwned" in str(line) for line in detail.lines))
        assert any("\\x1b]0;pwned\\x07" in str(line) for line in detail.lines)
        assert not any("\x1b" in str(line) or "\u202e" in str(line) for line in detail.lines)
        await pilot.press("h", "enter")
        attempts = app.query_one("#attempts", KeyedTable)
        await until(pilot, lambda: attempts.keys() == ["1"])
        assert_literal(attempts.get_cell("1", "state"), "failed (\\x1b]0;pwned")
        await pilot.press("escape", "escape", "escape")
        await until(pilot, lambda: app.dashboard.stack.view == "goals")

        # The log of an attempt whose lines are hostile, and the cleanup modal's evidence.
        goals.select("orphan")
        await until(pilot, lambda: app.goal_rows["orphan"].needs_cleanup)
        await pilot.press("l")
        await until(pilot, lambda: any("pwned" in str(line) for line in detail.lines))
        line = str(detail.lines[0])
        assert line.startswith("\\x1b]0;pwned\\x07\\x1b[2J\\x1b[31m[b]x[/b] [/]")
        assert "\\u202eevil \\x00nul 日本語🎉" in line
        await pilot.press("l")
        await pilot.press("x")
        await until(pilot, lambda: isinstance(app.screen, ConfirmModal))
        body = app.screen.query_one("#dialog-body Static").render()
        assert "command: sh -c echo [b]x[/b] [/] [@click=app.quit]q[/]" in str(body)
        assert "\\x1b]0;pwned" in str(body) and "\x1b" not in str(body)
        await pilot.press("n")
        await until(pilot, lambda: not isinstance(app.screen, ConfirmModal))

        # Stop (a live process whose argv is hostile) and the Workers view.
        goals.select("live")
        await pilot.pause()
        await pilot.press("s")
        await until(pilot, lambda: isinstance(app.screen, ConfirmModal))
        await pilot.press("n")
        await until(pilot, lambda: not isinstance(app.screen, ConfirmModal))
        await pilot.press("w")
        workers = app.query_one("#workers", KeyedTable)
        await until(pilot, lambda: len(workers.keys()) == 2)
        assert_literal(workers.get_cell("live.r1/1", "argv"), "sh -c echo [b]x[/b] [/]")
        assert len(plain(workers.get_cell("live.r1/1", "argv"))) <= 200
        await pilot.press("escape")

        # Cancel with a hostile reason typed by the operator: modal, notification, table.
        goals.select("hostile")
        await pilot.pause()
        await pilot.press("c")
        await until(pilot, lambda: isinstance(app.screen, CancelModal))
        await pilot.press(*"[/] [b]no[/b] [@click=app.quit]q[/]", "enter")
        await until(pilot, lambda: app.goal_rows["hostile"].status == "cancelled")
        assert any("[/]" in n.message or "cancel" in n.message for n in notifications(app))
        assert all(not n.markup for n in notifications(app))
        assert_literal(goals.get_cell("hostile", "note"), "[/] [b]no[/b]")

        # A notification embedding markup, and a filter typed with markup.
        app.notify("[/] [@click=app.quit]q[/] " + ESCAPES, title="[b]t[/b]")
        await pilot.press("slash", *"[/]", "enter")
        await pilot.pause(0.2)
        await until(pilot, lambda: "filter" in str(app.query_one("#crumbs").render()))
        assert "[/]" in str(app.query_one("#crumbs").render())
        assert app.is_running


# --- a real `refine tui` in a terminal -------------------------------------------------------


@pytest.mark.skipif(shutil.which("tmux") is None and not os.environ.get("CI"), reason="no tmux")
def test_refine_tui_in_tmux_shows_hostile_text_and_keeps_running(hostile: Path) -> None:
    session = f"hostile{os.getpid()}"
    env = f"PYTHONPATH={os.environ.get('PYTHONPATH', os.getcwd())} REFINE_OPERATOR=dana"
    command = f"{env} {sys.executable} -m refine_tui.cli --journal {hostile} --node {NODE} tui"
    tmux("new-session", "-d", "-s", session, "-x", "130", "-y", "36", command)
    try:
        tmux("resize-window", "-t", session, "-x", "130", "-y", "36")
        screen = wait_for_screen(session, "hostile")
        assert "[b]x[/b] [/]" in screen  # the title, literally
        assert "\\x1b]0;pwned" in screen  # the cancel reason's escapes, visible
        tmux("send-keys", "-t", session, "/")
        wait_for_screen(session, "filter goals:")
        tmux("send-keys", "-t", session, "-l", "orphan")
        tmux("send-keys", "-t", session, "Enter")
        wait_for_screen(session, "filter “orphan”")
        tmux("send-keys", "-t", session, "l")  # the log of a hostile attempt
        screen = wait_for_screen(session, "\\x1b[2J")
        assert "pwned" in screen and "[@click=app.quit]q[/]" in screen
        title = tmux("display-message", "-p", "-t", session, "#{pane_title}")
        assert "pwned" not in title  # no OSC reached the terminal
        tmux("send-keys", "-t", session, "l", "Escape")
        time.sleep(0.5)
        alive = tmux("list-panes", "-t", session, "-F", "#{pane_dead} #{pane_current_command}")
        assert alive.split()[0] == "0"
        tmux("send-keys", "-t", session, "q")
        deadline = time.monotonic() + 15
        while session_alive(session):
            assert time.monotonic() < deadline, "the dashboard did not quit on q"
            time.sleep(0.1)
    finally:
        if session_alive(session):
            subprocess.run(["tmux", "kill-session", "-t", session], check=False)


# --- the CLI's human output and --json ---------------------------------------------------------

RAW = ("\x1b", "\x07", "\x00", "\u202e")


def cli(capsys: pytest.CaptureFixture[str], journal: Path, *args: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["--journal", str(journal), "--node", NODE, *args])
    out, err = capsys.readouterr()
    assert not any(c in err for c in RAW)
    return code, out


def test_cli_tables_and_show_make_control_characters_visible(tmp_path: Path, capsys) -> None:
    path = corpus_journal(tmp_path)
    for args in (
        ["goals"],
        ["runs"],
        ["show", "cancelled"],
        ["show", "failed"],
    ):
        code, out = cli(capsys, path, *args)
        assert code == 0, args
        assert not any(c in out for c in RAW), (args, out)
        assert "\\x1b]0;pwned" in out, args
    _, out = cli(capsys, path, "show", "cancelled")
    assert "cancel reason: \\x1b]0;pwned\\x07\\x1b[2J\\x1b[31m[b]x[/b]" in out
    assert "\\u202e\\x00nul" in out
    _, out = cli(capsys, path, "show", "failed")
    assert "failed  \\x1b]0;pwned" in out
    # --json stays exact: the same bytes that were stored.
    _, out = cli(capsys, path, "goals", "--json")
    stored = {g["goal_id"]: g for g in json.loads(out)}
    assert stored["cancelled"]["cancel_reason"] == REASON
    assert stored["hostile"]["title"] == TITLE
    _, out = cli(capsys, path, "show", "failed", "--json")
    assert json.loads(out)["runs"][0]["attempts"][0]["reason"] == REASON


@given(st.text())
def test_cli_widths_are_richs_widths_without_importing_rich_for_ascii(text: str) -> None:
    shown = visible(text)
    assert cells(shown) == cell_len(shown)


def test_cli_table_columns_line_up_by_display_width(tmp_path: Path, capsys) -> None:
    path = tmp_path / "journal.db"
    main(["--journal", str(path), "init"])
    titles = {
        "cjk": "日本語のタイトル",
        "emoji": "deploy 🎉🚀 now",
        "plain": "plain",
        "long": "A very long title that goes on and on past thirty",
        "wide": "長" * 40,
    }
    for goal_id, title in titles.items():
        cli(capsys, path, "goal", "add", "--title", title, "--id", goal_id, "--", "true")
    _, out = cli(capsys, path, "goals")
    header, *rows = out.splitlines()
    node_at = cell_len(header[: header.index("NODE")])
    status_at = cell_len(header[: header.index("STATUS")])
    assert len(rows) == 5
    for row in rows:
        assert cell_len(row[: row.index(" n1 ") + 1]) == node_at, row
        assert cell_len(row[: row.index("queued")]) == status_at, row
    long_row = next(r for r in rows if r.startswith("long"))
    assert "A very long title that goes o…  n1" in long_row
    wide_row = next(r for r in rows if r.startswith("wide"))
    assert "長" * 14 + "…" in wide_row and "長" * 15 not in wide_row


def test_recipe_refusals_say_what_is_wrong(tmp_path: Path, capsys) -> None:
    """An undecodable byte (surrogate-escaped by Python) or an over-long cwd is refused in words
    that name it, not as a NUL the text does not contain."""
    journal = tmp_path / "j.db"
    assert refine(capsys, journal, "init")[0] == 0
    before = dump(journal)
    for extra, words in (
        (("--", "echo", "caf\udce9"), "undecodable bytes"),
        (("--cwd", "/tmp/\udcff", "--", "true"), "undecodable bytes"),
        (("--cwd", "/" + "a" * 5000, "--", "true"), "1–4096 characters"),
    ):
        code, _, err = refine(capsys, journal, "goal", "add", "--title", "T", *extra)
        assert code == 2 and err.startswith("refine: INVALID_INPUT: ") and words in err, err
    assert dump(journal) == before


def test_a_corrupt_records_id_reaches_stderr_made_visible(tmp_path: Path, capsys) -> None:
    """The note naming corrupt goals is journal text too: its escapes are shown, not obeyed."""
    journal = tmp_path / "j.db"
    assert refine(capsys, journal, "init")[0] == 0
    with sqlite3.connect(journal) as db:
        db.execute(
            "INSERT INTO aggregates (aggregate_id, kind, version, status, node_id,"
            " last_sequence, state) VALUES (?, 'goal', 1, 'queued', 'n1', 0, '{}')",
            ("goal:\x1b[2Jevil\x07",),
        )
    for command in ("goals", "runs"):
        code, out, err = refine(capsys, journal, command)
        assert code == 0 and "\\x1b[2Jevil\\x07" in err
        assert not any(c in out + err for c in "\x1b\x07"), (out, err)
