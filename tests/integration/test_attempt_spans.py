"""store.ops.attempt_spans, on every backend: a Goal's attempts with their outcome and times,
in order; the attempt a cancellation ended is `cancelled`, an earlier failure of a Run
cancelled later (while queued) stays `failed`."""

from __future__ import annotations

from store.journal.api import Journal
from store.model.goals import Goals
from store.ops.attempt_spans import attempt_spans


def play(goals: Goals, goal_id: str, epoch: int, outcome: str, reason: str | None = None) -> None:
    goal = goals.read(goal_id)
    assert goal is not None
    goals.start(goal_id=goal_id, node_id="n1", worker=f"w{epoch}", token=f"{goal_id}{epoch}")
    if outcome != "running":
        goals.settle(
            goal_id=goal_id, run_id=goal.run_id, epoch=epoch, outcome=outcome, reason=reason
        )


def test_each_attempt_with_its_outcome_and_times_in_order(journal: Journal) -> None:
    goals = Goals(journal)
    goals.create(goal_id="g", title="g", node_id="n1", argv=["true"], max_attempts=4)
    play(goals, "g", 1, "failed", "exit 1")
    play(goals, "g", 2, "failed", "exit 2")
    play(goals, "g", 3, "running")
    spans = attempt_spans(journal, "g")
    assert [(s.epoch, s.outcome, s.reason) for s in spans] == [
        (1, "failed", "exit 1"),
        (2, "failed", "exit 2"),
        (3, "running", ""),
    ]
    assert all(s.run_id == "g.r1" and s.round == 1 for s in spans)
    first, second, running = spans
    assert first.started_at is not None and first.ended_at is not None
    assert first.started_at <= first.ended_at <= (second.started_at or 0)
    assert running.started_at is not None and running.ended_at is None
    assert attempt_spans(journal, "g", "g.r1") == spans
    assert attempt_spans(journal, "g", "g.r2") == []
    assert attempt_spans(journal, "nope") == []


def test_only_the_attempt_a_cancellation_ended_is_cancelled(journal: Journal) -> None:
    goals = Goals(journal)
    goals.create(goal_id="a", title="a", node_id="n1", argv=["true"], max_attempts=3)
    play(goals, "a", 1, "completed")
    goals.create(goal_id="b", title="b", node_id="n1", argv=["true"], max_attempts=3)
    play(goals, "b", 1, "failed", "exit 1")
    play(goals, "b", 2, "running")
    goals.cancel(goal_id="b", reason="not needed", command_id="op:cancel:b")
    goal = goals.read("b")
    assert goal is not None
    goals.settle(goal_id="b", run_id=goal.run_id, epoch=2, outcome="cancelled")
    goals.create(goal_id="c", title="c", node_id="n1", argv=["true"], max_attempts=3)
    play(goals, "c", 1, "failed", "exit 1")  # requeued: queued when cancelled
    goals.cancel(goal_id="c", reason="later", command_id="op:cancel:c")
    assert [s.outcome for s in attempt_spans(journal, "a")] == ["completed"]
    b = attempt_spans(journal, "b")
    assert [(s.outcome, s.reason) for s in b] == [("failed", "exit 1"), ("cancelled", "not needed")]
    assert [s.outcome for s in attempt_spans(journal, "c")] == ["failed"]
