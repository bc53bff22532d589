"""`m` moves queued and held goals to another node (the dashboard's `refine reassign`): the
node picked among those the journal knows, then the plan confirmed once. On the selected goal,
on the marked goals, and in the Nodes view on every queued or held goal of a node. Real
journal (the demo's: gpu-train runs on node n2, the rest belong to n1), real app under Pilot."""

from __future__ import annotations

from pathlib import Path

from textual.pilot import Pilot
from textual.widgets import OptionList

from refine_tui.app import RefineApp
from refine_tui.screens.confirm import ConfirmModal
from refine_tui.screens.pick_node import NodePickModal
from refine_tui.textual_private import notifications
from refine_tui.widgets.keyed_table import KeyedTable
from store.journal.presence import Beat
from store.journal.sqlite import Journal
from store.model.goals import Goals
from tests.helpers.dashboard import loaded, select
from tests.helpers.waits import until

NODE = "n1"
SIZE = (100, 30)


def notes(app: RefineApp) -> list[str]:
    return [n.message for n in notifications(app)]


def goal(path: Path, goal_id: str) -> tuple[str, str, int]:
    with Journal.open(path, read_only=True) as journal:
        found = Goals(journal).read(goal_id)
    assert found is not None
    return found.node_id, found.status, found.round


def add_queued(path: Path, *goal_ids: str, node: str = "n3") -> None:
    with Journal.open(path) as journal:
        for goal_id in goal_ids:
            Goals(journal).create(goal_id=goal_id, title=goal_id, argv=["true"], node_id=node)
        journal.write_presence(Beat("n4", "start", "host-n4", 4, "0.1.0", 3600))


async def m_on_node(pilot: Pilot, node_id: str) -> None:
    """`m` on ``node_id`` in the Nodes view."""
    await pilot.press("n")
    nodes = pilot.app.query_one("#nodes", KeyedTable)
    await until(pilot, lambda: node_id in set(nodes.keys()))
    nodes.select(node_id)
    await pilot.pause()
    await pilot.press("m")


async def m_on_marked(pilot: Pilot, *goal_ids: str) -> None:
    """``goal_ids`` marked (space), then `m`: the node picker open."""
    for goal_id in goal_ids:
        await select(pilot, goal_id)
        await pilot.press("space")
    await pilot.press("m")
    await until(pilot, lambda: isinstance(pilot.app.screen, NodePickModal))


def choices(app: RefineApp) -> list[str]:
    options = app.screen.query_one("#node-choices", OptionList)
    return [str(options.get_option_at_index(i).id) for i in range(options.option_count)]


async def test_m_on_a_held_goal_moves_it_held_to_the_node_picked(journal_path: Path) -> None:
    add_queued(journal_path)  # node n4 beats: live, listed first
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await select(pilot, "migrate-db")  # held, on n1
        await pilot.press("m")
        await until(pilot, lambda: isinstance(app.screen, NodePickModal))
        assert choices(app) == ["n4", "n2"]  # the live one first; its own node not offered
        await pilot.press("down", "enter")  # n2
        await until(pilot, lambda: isinstance(app.screen, ConfirmModal))
        body = str(app.screen.query_one("#dialog-body Static").render())
        assert body == "Reassign 1 goal to node n2: 1 held (it stays held until released)"
        await pilot.press("y")
        await until(pilot, lambda: any(n.startswith("reassign: 1 of 1") for n in notes(app)))
        assert goal(journal_path, "migrate-db") == ("n2", "held", 2)
        await until(pilot, lambda: app.goal_rows["migrate-db"].node_id == "n2")


async def test_backing_out_of_the_pick_writes_nothing(journal_path: Path) -> None:
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await select(pilot, "migrate-db")
        await pilot.press("m")
        await until(pilot, lambda: isinstance(app.screen, NodePickModal))
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, NodePickModal))
        assert goal(journal_path, "migrate-db") == ("n1", "held", 1)


async def test_m_on_a_running_goal_is_greyed_and_says_why(journal_path: Path) -> None:
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await select(pilot, "nightly-report")  # running (needs cleanup)
        assert app.check_action("reassign", ()) is None
        await pilot.press("m")
        await until(pilot, lambda: any("only a queued or held goal moves" in n for n in notes(app)))
        assert not isinstance(app.screen, NodePickModal)


async def test_m_on_marked_goals_moves_them_together(journal_path: Path) -> None:
    add_queued(journal_path, "batch-a", "batch-b")
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await m_on_marked(pilot, "batch-a", "batch-b", "nightly-report")
        assert "3 marked goals" in str(app.screen.query_one("#dialog-title").render())
        await pilot.press("enter")  # n4, live
        await until(pilot, lambda: isinstance(app.screen, ConfirmModal))
        body = str(app.screen.query_one("#dialog-body Static").render())
        assert body == "Reassign 3 goals to node n4: 2 queued, 1 refused (GOAL_STATE)"
        await pilot.press("y")
        await until(pilot, lambda: any(n.startswith("reassign: 2 of 3") for n in notes(app)))
        said = next(n for n in notes(app) if n.startswith("reassign: 2 of 3"))
        assert "\nreassign nightly-report: refused: running on node n1" in said
        assert goal(journal_path, "batch-a") == ("n4", "queued", 2)
        assert goal(journal_path, "nightly-report")[0] == "n1"


async def test_m_in_the_nodes_view_moves_that_nodes_queued_and_held_goals(
    journal_path: Path,
) -> None:
    add_queued(journal_path, "batch-a", "batch-b", node="n3")
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await m_on_node(pilot, "n3")
        await until(pilot, lambda: isinstance(app.screen, NodePickModal))
        assert "node n3's queued and held goals" in str(
            app.screen.query_one("#dialog-title").render()
        )
        assert "n3" not in choices(app)
        await pilot.press("enter")  # n4
        await until(pilot, lambda: isinstance(app.screen, ConfirmModal))
        await pilot.press("y")
        await until(pilot, lambda: any(n.startswith("reassign: 2 of 2") for n in notes(app)))
        assert goal(journal_path, "batch-b") == ("n4", "queued", 2)


async def test_m_on_a_node_with_nothing_to_move_says_so_and_asks_nothing(
    journal_path: Path,
) -> None:
    add_queued(journal_path)  # n4 beats, and no goal names it
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await m_on_node(pilot, "n4")
        await until(pilot, lambda: "node n4 has no queued or held goal to move" in notes(app))
        assert not isinstance(app.screen, NodePickModal)


async def test_several_goals_can_be_spread_over_every_live_node(journal_path: Path) -> None:
    add_queued(journal_path, "batch-a", "batch-b", "batch-c")  # n4 beats
    with Journal.open(journal_path) as journal:
        journal.write_presence(Beat("n5", "start", "host-n5", 4, "0.1.0", 3600))
    app = RefineApp(journal=journal_path, node=NODE)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await m_on_marked(pilot, "batch-a", "batch-b", "batch-c")
        assert choices(app) == ["*", "n4", "n5", "n3", "n1", "n2"]  # then the most room
        await pilot.press("enter")  # every live node
        await until(pilot, lambda: isinstance(app.screen, ConfirmModal))
        body = str(app.screen.query_one("#dialog-body Static").render())
        assert body == "Reassign 3 goals to nodes n4, n5: 3 queued"
        await pilot.press("y")
        await until(pilot, lambda: any(n.startswith("reassign: 3 of 3") for n in notes(app)))
        moved = [goal(journal_path, g)[0] for g in ("batch-a", "batch-b", "batch-c")]
        assert moved == ["n4", "n5", "n4"]  # the most room first, ties in the order offered
