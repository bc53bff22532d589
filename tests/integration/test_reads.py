"""store.ops.reads: what screens read, by Goal and Run id, never by the journal's aggregate keys."""

from __future__ import annotations

import sqlite3
from typing import Any

import psycopg
import pytest

from store.errors import JournalClosedError
from store.journal.api import Journal
from store.journal.postgres import PostgresJournal
from store.model.goal import goal_from_stored
from store.model.goals import Goals
from store.model.run import run_from_stored
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


def tamper(location: str, backend: str, sql: str, args: tuple[Any, ...]) -> None:
    """A write behind the journal's back (``?`` marks its arguments)."""
    if backend == "sqlite":
        with sqlite3.connect(location) as raw:
            raw.execute(sql, args)
    else:
        with psycopg.connect(location, autocommit=True) as raw:
            raw.execute(sql.replace("aggregates", "refine.aggregates").replace("?", "%s"), args)


def plainly(journal: Journal, ids: list[str]) -> dict[str, tuple[str, ...] | None]:
    """What ``goals_with_runs`` must answer, read the plain way (a snapshot, two reads), each
    entry as words: the Goal's title or error, its Run's status or error."""
    found: dict[str, tuple[str, ...] | None] = {}
    with journal.snapshot():
        goals = journal.load_many([f"goal:{g}" for g in ids])
        parsed = {}
        for agg, stored in goals.items():
            try:
                parsed[agg] = goal_from_stored(stored)
            except Exception as exc:
                parsed[agg] = exc
        runs = journal.load_many(
            [f"run:{g.run_id}" for g in parsed.values() if not isinstance(g, Exception)]
        )
    for goal_id in ids:
        goal = parsed.get(f"goal:{goal_id}")
        if goal is None or isinstance(goal, Exception):
            found[goal_id] = None if goal is None else ("error", str(goal))
            continue
        record = runs.get(f"run:{goal.run_id}")
        try:
            run = "no run" if record is None else run_from_stored(record).status
        except Exception as exc:
            run = f"run error: {exc}"
        found[goal_id] = (goal.title, run)
    return found


def as_words(entry: reads.GoalAndRun | None) -> tuple[str, ...] | None:
    if entry is None:
        return None
    if entry.goal is None:
        return ("error", str(entry.error))
    run = "no run" if entry.run is None else entry.run.status
    return (entry.goal.title, f"run error: {entry.run_error}" if entry.run_error else run)


def test_goals_with_runs_answers_as_a_plain_read_whatever_the_records_hold(
    journal: Journal, journal_location: str, backend: str
) -> None:
    """On a server a Goal and its Run come in one statement, the Run named by a pattern on the
    Goal's text; records the model did not write answer the same as the plain two reads."""
    goals = two_goals(journal)
    for goal_id in ("bad", "escaped", "twice", "norun", "runbad"):
        goals.create(goal_id=goal_id, title=goal_id.title(), node_id="n1", argv=["true"])

    def state_of(goal_id: str) -> str:
        stored = journal.load(f"goal:{goal_id}")
        assert stored is not None and stored.text is not None
        return stored.text

    escaped = state_of("escaped").replace('"escaped.r1"', '"escaped\\u002er1"')
    twice = '{"run_id":"build.r1",' + state_of("twice")[1:]  # parsed: the last one counts
    update = "UPDATE aggregates SET state = ? WHERE aggregate_id = ?"
    for agg, text in [
        ("goal:bad", "not json {"),
        ("goal:escaped", escaped),
        ("goal:twice", twice),
        ("run:runbad.r1", "null"),
    ]:
        tamper(journal_location, backend, update, (text, agg))
    tamper(
        journal_location,
        backend,
        "DELETE FROM aggregates WHERE aggregate_id = ?",
        ("run:norun.r1",),
    )
    ids = ["build", "test", "bad", "escaped", "twice", "norun", "runbad", "none"]
    expected = plainly(journal, ids)
    assert expected["escaped"] == ("Escaped", "queued")  # the escape is JSON's, the id the same
    assert expected["twice"] == ("Twice", "queued") and expected["norun"] == ("Norun", "no run")
    assert expected["bad"] is not None and expected["runbad"] is not None
    assert {g: as_words(e) for g, e in reads.goals_with_runs(journal, ids).items()} == expected
    for one in ids:  # alone too: a read that falls back and one that does not
        assert as_words(reads.goals_with_runs(journal, [one])[one]) == expected[one]
    if isinstance(journal, PostgresJournal):  # one statement, the fallback only when needed
        healthy = ["build", "test", "bad", "norun", "runbad", "none"]
        before = journal.reads
        reads.goals_with_runs(journal, healthy)
        assert journal.reads == before + 1
        reads.goals_with_runs(journal, ["build", "twice"])
        assert journal.reads > before + 2


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
