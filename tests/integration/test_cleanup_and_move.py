"""A dead machine in one step (WALKTHROUGH step 9: "She confirms once; the other machines pick
the work up"): `refine cleanup --node N --to M[,M...]` confirms N's attempts, then moves every
goal that waits for N (queued or held there) as `refine reassign --node N --status queued,held`
does. On both backends; its refusals are made before anything is written."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest

from refine_tui.cli import main
from store.journal.api import Journal
from store.journal.presence import MISSED_BEATS, Beat
from store.model.goals import Goals
from store.ops.check import check_journal
from tests.helpers import goal_states

FAST_S = 0.05  # a heartbeat interval that goes silent at once

Refine = Callable[..., tuple[int, str, str]]


@pytest.fixture
def refine(journal_location: str, capsys: pytest.CaptureFixture[str]) -> Refine:
    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main(["--journal", journal_location, "--node", "op", *args])
        out, err = capsys.readouterr()
        return code, out, err

    return run


def beat(journal: Journal, node_id: str, capacity: int, interval_s: float = 3600) -> None:
    journal.write_presence(Beat(node_id, "start", f"host-{node_id}", capacity, "0.1.0", interval_s))


@pytest.fixture
def dead_b7(journal: Journal) -> Goals:
    """Node b7 silent with three running goals (one redelivered by the operator only) and one
    queued; b1 (room 4) and b2 (room 2) live."""
    goals = Goals(journal)
    for goal_id in ("a", "b", "ops"):
        goal_states.add(
            goals, goal_id, node="b7", redelivery="operator" if goal_id == "ops" else "safe"
        )
        goal_states.start(goals, goal_id, node="b7")
    goal_states.add(goals, "next", node="b7")
    beat(journal, "b1", 4)
    beat(journal, "b2", 2)
    beat(journal, "b7", 4, FAST_S)
    time.sleep(FAST_S * (MISSED_BEATS + 1))
    return goals


def events(journal: Journal) -> int:
    return journal.last_sequence()


def test_the_attempts_are_confirmed_and_the_waiting_goals_move(
    journal: Journal, dead_b7: Goals, refine: Refine
) -> None:
    code, out, err = refine("cleanup", "--node", "b7", "--to", "b1,b2", "--json")
    assert (code, err) == (0, "")
    reports = json.loads(out)
    assert [(r["action"], r["goal_id"]) for r in reports[:3]] == [
        ("cleanup", g) for g in ("a", "b", "ops")
    ]
    moved = {r["goal_id"]: (r["outcome"], r["planned"]["to"]) for r in reports[3:]}
    assert moved == {
        "a": ("reassigned", "b1"),
        "b": ("reassigned", "b1"),
        "next": ("reassigned", "b1"),
        "ops": ("reassigned", "b2"),
    }  # in id order, by room: b1 4, 3, then b1 and b2 tie at 2 (b1 named first), then b2
    read = {g: dead_b7.read(g) for g in ("a", "b", "ops", "next")}
    assert {g: (x.node_id, x.status) for g, x in read.items()} == {
        "a": ("b1", "queued"),
        "b": ("b1", "queued"),
        "ops": ("b2", "held"),  # moving is not a release
        "next": ("b1", "queued"),
    }
    assert check_journal(journal).clean

    before = events(journal)  # again: harmless, and it says there is nothing left
    code, out, err = refine("cleanup", "--node", "b7", "--to", "b1,b2")
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        out.splitlines()[0],
        "reassign: 0 of 0 goals done",
    ]
    assert out.startswith("node b7 silent, last beat ") and "nothing left to confirm" in out
    assert events(journal) == before


def test_the_text_says_each_attempt_and_each_move_and_no_next_step(
    dead_b7: Goals, refine: Refine
) -> None:
    code, out, err = refine("cleanup", "--node", "b7", "--to", "b2")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].startswith("node b7 silent, last beat ") and lines[0].endswith(
        ": 3 running attempts"
    )
    assert sum(line.startswith("  cleanup ") for line in lines) == 3
    assert [line.split(":")[0] for line in lines if line.startswith("reassign ")] == [
        "reassign a",
        "reassign b",
        "reassign next",
        "reassign ops",
    ]
    assert lines[-1] == "reassign: 4 of 4 goals done (4 reassigned)"
    assert not any("now wait" in line for line in lines)  # they do not: they moved


def test_a_dry_run_says_what_would_be_confirmed_and_moved_and_writes_nothing(
    journal: Journal, dead_b7: Goals, refine: Refine
) -> None:
    before = events(journal)
    code, out, err = refine("cleanup", "--node", "b7", "--to", "b1,b2", "--dry-run")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].startswith("Confirm the end of 3 attempts of node b7 (silent since ")
    assert lines[0].endswith("): 2 goals will be requeued, 1 held (redelivery: operator)")
    assert lines[1:4] == [
        "  cleanup a: attempt 1 → requeued",
        "  cleanup b: attempt 1 → requeued",
        "  cleanup ops: attempt 1 → held",
    ]
    assert lines[4:] == [
        "then 4 goals move to nodes b1, b2 (by room left): a, b, next, ops",
        "dry run: nothing was written",
    ]
    code, out, err = refine("cleanup", "--node", "b7", "--dry-run")  # without --to
    assert (code, err) == (0, "")
    assert out.splitlines()[4:] == [  # they would wait for a gone node: the flag that moves them
        "then 4 goals wait for node b7: a, b, next, ops; --to NODE[,NODE] also moves them",
        "dry run: nothing was written",
    ]
    code, out, _ = refine("cleanup", "--node", "b7", "--dry-run", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["dry_run"] is True and data["move"] is None
    assert [(a["goal_id"], a["epoch"], a["expect"]) for a in data["cleanup"]] == [
        ("a", 1, "requeued"),
        ("b", 1, "requeued"),
        ("ops", 1, "held"),
    ]
    assert events(journal) == before
    assert dead_b7.read("a").status == "running"  # type: ignore[union-attr]
    # Refused as the cleanup refuses, and only with --node.
    assert refine("cleanup", "--node", "b7", "--to", "b9", "--dry-run")[0] == 2
    code, _, err = refine("cleanup", "a.r1", "--epoch", "1", "--dry-run")
    assert code == 2 and err.startswith("refine: USAGE: --dry-run shows a whole node")
    assert events(journal) == before


def test_refine_nodes_counts_the_goals_that_wait_for_each_node(
    dead_b7: Goals, refine: Refine
) -> None:
    def waiting() -> dict[str, int]:
        code, out, _ = refine("nodes", "--json")
        assert code == 0
        return {n["node_id"]: n["waiting"] for n in json.loads(out)}

    assert waiting() == {"b1": 0, "b2": 0, "b7": 1}  # "next": queued there
    code, out, _ = refine("cleanup", "--node", "b7")
    assert waiting() == {"b1": 0, "b2": 0, "b7": 4}  # 3 requeued or held: they wait for b7
    move = "`refine reassign --node b7 --status queued,held --to NODE` moves them"
    assert code == 0 and out.splitlines()[-1] == f"4 goals now wait for node b7: {move}"
    code, out, _ = refine("cleanup", "--node", "b7", "--dry-run")  # the dry run says they wait
    assert code == 0 and "nothing left to confirm" in out.splitlines()[0]
    assert out.splitlines()[1].startswith("then 4 goals wait for node b7: ")
    code, out, _ = refine("nodes")
    assert code == 0
    header, *rows = out.splitlines()
    assert header.split() == [
        "NODE",
        "STATE",
        "LAST",
        "SEEN",
        "RUNNING",
        "WAITING",
        "HOST",
        "VERSION",
    ]
    assert rows[2].split()[0] == "b7" and "  4  " in rows[2]
    assert refine("cleanup", "--node", "b7", "--to", "b1")[0] == 0
    assert waiting() == {"b1": 4, "b2": 0, "b7": 0}


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (("--node", "b7", "--to", "b1,b9"), 2, "refine: NODE_NOT_FOUND: no node b9 in this"),
        (("--node", "b7", "--to", "b1,b7"), 2, "refine: INVALID_INPUT: the goals of node b7"),
        (("--node", "b1", "--to", "b2"), 1, "refine: NODE_LIVE: node b1 is live"),
        (("a.r1", "--epoch", "1", "--to", "b1"), 2, "refine: USAGE: --to moves a whole node's"),
        (("--to", "b1"), 2, "refine: USAGE: cleanup needs RUN --epoch E (one attempt), or"),
        (("--node", "b7", "--to", ""), 2, "refine: USAGE: "),
    ],
)
def test_refused_in_one_line_before_anything_is_written(
    journal: Journal, dead_b7: Goals, refine: Refine, args: tuple[str, ...], code: int, says: str
) -> None:
    if args[:2] == ("--node", "b1"):
        goal_states.add(dead_b7, "b1-work", node="b1")
        goal_states.start(dead_b7, "b1-work", node="b1")
    before = events(journal)
    done, out, err = refine("cleanup", *args)
    assert (done, out) == (code, "") and err.count("\n") == 1, err
    assert err.startswith(says), err
    assert events(journal) == before
    assert dead_b7.read("a").status == "running"
