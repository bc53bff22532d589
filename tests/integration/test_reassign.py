"""Moving queued and held goals to another node (`refine reassign`): after a machine is gone
and its node's attempts confirmed, its goals wait for that node until they are moved. The
batch of DESIGN §15 (a plan read once, one command per goal at the version read, `--dry-run`,
`--json`), on both backends; refusals with their exit codes, nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from store.errors import InvalidInputError, NodeNotFoundError
from store.journal.api import Journal
from store.journal.presence import Beat
from store.model.goals import Goals
from store.ops.bulk import PlannedGoal, Selection, plan_bulk, run_bulk
from store.ops.check import check_journal
from tests.helpers import goal_states
from tests.helpers.cli import dump, refine


def add(goals: Goals, goal_id: str, node: str = "b3", **kw: object) -> None:
    goal_states.add(goals, goal_id, node=node, **kw)


def start(goals: Goals, goal_id: str, node: str = "b3") -> None:
    goal_states.start(goals, goal_id, node=node)


def fleet(journal: Journal) -> Goals:
    """Node b3's goals in every case, and node b1 known by its beat."""
    goals = Goals(journal)
    add(goals, "waiting")
    goal_states.held(goals, "careful", node="b3")
    add(goals, "busy")
    start(goals, "busy")
    add(goals, "done")
    goals.cancel(goal_id="done", reason="not wanted", command_id="test:done")
    add(goals, "there", node="b1")
    journal.write_presence(Beat("b1", "start", "host-b1", 4, "0.1.0", 3600))
    return goals


def test_queued_and_held_goals_move_each_by_its_own_command(journal: Journal) -> None:
    goals = fleet(journal)
    plan = plan_bulk(
        journal, "reassign", node="n1", goal_ids=["waiting", "careful", "busy", "done", "there"],
        to="b1",
    )  # fmt: skip
    assert plan.summary() == (
        "Reassign 5 goals to node b1: 1 queued, 1 held (it stays held until released),"
        " 1 already terminal (nothing to do), 1 already there (nothing to do),"
        " 1 refused (GOAL_STATE)"
    )
    done = run_bulk(journal, plan, operator="dana")
    assert {g.goal_id: g.outcome for g in done.goals} == {
        "waiting": "reassigned",
        "careful": "reassigned",
        "busy": "refused",
        "done": "already terminal",
        "there": "already there",
    }
    busy = next(g for g in done.goals if g.goal_id == "busy")
    assert busy.code == "GOAL_STATE" and "stop attempt 1, or confirm its cleanup" in busy.why
    waiting, careful = goals.read("waiting"), goals.read("careful")
    assert (waiting.node_id, waiting.status, waiting.round) == ("b1", "queued", 2)
    assert (careful.node_id, careful.status) == ("b1", "held")  # moving it is not a release
    moved = [e for e in journal.events_after(0, 1000) if e.type == "goal.reassigned"]
    assert {e.data["goal_id"]: e.data["by"] for e in moved} == {
        "waiting": "dana",
        "careful": "dana",
    }  # who moved them, as Cancel and Release record theirs
    assert goals.read("busy").node_id == "b3"
    assert check_journal(journal).clean

    again = run_bulk(
        journal, plan_bulk(journal, "reassign", node="n1", goal_ids=["waiting"], to="b1")
    )
    assert [g.outcome for g in again.goals] == ["already there"] and again.ok


def test_a_selection_takes_the_nodes_goals_in_those_statuses(journal: Journal) -> None:
    goals = fleet(journal)
    selection = Selection("b3", ("held", "queued"))
    plan = plan_bulk(journal, "reassign", node="n1", selection=selection, to="b1")
    assert sorted(p.goal_id for p in plan.goals) == ["careful", "waiting"]
    assert run_bulk(journal, plan).ok
    assert plan_bulk(journal, "reassign", node="n1", selection=selection, to="b1").goals == ()
    assert goals.read("busy").node_id == "b3"


def test_a_goal_started_between_the_plan_and_its_turn_is_skipped(journal: Journal) -> None:
    goals = fleet(journal)
    plan = plan_bulk(journal, "reassign", node="n1", goal_ids=["waiting"], to="b1")

    def meanwhile(planned: PlannedGoal) -> None:
        start(goals, planned.goal_id)  # its node started it first: that start wins

    done = run_bulk(journal, plan, before_turn=meanwhile)
    (report,) = done.goals
    assert report.outcome == "skipped" and report.code == "VERSION_CONFLICT"
    assert goals.read("waiting").node_id == "b3"


def test_a_node_the_journal_does_not_know_is_refused_before_anything(journal: Journal) -> None:
    fleet(journal)
    before = journal.last_sequence()
    with pytest.raises(NodeNotFoundError, match="no node b11 in this journal"):
        plan_bulk(journal, "reassign", node="n1", goal_ids=["waiting"], to="b11")
    with pytest.raises(InvalidInputError):  # reassign without a node to move to
        plan_bulk(journal, "reassign", node="n1", goal_ids=["waiting"])
    with pytest.raises(InvalidInputError):  # and no other action takes one
        plan_bulk(journal, "release", node="n1", goal_ids=["careful"], to="b1")
    assert journal.last_sequence() == before


# --- the command line ---------------------------------------------------------------------------


@pytest.fixture
def fleet_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    path = tmp_path / "journal.db"
    assert refine(capsys, path, "init")[0] == 0
    with Journal.open(path) as journal:
        fleet(journal)
    return path


def test_dry_run_then_the_move_then_nothing_left(fleet_file: Path, capsys) -> None:
    before = dump(fleet_file)
    argv = ("reassign", "--node", "b3", "--status", "queued,held", "--to", "b1")
    code, out, err = refine(capsys, fleet_file, *argv, "--dry-run")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert (
        lines[0] == "Reassign 2 goals to node b1: 1 queued, 1 held (it stays held until released)"
    )
    assert any("moved to node b1 as round 2, held there until released" in x for x in lines)
    assert lines[-1] == "dry run: nothing was written"
    assert dump(fleet_file) == before

    code, out, err = refine(capsys, fleet_file, *argv, "--json")
    reports = json.loads(out)
    assert (code, err) == (0, "")
    assert {(r["goal_id"], r["outcome"], r["ok"]) for r in reports} == {
        ("careful", "reassigned", True),
        ("waiting", "reassigned", True),
    }
    code, out, _ = refine(capsys, fleet_file, *argv)
    assert code == 0 and out.splitlines()[0] == "Reassign 0 goals to node b1: none matches"
    code, out, _ = refine(capsys, fleet_file, "show", "waiting")  # the old round says why it ended
    assert code == 0
    assert "run waiting.r1  [cancelled: superseded: goal reassigned to node b1 (round 2)]" in out


def test_a_running_goal_is_refused_exit_1_in_one_line(fleet_file: Path, capsys) -> None:
    code, out, err = refine(capsys, fleet_file, "reassign", "busy", "waiting", "--to", "b1")
    assert code == 1
    assert err == (
        "refine: GOAL_STATE: reassign busy: refused: running on node b3: only a queued or held"
        " goal moves (stop attempt 1, or confirm its cleanup if that node is gone, first)\n"
    )
    assert out.splitlines()[-1] == "reassign: 1 of 2 goals done (1 reassigned); 1 refused"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("reassign", "waiting", "--to", "b11"), "refine: NODE_NOT_FOUND: no node b11 in this"),
        (("reassign", "waiting", "nope", "--to", "b1"), "refine: GOAL_NOT_FOUND: no goal nope"),
        (("reassign", "waiting"), "refine: USAGE: the following arguments are required: --to"),
        (("reassign", "--to", "b1"), "refine: USAGE: name a goal, or select goals"),
        (("reassign", "waiting", "--to", ""), "refine: USAGE: "),
        (("reassign", "waiting", "--to", "b 1"), "refine: INVALID_INPUT: "),
    ],
)
def test_bad_input_exits_2_in_one_line_and_writes_nothing(
    fleet_file: Path, capsys, args, says
) -> None:
    before = dump(fleet_file)
    code, out, err = refine(capsys, fleet_file, *args)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert err.startswith(says), err
    assert dump(fleet_file) == before


def test_several_nodes_share_the_goals_by_the_room_each_has_left(journal: Journal) -> None:
    goals = Goals(journal)
    for goal_id in ("g1", "g2", "g3", "g4"):
        add(goals, goal_id)
    add(goals, "busy-b5", node="b5")
    start(goals, "busy-b5", node="b5")  # b5: capacity 3, one running: room 2
    journal.write_presence(Beat("b1", "start", "host-b1", 4, "0.1.0", 3600))  # room 4
    journal.write_presence(Beat("b5", "start", "host-b5", 3, "0.1.0", 3600))
    plan = plan_bulk(
        journal, "reassign", node="n1", selection=Selection("b3", ("queued",)), to=["b5", "b1"]
    )
    assert plan.summary() == "Reassign 4 goals to nodes b5, b1: 4 queued"
    # b1 4 → 3 → 2, then b5 and b1 tie at 2: the one named first, b5; then b1 (2 > 1).
    assert [p.to for p in plan.goals] == ["b1", "b1", "b5", "b1"]
    assert plan.goals[0].to_json()["to"] == "b1"
    done = run_bulk(journal, plan)
    assert (
        done.ok and done.summary() == "reassign: 4 of 4 goals done (4 reassigned: 3 to b1, 1 to b5)"
    )
    assert sorted(goals.read(g).node_id for g in ("g1", "g2", "g3", "g4")) == [
        "b1", "b1", "b1", "b5",
    ]  # fmt: skip
    again = plan_bulk(journal, "reassign", node="n1", goal_ids=["g1", "g3"], to=["b5", "b1"])
    assert [p.expect for p in again.goals] == ["already there", "already there"]


def test_unknown_nodes_among_several_are_all_named(fleet_file: Path, capsys) -> None:
    before = dump(fleet_file)
    code, out, err = refine(capsys, fleet_file, "reassign", "waiting", "--to", "b1,b11,b12")
    assert (code, out) == (2, "")
    assert err.startswith("refine: NODE_NOT_FOUND: no node b11, b12 in this journal")
    assert dump(fleet_file) == before
