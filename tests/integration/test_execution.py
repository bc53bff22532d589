"""Execution (DESIGN §4, the seed's suite in Python): ownership, idempotency, Budget, terminal
refusal, input validation, fold/outbox consistency, corrupt records, refusal order."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from store.errors import (
    AttemptActiveError,
    CancelPendingError,
    CommandConflictError,
    CorruptRunError,
    DecisionError,
    InvalidInputError,
    JournalClosedError,
    JournalReadOnlyError,
    RunExistsError,
    RunNotFoundError,
    RunTerminalError,
    StaleAttemptError,
    VersionConflictError,
)
from store.journal.sqlite import Journal, Stored
from store.journal.url import is_postgres_url
from store.model.execution import (
    EXECUTION_LIMITS,
    Execution,
    check_run,
    check_transition,
    decide_run,
    run_from_stored,
    validate_run_command,
)
from tests.helpers.run_support import (
    PINS,
    Child,
    assert_consistent,
    budget,
    claim,
    footprint,
    submit,
)

CLEANUP = {"epoch": 1, "confirmed_by": "dana@n1", "method": "process-exited"}


@pytest.fixture
def ex(journal: Journal) -> Execution:
    return Execution(journal)


# --- the API and its records -----------------------------------------------------------------


def test_a_run_goes_from_submit_to_completed(ex: Execution, journal: Journal) -> None:
    result = ex.submit(command_id="c1", run_id="build.r1", pins=PINS, budget=budget(2))
    assert not result.replayed
    run = result.run
    assert (run.status, run.version, run.attempts) == ("queued", 1, ())
    assert run.pins == PINS and run.budget == budget(2)
    assert run.cancel_requested is None and run.cancel_reason is None
    with pytest.raises(TypeError):
        run.pins["recipe_revision"] = "x"  # type: ignore[index]

    claimed = ex.claim(command_id="c2", run_id="build.r1", expected_version=1, worker="w1")
    assert claimed.attempt.attempt_id == "build.r1/1" and claimed.attempt.epoch == 1
    assert claimed.attempt.state == "running" and claimed.run.status == "running"

    done = ex.complete(
        command_id="c3", run_id="build.r1", expected_version=2, epoch=1, evidence=["log:1"]
    )
    assert done.run.status == "completed" and done.run.version == 3
    assert done.run.attempts[0].evidence == ("log:1",)
    assert ex.read("build.r1") == done.run
    assert ex.read("never") is None and ex.history("never") == []
    events = ex.history("build.r1")
    assert [e.type for e in events] == [
        "run.submitted",
        "attempt.claimed",
        "attempt.completed",
        "run.completed",
    ]
    assert events[1].data == {
        "run_id": "build.r1",
        "attempt_id": "build.r1/1",
        "epoch": 1,
        "worker": "w1",
    }
    assert [e.version for e in events] == [1, 2, 3, 3]
    assert ex.history("build.r1", after_sequence=2, limit=1) == events[2:3]
    as_json = done.run.to_json()
    assert json.loads(json.dumps(as_json)) == as_json
    assert set(as_json) == {
        "run_id",
        "pins",
        "budget",
        "status",
        "attempts",
        "cancel_requested",
        "cancel_reason",
        "version",
    }
    assert as_json["attempts"][0] == {
        "attempt_id": "build.r1/1",
        "epoch": 1,
        "worker": "w1",
        "state": "completed",
        "evidence": ["log:1"],
        "reason": None,
        "cleanup": None,
    }
    assert_consistent(journal)


def test_limits_are_frozen_and_match_the_seed() -> None:
    assert EXECUTION_LIMITS.max_attempts == EXECUTION_LIMITS["max_attempts"] == 20
    assert EXECUTION_LIMITS.max_text_length == 500 and EXECUTION_LIMITS.max_id_length == 128
    assert len("run:") + EXECUTION_LIMITS.max_run_id_length <= 128
    assert EXECUTION_LIMITS.max_run_id_length + len("/20") <= 128
    with pytest.raises(AttributeError):
        EXECUTION_LIMITS.max_attempts = 21  # type: ignore[misc]


def test_execution_needs_a_journal() -> None:
    with pytest.raises(InvalidInputError):
        Execution("journal.db")  # type: ignore[arg-type]


# --- ownership -------------------------------------------------------------------------------


def test_a_replaced_owner_cannot_report(ex: Execution, journal: Journal) -> None:
    submit(ex)
    version, _ = claim(ex, worker="w1")
    with pytest.raises(AttemptActiveError):  # no takeover while it runs
        ex.claim(command_id="steal", run_id="r1", expected_version=version, worker="w2")
    version = ex.interrupt(
        command_id="cleanup:1", run_id="r1", expected_version=version, cleanup=CLEANUP
    ).run.version
    run = ex.read("r1")
    assert run is not None and run.status == "queued"
    assert run.attempts[0].state == "interrupted" and run.attempts[0].worker == "w1"
    assert run.attempts[0].cleanup == CLEANUP
    version, epoch2 = claim(ex, worker="w2")
    assert epoch2 == 2
    before = footprint(journal)
    for late in (
        lambda: ex.complete(
            command_id="late:c", run_id="r1", expected_version=version, epoch=1, evidence=[]
        ),
        lambda: ex.fail(
            command_id="late:f",
            run_id="r1",
            expected_version=version,
            epoch=1,
            reason="late",
            evidence=[],
        ),
        lambda: ex.interrupt(
            command_id="late:i", run_id="r1", expected_version=version, cleanup=CLEANUP
        ),
        lambda: ex.complete(
            command_id="late:future", run_id="r1", expected_version=version, epoch=3, evidence=[]
        ),
    ):
        with pytest.raises(StaleAttemptError):
            late()
    assert footprint(journal) == before
    done = ex.complete(
        command_id="w2:done", run_id="r1", expected_version=version, epoch=2, evidence=[]
    )
    assert done.run.status == "completed" and done.run.attempts[1].worker == "w2"
    assert_consistent(journal)


def test_a_killed_worker_keeps_its_attempt_until_cleanup(journal_location: str) -> None:
    path = journal_location
    with Journal.open(path) as journal:
        ex = Execution(journal)
        submit(ex)
        worker = Child(
            path,
            {
                "commands": [
                    {
                        "op": "claim",
                        "args": {
                            "command_id": "w1:claim",
                            "run_id": "r1",
                            "expected_version": 1,
                            "worker": "w1",
                        },
                    }
                ],
                "hang": True,
            },
        )
        assert worker.line()["ok"]["status"] == "running"
        worker.kill()
        # A silent owner's outcome is unknown: nothing (no time, lease or heartbeat) ends it.
        run = ex.read("r1")
        assert run is not None and run.status == "running" and run.running_attempt is not None
        with pytest.raises(AttemptActiveError):
            ex.claim(command_id="w2:claim", run_id="r1", expected_version=2, worker="w2")
        with pytest.raises(StaleAttemptError):
            ex.interrupt(
                command_id="wrong", run_id="r1", expected_version=2, cleanup={**CLEANUP, "epoch": 2}
            )
        ended = ex.interrupt(command_id="rec", run_id="r1", expected_version=2, cleanup=CLEANUP)
        assert ended.run.status == "queued" and ended.run.attempts[0].state == "interrupted"
        assert (
            ex.claim(
                command_id="w2:claim", run_id="r1", expected_version=3, worker="w2"
            ).attempt.epoch
            == 2
        )
        assert_consistent(journal)


# --- idempotency -----------------------------------------------------------------------------


def test_replay_returns_the_run_as_that_command_left_it(ex: Execution, journal: Journal) -> None:
    submit(ex)
    first = ex.claim(command_id="claim:t1", run_id="r1", expected_version=1, worker="w1")
    ex.fail(command_id="f1", run_id="r1", expected_version=2, epoch=1, reason="boom", evidence=[])
    before = footprint(journal)
    again = ex.claim(command_id="claim:t1", run_id="r1", expected_version=1, worker="w1")
    assert again.replayed and again.run == first.run and again.attempt == first.attempt
    assert again.run.version == 2  # expected_version + 1, not current state
    resubmit = ex.submit(command_id="r1:submit", run_id="r1", pins=PINS, budget=budget(3))
    assert resubmit.replayed and resubmit.run.version == 1
    assert footprint(journal) == before


def test_a_reused_command_id_is_bound_to_its_command(ex: Execution, journal: Journal) -> None:
    submit(ex)
    submit(ex, "r2")
    ex.claim(command_id="claim:t1", run_id="r1", expected_version=1, worker="w1")
    before = footprint(journal)
    for other in (
        dict(run_id="r1", expected_version=1, worker="w2"),  # another payload
        dict(run_id="r1", expected_version=0, worker="w1"),  # another expected version
        dict(run_id="r2", expected_version=1, worker="w1"),  # another Run
    ):
        with pytest.raises(CommandConflictError):
            ex.claim(command_id="claim:t1", **other)
    with pytest.raises(CommandConflictError):  # the operation is part of the payload
        ex.request_cancel(command_id="claim:t1", run_id="r1", expected_version=1, reason="x")
    with pytest.raises(CommandConflictError):  # and command IDs are journal-wide
        ex.submit(command_id="claim:t1", run_id="r3", pins=PINS, budget=budget())
    assert footprint(journal) == before


def test_a_refused_command_leaves_its_id_unused(ex: Execution, journal: Journal) -> None:
    submit(ex)
    with pytest.raises(VersionConflictError):
        ex.claim(command_id="claim:x", run_id="r1", expected_version=7, worker="w1")
    with pytest.raises(RunNotFoundError):
        ex.claim(command_id="claim:y", run_id="r9", expected_version=0, worker="w1")
    ok = ex.claim(command_id="claim:x", run_id="r1", expected_version=1, worker="w1")
    assert not ok.replayed and ok.run.version == 2
    submit(ex, "r9")
    assert not ex.claim(command_id="claim:y", run_id="r9", expected_version=1, worker="w1").replayed


def test_submit_twice_is_refused_and_a_cancel_none_replays_as_omitted(ex: Execution) -> None:
    submit(ex)
    with pytest.raises(RunExistsError):
        ex.submit(command_id="again", run_id="r1", pins=PINS, budget=budget())
    first = ex.cancel(command_id="c", run_id="r1", expected_version=1, reason="no longer needed")
    assert first.run.status == "cancelled"
    assert ex.cancel(
        command_id="c", run_id="r1", expected_version=1, reason="no longer needed", cleanup=None
    ).replayed


# --- Budget ----------------------------------------------------------------------------------


@pytest.mark.parametrize("ceiling", range(1, EXECUTION_LIMITS.max_attempts + 1))
def test_budget_matrix_every_ceiling(ceiling: int, ex: Execution, journal: Journal) -> None:
    submit(ex, max_attempts=ceiling)
    version = 1
    for epoch in range(1, ceiling + 1):
        version, got = claim(ex, worker=f"w{epoch}")
        assert got == epoch
        if epoch % 2:
            result = ex.fail(
                command_id=f"f{epoch}",
                run_id="r1",
                expected_version=version,
                epoch=epoch,
                reason="tests failed",
                evidence=[f"log:{epoch}"],
            )
        else:
            result = ex.interrupt(
                command_id=f"i{epoch}",
                run_id="r1",
                expected_version=version,
                cleanup={**CLEANUP, "epoch": epoch},
            )
        version = result.run.version
        assert result.run.status == ("exhausted" if epoch == ceiling else "queued")
    run = ex.read("r1")
    assert run is not None and len(run.attempts) == ceiling and run.attempts_left == 0
    assert ex.history("r1", after_sequence=0, limit=1000)[-1].data == {
        "run_id": "r1",
        "attempts": ceiling,
    }
    with pytest.raises(RunTerminalError):
        ex.claim(command_id="one-more", run_id="r1", expected_version=version, worker="w")
    assert_consistent(journal)


def test_budget_is_bounded_at_submission(ex: Execution) -> None:
    for bad in (0, EXECUTION_LIMITS.max_attempts + 1, True, 2.0):
        with pytest.raises(InvalidInputError):
            ex.submit(command_id="s", run_id="r1", pins=PINS, budget=budget(bad))  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):  # no cost field
        ex.submit(command_id="s", run_id="r1", pins=PINS, budget={**budget(), "max_cost_usd": 5})
    assert ex.read("r1") is None


# --- terminal refusal ------------------------------------------------------------------------


def _to_terminal(ex: Execution, how: str) -> int:
    submit(ex, max_attempts=1)
    if how == "cancelled":
        return ex.cancel(
            command_id="end", run_id="r1", expected_version=1, reason="not needed"
        ).run.version
    version, _ = claim(ex)
    if how == "completed":
        return ex.complete(
            command_id="end", run_id="r1", expected_version=version, epoch=1, evidence=[]
        ).run.version
    return ex.fail(
        command_id="end", run_id="r1", expected_version=version, epoch=1, reason="boom", evidence=[]
    ).run.version


@pytest.mark.parametrize("how", ["completed", "exhausted", "cancelled"])
def test_terminal_runs_refuse_every_command(how: str, ex: Execution, journal: Journal) -> None:
    version = _to_terminal(ex, how)
    assert ex.read("r1").status == how  # type: ignore[union-attr]
    before = footprint(journal)
    common = {"run_id": "r1", "expected_version": version}
    commands: list[tuple[str, dict[str, Any]]] = [
        ("claim", {"worker": "w9"}),
        ("complete", {"epoch": 1, "evidence": []}),
        ("fail", {"epoch": 1, "reason": "x", "evidence": []}),
        ("interrupt", {"cleanup": CLEANUP}),
        ("request_cancel", {"reason": "x"}),
        ("cancel", {"reason": "x"}),
        ("cancel", {"reason": "x", "cleanup": CLEANUP}),
    ]
    for n, (op, args) in enumerate(commands):
        with pytest.raises(RunTerminalError):
            getattr(ex, op)(command_id=f"t{n}", **common, **args)
        with pytest.raises(VersionConflictError):  # a stale version is refused earlier
            getattr(ex, op)(command_id=f"t{n}", run_id="r1", expected_version=version - 1, **args)
    with pytest.raises(CommandConflictError):
        ex.claim(command_id="end", **common, worker="w9")
    with pytest.raises(RunExistsError):
        ex.submit(command_id="fresh", run_id="r1", pins=PINS, budget=budget())
    assert footprint(journal) == before


# --- input validation ------------------------------------------------------------------------

GOOD: dict[str, dict[str, Any]] = {
    "submit": {"command_id": "c", "run_id": "r1", "pins": PINS, "budget": budget()},
    "claim": {"command_id": "c", "run_id": "r1", "expected_version": 1, "worker": "w1"},
    "complete": {
        "command_id": "c",
        "run_id": "r1",
        "expected_version": 1,
        "epoch": 1,
        "evidence": ["a"],
    },
    "fail": {
        "command_id": "c",
        "run_id": "r1",
        "expected_version": 1,
        "epoch": 1,
        "reason": "boom",
        "evidence": [],
    },
    "interrupt": {"command_id": "c", "run_id": "r1", "expected_version": 1, "cleanup": CLEANUP},
    "request_cancel": {"command_id": "c", "run_id": "r1", "expected_version": 1, "reason": "x"},
    "cancel": {"command_id": "c", "run_id": "r1", "expected_version": 1, "reason": "x"},
}

BAD_VALUES: dict[str, list[Any]] = {
    "command_id": ["", "-lead", "has space", "a" * 129, "é", 7, None, "a\n"],
    "run_id": ["", ".r", "r" * 125, "r;1", b"r1", ["r1"], "r1\n"],
    "expected_version": [-1, 2**53, True, 1.0, "1", None],
    "worker": ["", "w 1", "w" * 129, 1, None],
    "epoch": [0, 21, -1, True, 1.5, "1", None],
    "evidence": ["a", ["a", "a"], [""], [1], {"a": 1}, None, [["a"]]],
    "reason": ["", "   ", "x" * 501, "😀" * 251, "\ud800", 5, None],
    "pins": [
        None,
        [],
        {**PINS, "candidate_digest": "sha256:" + "AB" * 32},
        {**PINS, "candidate_digest": "sha256:" + "ab" * 31},
        {**PINS, "candidate_digest": "md5:" + "ab" * 32},
        {**PINS, "recipe_revision": ""},
        {**PINS, "extra": "x"},
        {k: v for k, v in PINS.items() if k != "scenario_revision"},
    ],
    "budget": [
        None,
        {"max_attempts": 3},
        {**budget(), "attempt_timeout_ms": 0},
        {**budget(), "attempt_timeout_ms": 1.5},
        {**budget(), "verdict": "pass"},
    ],
    "cleanup": [
        None,
        {**CLEANUP, "epoch": 0},
        {**CLEANUP, "confirmed_by": "dana n1"},
        {**CLEANUP, "method": ""},
        {**CLEANUP, "method": "m" * 501},
        {**CLEANUP, "force": True},
        {"epoch": 1, "confirmed_by": "x"},
    ],
}


class _Attrs:  # a class instance is not a plain record
    def __init__(self, data: dict[str, Any]) -> None:
        self.__dict__.update(data)

    def keys(self) -> Any:
        return self.__dict__.keys()

    def __getitem__(self, key: str) -> Any:
        return self.__dict__[key]


def _bad_inputs() -> Iterator[tuple[str, dict[str, Any]]]:
    for op, good in GOOD.items():
        for field in good:
            for bad in BAD_VALUES.get(field, []):
                if op == "cancel" and field == "cleanup" and bad is None:
                    continue
                yield op, {**good, field: bad}
            yield op, {k: v for k, v in good.items() if k != field}  # missing
        for extra in (
            "force",
            "replaces",
            "last_heartbeat_at",
            "verdict",
            "status",
            "max_cost_usd",
        ):
            yield op, {**good, extra: True}
    yield "cancel", {**GOOD["cancel"], "cleanup": {**CLEANUP, "epoch": 21}}
    yield "submit", {**GOOD["submit"], "pins": _Attrs(PINS)}
    yield "interrupt", {**GOOD["interrupt"], "cleanup": _Attrs(CLEANUP)}


def test_bad_input_is_refused_before_storage_is_touched(journal_location: str) -> None:
    path = journal_location
    with Journal.open(path) as journal:
        ex = Execution(journal)
        submit(ex)
        claim(ex)
        before = footprint(journal)
        cases = list(_bad_inputs())
        assert len(cases) > 250
        for op, inputs in cases:
            with pytest.raises(InvalidInputError) as caught:
                getattr(ex, op)(**inputs)
            assert caught.value.code == "INVALID_INPUT"
        assert footprint(journal) == before
    # validation comes before the journal: a closed or read-only journal still says INVALID_INPUT
    closed = Execution(journal)
    with Journal.open(path, read_only=True) as ro:
        for op, inputs in cases[:40]:
            for target in (closed, Execution(ro)):
                with pytest.raises(InvalidInputError):
                    getattr(target, op)(**inputs)


def test_positional_arguments_are_not_commands(ex: Execution) -> None:
    with pytest.raises(TypeError):
        ex.claim("c", "r1", 1, "w1")  # type: ignore[misc]


def test_identifier_and_text_edges_are_accepted(ex: Execution) -> None:
    run_id = "R" + "a.b_c:d/e-f" * 11 + "x" * 2
    assert len(run_id) == EXECUTION_LIMITS.max_run_id_length
    ex.submit(command_id="c" * 128, run_id=run_id, pins=PINS, budget=budget(1))
    ex.claim(command_id="9claim", run_id=run_id, expected_version=1, worker="w" * 128)
    reason = "😀" * 250  # 500 UTF-16 units
    run = ex.fail(
        command_id="f",
        run_id=run_id,
        expected_version=2,
        epoch=1,
        reason=reason,
        evidence=("e" * 128, "E.2"),
    ).run
    assert run.status == "exhausted" and run.attempts[0].reason == reason
    assert run.attempts[0].attempt_id == run_id + "/1"


def test_validate_run_command_is_the_same_rule(ex: Execution) -> None:
    clean = validate_run_command("cancel", {"run_id": "r1", "reason": "x", "cleanup": None})
    assert clean == {"run_id": "r1", "reason": "x"}
    assert validate_run_command("complete", {"run_id": "r", "epoch": 2, "evidence": ("a",)}) == {
        "run_id": "r",
        "epoch": 2,
        "evidence": ["a"],
    }
    for op, inputs in [
        ("claim", {"run_id": "r1", "worker": "w", "command_id": "c"}),
        ("claim", {"run_id": "r1", "worker": "w", "expected_version": 1}),
        ("interrupt", {"run_id": "r1", "cleanup": None}),
        ("launch", {"run_id": "r1"}),
        ("claim", [("run_id", "r1")]),
    ]:
        with pytest.raises(InvalidInputError):
            validate_run_command(op, inputs)  # type: ignore[arg-type]


def test_reads_check_their_input(ex: Execution) -> None:
    for bad in ("", "bad id", None, 5):
        with pytest.raises(InvalidInputError):
            ex.read(bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidInputError):
            ex.history(bad)  # type: ignore[arg-type]
    for page in ({"after_sequence": -1}, {"limit": 0}, {"limit": 1001}, {"after_sequence": True}):
        with pytest.raises(InvalidInputError):
            ex.history("r1", **page)


# --- journal refusals ------------------------------------------------------------------------


def test_read_only_reads_but_refuses_every_command_even_a_replay(journal_location: str) -> None:
    path = journal_location
    with Journal.open(path) as journal:
        ex = Execution(journal)
        submit(ex)
    with Journal.open(path, read_only=True) as ro:
        ex = Execution(ro)
        assert ex.read("r1").status == "queued"  # type: ignore[union-attr]
        assert len(ex.history("r1")) == 1
        for call in (
            lambda: ex.submit(command_id="r1:submit", run_id="r1", pins=PINS, budget=budget()),
            lambda: ex.claim(command_id="c", run_id="r1", expected_version=1, worker="w"),
        ):
            with pytest.raises(JournalReadOnlyError):
                call()


def test_closed_journal(journal_location: str) -> None:
    journal = Journal.open(journal_location)
    ex = Execution(journal)
    submit(ex)
    journal.close()
    with pytest.raises(JournalClosedError):
        ex.claim(command_id="c", run_id="r1", expected_version=1, worker="w")
    with pytest.raises(JournalClosedError):
        ex.read("r1")


# --- consistency -----------------------------------------------------------------------------


def test_each_run_is_the_fold_of_its_events_and_the_outbox_matches(
    ex: Execution, journal: Journal
) -> None:
    for n in range(6):
        submit(ex, f"r{n}", max_attempts=2)
    claim(ex, "r0")
    ex.complete(command_id="x0", run_id="r0", expected_version=2, epoch=1, evidence=["a", "b"])
    for run_id in ("r1", "r2"):
        for _ in range(2):
            version, epoch = claim(ex, run_id)
            ex.fail(
                command_id=f"{run_id}:f{epoch}",
                run_id=run_id,
                expected_version=version,
                epoch=epoch,
                reason="boom",
                evidence=[],
            )
    version, _ = claim(ex, "r3")
    ex.request_cancel(command_id="x3", run_id="r3", expected_version=version, reason="stop")
    ex.interrupt(command_id="y3", run_id="r3", expected_version=version + 1, cleanup=CLEANUP)
    ex.request_cancel(command_id="x4", run_id="r4", expected_version=1, reason="stop")
    version, _ = claim(ex, "r5")
    ex.cancel(command_id="x5", run_id="r5", expected_version=version, reason="bye", cleanup=CLEANUP)
    statuses = {s.aggregate_id: s.state["status"] for s in journal.aggregates("run")}
    assert statuses == {
        "run:r0": "completed",
        "run:r1": "exhausted",
        "run:r2": "exhausted",
        "run:r3": "cancelled",
        "run:r4": "cancelled",
        "run:r5": "cancelled",
    }
    assert_consistent(journal)


def test_pins_budget_and_settled_attempts_never_change() -> None:
    stored = {
        "run_id": "r1",
        "pins": PINS,
        "budget": budget(3),
        "status": "queued",
        "attempts": [
            {
                "attempt_id": "r1/1",
                "epoch": 1,
                "worker": "w1",
                "state": "failed",
                "reason": "boom",
                "evidence": [],
            },
        ],
    }
    check_run(stored)
    running = {
        **stored,
        "status": "running",
        "attempts": [
            *stored["attempts"],
            {"attempt_id": "r1/2", "epoch": 2, "worker": "w2", "state": "running"},
        ],
    }
    check_transition(stored, running)
    broken = [
        {**running, "pins": {**PINS, "recipe_revision": "other"}},
        {**running, "budget": budget(4)},
        {
            **running,
            "attempts": [{**stored["attempts"][0], "reason": "rewritten"}, running["attempts"][1]],
        },
        {**stored, "status": "exhausted"},  # not a transition a queued Run can make
        stored,  # no change
    ]
    for after in broken:
        with pytest.raises((DecisionError, CorruptRunError)):
            check_run(after)
            check_transition(stored, after)
    ended = {
        **running,
        "status": "queued",
        "attempts": [
            stored["attempts"][0],
            {
                "attempt_id": "r1/2",
                "epoch": 2,
                "worker": "w3",
                "state": "interrupted",
                "cleanup": {**CLEANUP, "epoch": 2},
            },
        ],
    }
    check_run(ended)
    with pytest.raises(DecisionError):  # an ending keeps the worker
        check_transition(running, ended)
    completed = {
        **running,
        "status": "completed",
        "attempts": [
            stored["attempts"][0],
            {**running["attempts"][1], "state": "completed", "evidence": []},
        ],
    }
    with pytest.raises(DecisionError):  # nothing leaves a terminal status
        check_transition(completed, {**completed, "status": "queued"})


def test_decide_run_is_the_seed_decision() -> None:
    change = decide_run(
        "claim",
        Stored(
            "run:r1",
            1,
            {"run_id": "r1", "pins": PINS, "budget": budget(1), "status": "queued", "attempts": []},
        ),
        {"run_id": "r1", "worker": "w1"},
    )
    assert change.aggregate_id == "run:r1" and change.state["status"] == "running"
    assert change.events == [
        ("attempt.claimed", {"run_id": "r1", "attempt_id": "r1/1", "epoch": 1, "worker": "w1"})
    ]
    with pytest.raises(RunNotFoundError):
        decide_run("claim", None, {"run_id": "r1", "worker": "w1"})
    with pytest.raises(RunNotFoundError):  # a stored JSON null counts as missing for a command
        decide_run("claim", Stored("run:r1", 1, None), {"run_id": "r1", "worker": "w1"})
    with pytest.raises(CorruptRunError):
        decide_run("claim", Stored("run:r1", 1, {"run_id": "r1"}), {"run_id": "r1", "worker": "w"})


# --- corrupt and old records -----------------------------------------------------------------


def _write_raw(location: Path | str, run_id: str, state_text: str) -> None:
    """Tamper with a stored run behind the journal's back (either backend)."""
    if is_postgres_url(location):
        with psycopg.connect(str(location), autocommit=True) as pg:
            pg.execute(
                "UPDATE refine.aggregates SET state = %s WHERE aggregate_id = %s",
                (state_text, "run:" + run_id),
            )
        return
    conn = sqlite3.connect(location)
    with conn:
        conn.execute(
            "UPDATE aggregates SET state = ? WHERE aggregate_id = ?", (state_text, "run:" + run_id)
        )
    conn.close()


def _corruptions(state: dict[str, Any]) -> Iterator[Any]:
    attempt = state["attempts"][0]
    yield None
    yield "not an object"
    yield []
    yield {k: v for k, v in state.items() if k != "budget"}
    yield {**state, "run_id": "other"}
    yield {**state, "status": "paused"}
    yield {**state, "verdict": "pass"}
    yield {**state, "status": "queued"}  # but its last attempt runs
    yield {**state, "status": "completed"}
    yield {**state, "cancel_reason": "x"}
    yield {**state, "cancel_requested": {"reason": ""}}
    yield {**state, "cancel_requested": None}
    yield {**state, "pins": {**PINS, "candidate_digest": "sha256:zz"}}
    yield {**state, "budget": {**state["budget"], "max_attempts": 0}}
    yield {**state, "budget": {**state["budget"], "max_attempts": 21}}
    yield {**state, "attempts": [{**attempt, "epoch": 2}]}
    yield {**state, "attempts": [{**attempt, "epoch": True}]}
    yield {**state, "attempts": [{**attempt, "attempt_id": "r1/9"}]}
    yield {**state, "attempts": [{**attempt, "state": "lost"}]}
    yield {**state, "attempts": [{**attempt, "last_heartbeat_at": 5}]}
    yield {**state, "attempts": [{**attempt, "state": "failed"}]}  # failed without reason
    yield {**state, "attempts": [attempt, {**attempt, "epoch": 2, "attempt_id": "r1/2"}]}
    yield {
        **state,
        "budget": {**state["budget"], "max_attempts": 1},
        "attempts": [{**attempt, "state": "failed", "reason": "x", "evidence": []}],
        "status": "queued",
    }  # queued with no attempt left


def test_corrupt_records_are_refused_and_never_interpreted(journal_location: str) -> None:
    path = journal_location
    with Journal.open(path) as journal:
        ex = Execution(journal)
        submit(ex)
        claim(ex)
        good = journal.load("run:r1").state  # type: ignore[union-attr]
        cases = list(_corruptions(good))
        raw = ["{not json", *[json.dumps(c) for c in cases]]
        for text in raw:
            _write_raw(path, "r1", text)
            before = footprint(journal)
            with pytest.raises(CorruptRunError):
                ex.read("r1")
            null = text == "null"
            for command, error in (
                (
                    lambda: ex.claim(command_id="c", run_id="r1", expected_version=2, worker="w"),
                    RunNotFoundError if null else CorruptRunError,
                ),
                (
                    lambda: ex.complete(
                        command_id="c", run_id="r1", expected_version=2, epoch=1, evidence=[]
                    ),
                    RunNotFoundError if null else CorruptRunError,
                ),
                (
                    lambda: ex.submit(command_id="s", run_id="r1", pins=PINS, budget=budget()),
                    RunExistsError if null else CorruptRunError,
                ),
            ):
                with pytest.raises(error):
                    command()
            assert footprint(journal) == before, text
        with pytest.raises(CorruptRunError):
            run_from_stored(Stored("run:r1", 0, good))  # versions start at 1


def test_records_without_optional_fields_stay_readable(journal_location: str) -> None:
    """A record written before cancel_requested existed: no optional key at all."""
    path = journal_location
    with Journal.open(path) as journal:
        ex = Execution(journal)
        submit(ex)
        version, _ = claim(ex)
        old = {
            "run_id": "r1",
            "pins": PINS,
            "budget": budget(),
            "status": "running",
            "attempts": [{"attempt_id": "r1/1", "epoch": 1, "worker": "w1", "state": "running"}],
        }
        _write_raw(path, "r1", json.dumps(old))
        run = ex.read("r1")
        assert run is not None and run.cancel_requested is None and run.cancel_reason is None
        pending = ex.request_cancel(
            command_id="rc", run_id="r1", expected_version=version, reason="operator"
        )
        assert pending.run.cancel_requested == {"reason": "operator"}


# --- refusal order ---------------------------------------------------------------------------


def test_refusal_order(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    journal = Journal.open(path)
    ex = Execution(journal)
    submit(ex)
    version, _ = claim(ex)
    ex.request_cancel(command_id="rc", run_id="r1", expected_version=version, reason="stop")
    # pending cancellation before a stale attempt
    with pytest.raises(CancelPendingError):
        ex.complete(command_id="c1", run_id="r1", expected_version=3, epoch=9, evidence=[])
    # version conflict before the decision
    with pytest.raises(VersionConflictError):
        ex.complete(command_id="c1", run_id="r1", expected_version=2, epoch=9, evidence=[])
    # command conflict before the version
    with pytest.raises(CommandConflictError):
        ex.complete(command_id="rc", run_id="r1", expected_version=0, epoch=1, evidence=[])
    # active attempt: the cancel needs a cleanup confirmation
    with pytest.raises(AttemptActiveError):
        ex.cancel(command_id="c2", run_id="r1", expected_version=3, reason="now")
    journal.close()
    with Journal.open(path, read_only=True) as ro, pytest.raises(JournalReadOnlyError):
        # read-only before the command conflict
        Execution(ro).complete(
            command_id="rc", run_id="r1", expected_version=0, epoch=1, evidence=[]
        )
    with pytest.raises(JournalClosedError):  # closed before anything the journal knows
        ex.complete(command_id="rc", run_id="r1", expected_version=0, epoch=1, evidence=[])
    with pytest.raises(InvalidInputError):  # and bad input before that
        ex.complete(command_id="rc", run_id="r1", expected_version=0, epoch=0, evidence=[])


def test_check_run_skips_only_what_it_shares_by_identity() -> None:
    before = {
        "run_id": "r1",
        "pins": dict(PINS),
        "budget": budget(3),
        "status": "queued",
        "attempts": [
            {
                "attempt_id": "r1/1",
                "epoch": 1,
                "worker": "w1",
                "state": "failed",
                "reason": "boom",
                "evidence": [],
            },
        ],
    }
    check_run(before)
    running = {"attempt_id": "r1/2", "epoch": 2, "worker": "w2", "state": "running"}
    after = {**before, "status": "running", "attempts": [*before["attempts"], running]}
    check_run(after, checked=before)
    for broken in (
        {**after, "pins": {**PINS, "candidate_digest": "sha256:00"}},  # equal-looking copies
        {**after, "budget": {**budget(3), "max_attempts": True}},
        {**after, "attempts": [{**before["attempts"][0], "epoch": True}, running]},
        {**after, "attempts": [before["attempts"][0], {**running, "worker": "bad worker"}]},
        {**after, "pins": None},
    ):
        with pytest.raises(CorruptRunError):
            check_run(broken, checked=before)
        with pytest.raises(CorruptRunError):
            check_run(broken)


def test_frozen_sequences_compare_equal_to_the_lists_callers_pass(ex: Execution) -> None:
    ex.submit(command_id="c1", run_id="build.r1", pins=PINS, budget=budget(2))
    assert ex.read("build.r1").attempts == []
    ex.claim(command_id="c2", run_id="build.r1", expected_version=1, worker="w1")
    done = ex.complete(
        command_id="c3",
        run_id="build.r1",
        expected_version=2,
        epoch=1,
        evidence=["exit:0", "log:1"],
    )
    attempt = done.run.attempts[0]
    assert attempt.evidence == ["exit:0", "log:1"] and attempt.evidence == ("exit:0", "log:1")
    assert attempt.evidence != ["exit:0"]
    with pytest.raises(AttributeError):
        attempt.evidence.append("x")  # type: ignore[attr-defined]
