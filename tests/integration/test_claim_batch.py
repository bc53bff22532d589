"""Transactional batching of claims (ADR-003, issue 27 item 3): ``Journal.execute_batch`` and
``Goals.start_many`` commit several commands in one transaction, each with its own command id,
receipt, events and refusal; on SQLite and on PostgreSQL."""

from __future__ import annotations

import pytest

from store.errors import (
    GoalStateError,
    InvalidInputError,
    JournalLockedError,
    NotThisNodeError,
    VersionConflictError,
)
from store.journal.api import Command, Journal
from store.journal.core import Change
from store.model.goals import GoalResult, Goals, Start


def add(goals: Goals, goal_id: str, node: str = "n1") -> None:
    goals.create(goal_id=goal_id, title=goal_id, node_id=node, argv=["true"])


def claim(goal_id: str, token: str, node: str = "n1") -> Start:
    return Start(goal_id, node, f"{node}/{token}", token, 1)


def test_each_start_of_a_batch_is_its_own_command_with_its_own_refusal(journal: Journal) -> None:
    goals = Goals(journal)
    for goal_id in ("a", "b", "c", "elsewhere", "taken"):
        add(goals, goal_id, node="n2" if goal_id == "elsewhere" else "n1")
    goals.start(goal_id="taken", node_id="n1", worker="n1/t0", token="t0", round=1)
    before = journal.last_sequence()

    results = goals.start_many(
        [
            claim("a", "ta"),
            claim("elsewhere", "te"),  # names another node: refused, writes nothing
            claim("b", "bad token!"),  # invalid: refused before the batch, in its place
            claim("taken", "t1"),  # already running: refused
            claim("taken", "t0"),  # the claim that did commit, repeated: a replay
            claim("c", "tc"),
        ]
    )

    kinds = [type(r).__name__ for r in results]
    assert kinds == [
        "GoalResult",
        NotThisNodeError.__name__,
        InvalidInputError.__name__,
        GoalStateError.__name__,
        "GoalResult",
        "GoalResult",
    ]
    a, _, _, _, replay, c = results
    assert isinstance(a, GoalResult) and isinstance(c, GoalResult)
    assert isinstance(replay, GoalResult) and replay.replayed
    assert not a.replayed and a.goal.status == "running" and a.attempt is not None
    assert a.attempt.worker == "n1/ta" and c.attempt is not None and c.attempt.worker == "n1/tc"
    # Only the two fresh claims wrote: their events, nothing of the refused ones.
    written = {e.aggregate_id for e in journal.events_after(before)}
    assert written == {"goal:a", "run:a.r1", "goal:c", "run:c.r1"}
    assert goals.read("elsewhere").status == "queued"  # type: ignore[union-attr]
    assert goals.read("b").status == "queued"  # type: ignore[union-attr]
    # Each is the very command ``start`` sends: repeating one alone replays it.
    again = goals.start(goal_id="a", node_id="n1", worker="n1/ta", token="ta", round=1)
    assert again.replayed and again.attempt == a.attempt


def test_a_batch_is_one_transaction_a_storage_failure_writes_none_of_it(
    journal: Journal,
) -> None:
    def make(aggregate_id: str) -> Command:
        return Command(
            f"make:{aggregate_id}",
            {"op": "make", "id": aggregate_id},
            {aggregate_id: None},
            lambda loaded: [Change(aggregate_id, {"n": 1}, [("made", {"id": aggregate_id})])],
        )

    def storage_fails(loaded: object) -> list[Change]:
        raise JournalLockedError("journal is locked (the test's)")

    before = journal.last_sequence()
    with pytest.raises(JournalLockedError):
        journal.execute_batch(
            [make("test:a"), make("test:b"), Command("fails", {}, {"test:c": None}, storage_fails)]
        )
    assert journal.last_sequence() == before
    assert journal.load("test:a") is None and journal.load("test:b") is None

    # The same commands, the failing one left out, commit together; a refused one (a stale
    # version) is rolled back alone, and the journal stays usable for the next command.
    stale = Command("stale", {"op": "x"}, {"test:a": 7}, lambda loaded: [])
    results = journal.execute_batch([make("test:a"), stale, make("test:b")])
    assert isinstance(results[1], VersionConflictError)
    first = results[0]
    assert not isinstance(first, Exception) and not first.replayed  # no receipt was left before
    assert [e.aggregate_id for e in journal.events_after(before)] == ["test:a", "test:b"]
    journal.execute_batch([make("test:c")])
    replays = journal.execute_batch([make("test:a"), make("test:c")])
    assert all(not isinstance(r, Exception) and r.replayed for r in replays)
    assert journal.execute_batch([]) == []
