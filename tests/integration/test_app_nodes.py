"""The Nodes view through Pilot (DESIGN §14): presence read in the read thread and refreshed
without a commit, `x` on a silent node confirming its attempts, and another node's presence in
the Attempts view. The demo's journal: gpu-train runs on node n2, the others belong to n1."""

from __future__ import annotations

import itertools
import re
import time
from pathlib import Path

from textual.pilot import Pilot
from textual.widgets import Button

from refine_tui.app import RefineApp
from refine_tui.cells import bar
from refine_tui.screens.confirm import ConfirmModal
from refine_tui.textual_private import notifications
from refine_tui.widgets.keyed_table import KeyedTable
from store.journal.presence import MISSED_BEATS, Beat
from store.journal.sqlite import Journal
from store.model.goals import Goals
from tests.helpers.dashboard import goals_table, loaded, row_line, select
from tests.helpers.goal_states import add
from tests.helpers.waits import until

NODE = "n1"
SIZE = (100, 30)
FAST_S = 0.05  # a heartbeat interval that goes silent at once


def write_beat(path: Path, node_id: str, kind: str = "start", interval_s: float = 3600) -> None:
    with Journal.open(path) as journal:
        beat = Beat(node_id, kind, f"host-{node_id}", 4, "0.1.0", interval_s)  # type: ignore[arg-type]
        journal.write_presence(beat)


def silent(path: Path, node_id: str) -> None:
    """``node_id`` beat once, quickly, and then nothing more: silent."""
    write_beat(path, node_id, interval_s=FAST_S)
    time.sleep(FAST_S * (MISSED_BEATS + 1))


def nodes_table(app: RefineApp) -> KeyedTable:
    return app.query_one("#nodes", KeyedTable)


def cell(app: RefineApp, node_id: str, column: str) -> str:
    return str(nodes_table(app).get_cell(node_id, column))


def notes(app: RefineApp) -> list[str]:
    return [n.message for n in notifications(app)]


async def nodes_view(pilot: Pilot[None], node_id: str) -> None:
    """`n`, then ``node_id`` selected in the Nodes view."""
    await pilot.press("n")
    await until(pilot, lambda: node_id in set(nodes_table(pilot.app).keys()))  # type: ignore[arg-type]
    await select_node(pilot, node_id)


async def select_node(pilot: Pilot[None], node_id: str) -> None:
    nodes_table(pilot.app).select(node_id)  # type: ignore[arg-type]
    await pilot.pause()


async def x_on_node(pilot: Pilot[None], node_id: str) -> None:
    """`x` on ``node_id`` in the Nodes view, its confirmation opened."""
    await nodes_view(pilot, node_id)
    await pilot.press("x")
    await until(pilot, lambda: isinstance(pilot.app.screen, ConfirmModal))


def test_the_bar_reads_without_colour() -> None:
    assert bar(4, 6) == "████░░ 4/6"
    assert bar(0, 4) == "░░░░░░ 0/4"
    assert bar(1, 40) == "█░░░░░ 1/40"  # one running attempt is never drawn as none
    assert bar(9, 6) == "██████ 9/6"
    assert bar(2, None) == "2/?"


async def test_nodes_view_lists_each_node_with_its_presence(journal_path: Path) -> None:
    write_beat(journal_path, NODE)
    silent(journal_path, "n2")
    write_beat(journal_path, "n3", "stop")
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await pilot.press("n")
        await until(pilot, lambda: set(nodes_table(app).keys()) == {"n1", "n2", "n3"})
        assert app.dashboard.stack.view == "nodes"
        assert cell(app, "n1", "state") == "live"
        assert cell(app, "n2", "state") == "silent"
        assert cell(app, "n3", "state") == "stopped"
        assert cell(app, "n2", "running") == "██░░░░ 1/4"  # gpu-train
        assert cell(app, "n2", "host") == "host-n2"
        nodes_table(app).select("n2")
        await pilot.pause()
        assert "silent for" in row_line(app) and "x: confirm cleanup" in row_line(app)
        assert ") · 1 running, capacity 4 · host host-n2 ·" in row_line(app)
        assert re.search(r"silent for \S+ \(last seen \d\d:\d\d:\d\d\)", row_line(app))
        # Its footer: x and m, the Goals' other keys gone (80 columns had no room for m).
        assert [app.check_action(a, ()) for a in ("stop", "log", "cleanup", "reassign")] == [
            False, False, True, True,
        ]  # fmt: skip
        nodes_table(app).select("n1")
        await pilot.pause()
        assert str(app.query_one("#why").render()) == "x: node live"
        await pilot.press("escape")
        assert app.dashboard.stack.view == "goals"


async def test_presence_is_read_again_without_a_commit(journal_path: Path) -> None:
    silent(journal_path, "n2")
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await pilot.press("n")
        await until(pilot, lambda: "n2" in set(nodes_table(app).keys()))
        assert cell(app, "n2", "state") == "silent"
        write_beat(journal_path, "n2", "beat")  # a beat: no event, no sequence, no wake-up
        await until(pilot, lambda: cell(app, "n2", "state") == "live")


async def test_x_on_a_silent_node_confirms_its_attempts_after_one_confirmation(
    journal_path: Path,
) -> None:
    silent(journal_path, "n2")
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await x_on_node(pilot, "n2")
        body = str(app.screen.body)
        assert "Confirm the end of 1 attempt of node n2 (silent since " in body
        assert ": 1 goal will be requeued.\n\nEach attempt is recorded" in body
        await pilot.press("y")
        said = (
            "node n2: 1 attempt: 1 requeued\n1 goal now waits for node n2: m here (Move to"
            " node) moves it"
        )
        await until(pilot, lambda: said in notes(app))
        await until(pilot, lambda: app.goal_rows["gpu-train"].status != "running")
        await until(pilot, lambda: cell(app, "n2", "running") == "░░░░░░ 0/4")
        await until(pilot, lambda: cell(app, "n2", "waiting") == "1")  # gpu-train, requeued
        assert "capacity 4 · 1 goal waits for it · host host-n2" in row_line(app)
        assert row_line(app).endswith(" · m: move them to another node")


async def test_m_in_the_node_confirmation_also_moves_its_goals_to_the_live_nodes(
    journal_path: Path,
) -> None:
    """WALKTHROUGH step 9: "She confirms once; the other machines pick the work up"."""
    write_beat(journal_path, NODE)  # live: where n2's goals can go
    silent(journal_path, "n2")
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=(60, 16)) as pilot:  # the smallest terminal: three buttons
        await loaded(pilot)
        await x_on_node(pilot, "n2")
        body = str(app.screen.body)
        assert body.endswith("m: also move its queued and held goals to node n1.")
        buttons = list(app.screen.query(Button))
        assert [str(b.label) for b in buttons] == ["Back (n)", "Confirm (y)", "Confirm, move (m)"]
        for left, right in itertools.pairwise(buttons):
            assert left.region.right <= right.region.x  # side by side, none cut
        assert buttons[-1].region.right <= 60 and buttons[0].has_focus
        await pilot.press("m")
        said = "node n2: 1 attempt: 1 requeued\nreassign: 1 of 1 goals done (1 reassigned)"
        await until(pilot, lambda: said in notes(app))
        await until(pilot, lambda: app.goal_rows["gpu-train"].node_id == NODE)
        assert app.goal_rows["gpu-train"].status == "queued"


async def test_a_toast_showing_when_a_dialog_opens_waits_until_it_closes(
    journal_path: Path,
) -> None:
    """At 80×24 the toasts sat over the dialog's buttons; they are held, then shown again."""
    write_beat(journal_path, NODE)
    silent(journal_path, "n2")
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        await nodes_view(pilot, NODE)
        await pilot.press("x")  # refused: n1 is live
        await until(pilot, lambda: any("n1 is live" in n for n in notes(app)))
        await select_node(pilot, "n2")
        await pilot.press("x")
        await until(pilot, lambda: isinstance(app.screen, ConfirmModal))
        await pilot.pause()
        assert notes(app) == []  # nothing over the dialog
        await pilot.press("n")
        await until(pilot, lambda: any("n1 is live" in n for n in notes(app)))
        assert app.goal_rows["gpu-train"].status == "running"


async def test_x_on_a_live_node_is_refused_in_words(journal_path: Path) -> None:
    write_beat(journal_path, "n2")
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await nodes_view(pilot, "n2")
        await pilot.press("x")
        await until(pilot, lambda: any("n2 is live" in n for n in notes(app)))
        assert not isinstance(app.screen, ConfirmModal)
        assert app.goal_rows["gpu-train"].status == "running"


async def test_another_nodes_attempt_shows_that_nodes_presence(journal_path: Path) -> None:
    silent(journal_path, "n2")
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await select(pilot, "gpu-train")
        await pilot.press("enter", "enter")
        await until(pilot, lambda: app.dashboard.stack.view == "attempts")
        attempts = app.query_one("#attempts", KeyedTable)
        await until(pilot, lambda: "1" in set(attempts.keys()) and "silent" in row_line(app))
        assert "node n2 silent for" in row_line(app)
        assert str(attempts.get_cell("1", "pid")) == "@n2"
        assert str(attempts.get_cell("1", "alive")) == "silent"


async def test_an_active_goal_of_a_node_that_went_silent_says_so_until_it_beats_again(
    journal_path: Path,
) -> None:
    """The Goals table: another node's active Goal (running there, or waiting for it) says
    `node silent` in its Note (and its row line) while that node beats no more, and nothing
    once it beats again; a Goal of this node, or an ended one, says nothing of it."""
    with Journal.open(journal_path) as journal:
        goals = Goals(journal)
        add(goals, "waits-n2", node="n2")
        add(goals, "ended-n2", node="n2")
        goals.cancel(goal_id="ended-n2", reason="not needed", command_id="c-ended-n2")
    silent(journal_path, "n2")
    write_beat(journal_path, NODE)
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        table = goals_table(app)

        def note(goal_id: str) -> str:
            return str(table.get_cell(goal_id, "note"))

        await until(pilot, lambda: note("gpu-train") == "node silent")
        assert note("waits-n2") == "node silent"
        assert note("ended-n2") == "not needed"
        here = [k for k, r in app.goal_rows.items() if r.node_id == NODE and r.status == "running"]
        assert here and all("node" not in note(k) for k in here)
        await select(pilot, "gpu-train")
        assert "— running (node silent) · node n2 ·" in row_line(app)
        write_beat(journal_path, "n2", "beat")  # no event, no sequence: presence is read again
        await until(pilot, lambda: note("gpu-train") == "" and note("waits-n2") == "")
        assert "— running · node n2 ·" in row_line(app)
        write_beat(journal_path, "n2", "stop")
        await until(pilot, lambda: note("gpu-train") == "node stopped")


async def test_slash_in_the_nodes_view_filters_the_nodes_and_escape_clears_it(
    journal_path: Path,
) -> None:
    """A fleet is a hundred rows: `/silent` in the Nodes view shows the silent nodes only (by
    id, state or host), says how many of how many, and stays in the view; escape clears it,
    then goes back; a filter nothing matches says so. The Goals' filter is untouched."""
    for node_id in ("b1", "b2", "b3"):
        write_beat(journal_path, node_id)
    silent(journal_path, "b7")
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await nodes_view(pilot, "b1")
        everyone = set(nodes_table(app).keys())
        assert {"n1", "n2", "b1", "b2", "b3", "b7"} <= everyone

        await pilot.press("slash", *"silent", "enter")
        await until(pilot, lambda: set(nodes_table(app).keys()) == {"b7"})
        assert app.dashboard.stack.view == "nodes" and app.dashboard.goals.filter == ""
        assert f"Nodes — filter “silent”: 1 of {len(everyone)}   (escape: clear" in crumbs(app)
        assert "node b7 — silent" in row_line(app)
        assert app.focused is nodes_table(app)  # the keys act on the filtered rows at once
        write_beat(journal_path, "b2", interval_s=FAST_S)  # another goes silent: shown with it
        await until(pilot, lambda: set(nodes_table(app).keys()) == {"b7", "b2"}, timeout=15)

        await pilot.press("slash", *"HOST-B3", "enter")  # the host, in any case
        await until(pilot, lambda: set(nodes_table(app).keys()) == {"b3"})
        await pilot.press("slash", "ctrl+u", *"nowhere", "enter")
        await until(pilot, lambda: not nodes_table(app).row_count)
        assert row_line(app) == "No node matches “nowhere” — escape clears the filter"

        await pilot.press("escape")
        await until(pilot, lambda: set(nodes_table(app).keys()) >= everyone)
        assert app.dashboard.stack.view == "nodes" and "filter" not in crumbs(app)
        await pilot.press("escape")
        await until(pilot, lambda: app.dashboard.stack.view == "goals")


def crumbs(app: RefineApp) -> str:
    return str(app.query_one("#crumbs").render())
