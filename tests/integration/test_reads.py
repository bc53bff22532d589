"""store.ops.reads: what screens read, by Goal and Run id, never by the journal's aggregate keys."""

from __future__ import annotations

import pytest

from store.errors import JournalClosedError
from store.journal.api import Journal
from store.model.goals import Goals
from store.ops import reads


def two_goals(journal: Journal) -> Goals:
    goals = Goals(journal)
    goals.create(goal_id="build", title="Build", node_id="n1", argv=["true"], max_attempts=2)
    goals.start(goal_id="build", node_id="n1", worker="w1", token="t1")
    goals.create(goal_id="test", title="Test", node_id="n1", argv=["true"])
    return goals


def test_goals_touched_names_goals_of_goal_and_run_events(journal: Journal) -> None:
    two_goals(journal)
    events = journal.events_after(0)
    assert reads.goals_touched(events) == ["build", "test"]


def test_goals_with_runs_reads_a_batch_and_says_none_for_unknown(journal: Journal) -> None:
    two_goals(journal)
    found = reads.goals_with_runs(journal, ["build", "nope", "test"])
    assert found["nope"] is None
    build, test = found["build"], found["test"]
    assert build is not None and build.goal is not None and build.run is not None
    assert build.run.runs_attempt(1) and build.error is None
    assert test is not None and test.run is not None and test.run.status == "queued"


def test_claim_times_come_from_the_polled_events_without_another_read(journal: Journal) -> None:
    two_goals(journal)
    events = journal.events_after(0)
    claim = next(e for e in events if e.type == "attempt.claimed")
    assert reads.claimed_at(journal, "build.r1", 1) == claim.committed_at
    claims = reads.ClaimTimes()
    claims.learn(events)
    journal.close()  # any read now refuses: the claim time must come from what was learned
    assert claims.get(journal, "build.r1", 1) == claim.committed_at
    with pytest.raises(JournalClosedError):
        claims.get(journal, "test.r1", 1)  # not learned: it would have to read


def test_histories_and_runs_of_a_goal(journal: Journal) -> None:
    goals = two_goals(journal)
    goal = goals.read("build")
    assert goal is not None
    [(run, submitted_at)] = reads.runs_of(journal, goal)
    assert run.run_id == "build.r1" and submitted_at is not None
    assert [e.type for e in reads.goal_history(journal, "build")] == [
        "goal.created",
        "goal.started",
    ]
    assert [e.type for e in reads.run_history(journal, "build.r1")] == [
        "run.submitted",
        "attempt.claimed",
    ]
    started, ended = reads.attempt_times(journal, "build.r1")
    assert list(started) == [1] and ended == {}
    assert sorted(reads.goal_ids(journal)) == ["build", "test"]
    assert dict(reads.goal_states(journal))["test"]["title"] == "Test"
