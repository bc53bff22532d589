"""What confirming a whole node will do, said before anything is written (DESIGN §14, the
walkthrough's "30 attempts of node b7 (silent since 10:42:07): 27 goals will be requeued, 3
held"): the counts by each Goal's ending, and the refusals `refine cleanup --node` makes."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from store.errors import NodeLiveError, NodeNotFoundError, NodeUnseenError
from store.journal.presence import MISSED_BEATS, Beat
from store.journal.sqlite import Journal
from store.model.goals import Goals
from store.ops.node_cleanup import cleanup_node, plan_node_cleanup

FAST_S = 0.05  # a heartbeat interval that goes silent at once


def beat(journal: Journal, node_id: str, interval_s: float = 3600) -> None:
    journal.write_presence(Beat(node_id, "start", "host-b7", 4, "0.1.0", interval_s))


def running(goals: Goals, goal_id: str, *, redelivery: str = "safe", attempts: int = 3) -> None:
    goals.create(
        goal_id=goal_id,
        title=goal_id,
        node_id="b7",
        argv=["sleep", "600"],
        max_attempts=attempts,
        redelivery=redelivery,
    )
    goals.start(goal_id=goal_id, node_id="b7", worker=f"b7/{goal_id}", token=f"t-{goal_id}")


@pytest.fixture
def journal(tmp_path: Path) -> Journal:
    return Journal.open(tmp_path / "journal.db")


def test_the_plan_counts_each_ending_and_writes_nothing(journal: Journal) -> None:
    goals = Goals(journal)
    for goal_id in ("a", "b", "c"):
        running(goals, goal_id)
    running(goals, "ops", redelivery="operator")
    running(goals, "last", attempts=1)
    running(goals, "gone")
    goals.cancel(goal_id="gone", reason="not wanted", command_id="cancel-gone")
    beat(journal, "b7", FAST_S)
    time.sleep(FAST_S * (MISSED_BEATS + 1))
    before = journal.last_sequence()

    plan = plan_node_cleanup(journal, "b7")

    assert journal.last_sequence() == before
    assert plan.endings() == {"requeued": 3, "held": 1, "exhausted": 1, "cancelled": 1}
    text = plan.text(lambda _: "10:42:07")
    assert text == (
        "Confirm the end of 6 attempts of node b7 (silent since 10:42:07): 3 goals will be"
        " requeued, 1 held (redelivery: operator), 1 exhausted (all attempts used),"
        " 1 cancelled (a cancellation was pending)"
    )
    done = cleanup_node(journal, "b7", here="n1", operator="dana")
    assert {r.goal_id: r.outcome for r in done.reports}["ops"] == "held"
    assert len(done.reports) == 6
    assert done.text().splitlines()[-1] == (
        "4 goals now wait for node b7: `refine reassign --node b7 --status queued,held --to"
        " NODE` moves them"
    )  # requeued and held; the exhausted and the cancelled are done
    again = plan_node_cleanup(journal, "b7")
    assert again.text() == "node b7: nothing left to confirm (no attempt runs there)"


def test_one_goal_is_said_in_the_singular(journal: Journal) -> None:
    running(Goals(journal), "ops", redelivery="operator")
    beat(journal, "b7", FAST_S)
    time.sleep(FAST_S * (MISSED_BEATS + 1))
    text = plan_node_cleanup(journal, "b7").text(lambda _: "10:42:07")
    assert text == (
        "Confirm the end of 1 attempt of node b7 (silent since 10:42:07): 1 goal will be held"
        " (redelivery: operator)"
    )


def test_the_plan_refuses_as_the_cleanup_does(journal: Journal) -> None:
    running(Goals(journal), "a")
    with pytest.raises(NodeUnseenError):  # b7 never beat: nothing says it is gone
        plan_node_cleanup(journal, "b7")
    with pytest.raises(NodeNotFoundError):
        plan_node_cleanup(journal, "nowhere")
    beat(journal, "b7")
    before = journal.last_sequence()
    with pytest.raises(NodeLiveError):
        plan_node_cleanup(journal, "b7")
    assert journal.last_sequence() == before
