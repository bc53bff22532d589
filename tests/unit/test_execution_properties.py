"""Hypothesis: fuzzed input gives only typed errors and writes nothing; a stateful model of Run
commands agrees with an independent in-memory reference at every step."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from store.errors import (
    AttemptActiveError,
    CancelPendingError,
    CommandConflictError,
    InvalidInputError,
    RefineError,
    RunExistsError,
    RunNotFoundError,
    RunTerminalError,
    StaleAttemptError,
    VersionConflictError,
)
from store.journal.sqlite import Journal
from store.model.execution import OPERATIONS, Execution, check_run, validate_run_command
from tests.helpers.examples import examples
from tests.helpers.run_support import PINS, assert_consistent, budget, footprint

CLEANUP = {"epoch": 1, "confirmed_by": "op@n1", "method": "sigterm"}
GOOD: dict[str, dict[str, Any]] = {
    "submit": {"command_id": "c", "run_id": "r1", "pins": PINS, "budget": budget(2)},
    "claim": {"command_id": "c", "run_id": "r1", "expected_version": 1, "worker": "w1"},
    "complete": {
        "command_id": "c",
        "run_id": "r1",
        "expected_version": 2,
        "epoch": 1,
        "evidence": ["a"],
    },
    "fail": {
        "command_id": "c",
        "run_id": "r1",
        "expected_version": 2,
        "epoch": 1,
        "reason": "boom",
        "evidence": [],
    },
    "interrupt": {"command_id": "c", "run_id": "r1", "expected_version": 2, "cleanup": CLEANUP},
    "request_cancel": {"command_id": "c", "run_id": "r1", "expected_version": 2, "reason": "x"},
    "cancel": {"command_id": "c", "run_id": "r1", "expected_version": 1, "reason": "x"},
}
FIELDS = sorted({key for args in GOOD.values() for key in args} | {"force", "verdict", "status"})

ids = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:/-]{0,8}", fullmatch=True)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 25),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["", " ", "\ud800", "x" * 501, "sha256:" + "a" * 64, "r1", "w1", b"r1"]),
    ids,
    st.builds(object),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.tuples(inner, inner),
        st.dictionaries(
            st.sampled_from(
                [
                    *FIELDS,
                    "epoch",
                    "confirmed_by",
                    "method",
                    "candidate_digest",
                    "recipe_revision",
                    "scenario_revision",
                    "max_attempts",
                    "attempt_timeout_ms",
                    "reason",
                ]
            ),
            inner,
            max_size=4,
        ),
    ),
    max_leaves=6,
)


@st.composite
def mutated_inputs(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    """A valid command with some fields replaced, dropped or added."""
    op = draw(st.sampled_from(OPERATIONS))
    args = dict(GOOD[op])
    for _ in range(draw(st.integers(1, 3))):
        key = draw(st.sampled_from(FIELDS))
        if draw(st.booleans()) and key in args:
            del args[key]
        else:
            args[key] = draw(values)
    return op, args


@pytest.fixture(scope="module")
def fuzz_journal(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with Journal.open(tmp_path_factory.mktemp("fuzz") / "j.db", synchronous="NORMAL") as j:
        ex = Execution(j)
        ex.submit(**GOOD["submit"])
        yield j


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=mutated_inputs())
def test_fuzzed_commands_raise_only_typed_errors_and_write_nothing(
    fuzz_journal: Journal, case: tuple[str, dict[str, Any]]
) -> None:
    op, args = case
    ex = Execution(fuzz_journal)
    before = footprint(fuzz_journal)
    try:
        result = getattr(ex, op)(**args)
    except RefineError as exc:
        assert exc.code and footprint(fuzz_journal) == before
        return
    run = ex.read(result.run.run_id)
    assert run is not None and run.version >= result.run.version
    assert_consistent(fuzz_journal)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(op=st.sampled_from(OPERATIONS), inputs=st.dictionaries(st.sampled_from(FIELDS), values))
def test_validate_run_command_refuses_with_invalid_input_only(
    op: str, inputs: dict[str, Any]
) -> None:
    try:
        clean = validate_run_command(op, inputs)
    except InvalidInputError:
        return
    assert validate_run_command(op, clean) == clean  # a clean command stays clean


# --- the stateful model ----------------------------------------------------------------------


@dataclass
class RefRun:
    """The reference: the seed's rules restated as plainly as possible."""

    max_attempts: int
    states: list[str] = field(default_factory=list)
    workers: list[str] = field(default_factory=list)
    status: str = "queued"
    pending: str | None = None
    cancel_reason: str | None = None
    version: int = 1

    def running(self) -> bool:
        return self.status == "running"

    def end_last(self, state: str) -> None:
        self.states[-1] = state
        if self.pending is not None:
            self.status, self.cancel_reason, self.pending = "cancelled", self.pending, None
        elif len(self.states) < self.max_attempts:
            self.status = "queued"
        else:
            self.status = "exhausted"


RUNS = ("a", "b")
REASONS = ("stop now", "wrong branch")


class RunMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp())
        self.journal = Journal.open(self.dir / "j.db", synchronous="NORMAL")
        self.ex = Execution(self.journal)
        self.ref: dict[str, RefRun] = {}
        self.done: list[tuple[str, dict[str, Any], Any]] = []
        self.counter = 0

    def teardown(self) -> None:
        self.journal.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # helpers

    def _version(self, run_id: str, offset: int) -> int:
        run = self.ref.get(run_id)
        return max(0, (run.version if run else 0) + offset)

    def _epoch(self, run_id: str, offset: int) -> int:
        run = self.ref.get(run_id)
        return min(20, max(1, (len(run.states) if run else 1) + offset))

    def _run(self, op: str, args: dict[str, Any], expect: type[RefineError] | None) -> None:
        """Issue the command; the outcome must be what the reference predicted."""
        self.counter += 1
        args = {"command_id": f"cmd{self.counter}", **args}
        try:
            result = getattr(self.ex, op)(**args)
        except RefineError as exc:
            assert type(exc) is expect, (op, args, exc)
            return
        assert expect is None, (op, args, "succeeded")
        assert not result.replayed
        self.done.append((op, args, result.run))

    def _decide(self, run_id: str, version: int) -> tuple[RefRun | None, type[RefineError] | None]:
        run = self.ref.get(run_id)
        if version != (run.version if run else 0):
            return run, VersionConflictError
        if run is None:
            return None, RunNotFoundError
        if run.status in ("completed", "exhausted", "cancelled"):
            return run, RunTerminalError
        return run, None

    # rules

    @rule(run_id=st.sampled_from(RUNS), max_attempts=st.integers(1, 3))
    def submit(self, run_id: str, max_attempts: int) -> None:
        expect = RunExistsError if run_id in self.ref else None
        self._run(
            "submit", {"run_id": run_id, "pins": PINS, "budget": budget(max_attempts)}, expect
        )
        if expect is None:
            self.ref[run_id] = RefRun(max_attempts)

    @rule(
        run_id=st.sampled_from(RUNS),
        vo=st.sampled_from([0, 0, 0, -1, 1]),
        worker=st.sampled_from(["w1", "w2"]),
    )
    def claim(self, run_id: str, vo: int, worker: str) -> None:
        version = self._version(run_id, vo)
        run, error = self._decide(run_id, version)
        if error is None and run is not None:
            if run.pending is not None:
                error = CancelPendingError
            elif run.running():
                error = AttemptActiveError
        self._run("claim", {"run_id": run_id, "expected_version": version, "worker": worker}, error)
        if error is None and run is not None:
            run.states.append("running")
            run.workers.append(worker)
            run.status, run.version = "running", run.version + 1

    @rule(
        run_id=st.sampled_from(RUNS),
        vo=st.sampled_from([0, 0, 0, 1]),
        eo=st.sampled_from([0, 0, 0, -1, 1]),
        op=st.sampled_from(["complete", "fail"]),
    )
    def report(self, run_id: str, vo: int, eo: int, op: str) -> None:
        version, epoch = self._version(run_id, vo), self._epoch(run_id, eo)
        run, error = self._decide(run_id, version)
        if error is None and run is not None:
            if op == "complete" and run.pending is not None:
                error = CancelPendingError
            elif not run.running() or epoch != len(run.states):
                error = StaleAttemptError
        args: dict[str, Any] = {
            "run_id": run_id,
            "expected_version": version,
            "epoch": epoch,
            "evidence": ["out"],
        }
        if op == "fail":
            args["reason"] = "tests failed"
        self._run(op, args, error)
        if error is None and run is not None:
            run.version += 1
            if op == "complete":
                run.states[-1], run.status = "completed", "completed"
            else:
                run.end_last("failed")

    @rule(
        run_id=st.sampled_from(RUNS),
        vo=st.sampled_from([0, 0, -1]),
        eo=st.sampled_from([0, 0, 0, -1, 1]),
    )
    def interrupt(self, run_id: str, vo: int, eo: int) -> None:
        version, epoch = self._version(run_id, vo), self._epoch(run_id, eo)
        run, error = self._decide(run_id, version)
        if error is None and run is not None and (not run.running() or epoch != len(run.states)):
            error = StaleAttemptError
        self._run(
            "interrupt",
            {"run_id": run_id, "expected_version": version, "cleanup": {**CLEANUP, "epoch": epoch}},
            error,
        )
        if error is None and run is not None:
            run.version += 1
            run.end_last("interrupted")

    @rule(
        run_id=st.sampled_from(RUNS), vo=st.sampled_from([0, 0, 1]), reason=st.sampled_from(REASONS)
    )
    def request_cancel(self, run_id: str, vo: int, reason: str) -> None:
        version = self._version(run_id, vo)
        run, error = self._decide(run_id, version)
        if error is None and run is not None and run.pending is not None:
            error = CancelPendingError
        self._run(
            "request_cancel",
            {"run_id": run_id, "expected_version": version, "reason": reason},
            error,
        )
        if error is None and run is not None:
            run.version += 1
            if run.running():
                run.pending = reason
            else:
                run.status, run.cancel_reason = "cancelled", reason

    @rule(
        run_id=st.sampled_from(RUNS),
        vo=st.sampled_from([0, 0, 1]),
        reason=st.sampled_from(REASONS),
        with_cleanup=st.booleans(),
        eo=st.sampled_from([0, 0, 1]),
    )
    def cancel(self, run_id: str, vo: int, reason: str, with_cleanup: bool, eo: int) -> None:
        version, epoch = self._version(run_id, vo), self._epoch(run_id, eo)
        run, error = self._decide(run_id, version)
        if error is None and run is not None:
            if not run.running() and with_cleanup:
                error = StaleAttemptError
            elif run.running() and not with_cleanup:
                error = AttemptActiveError
            elif run.running() and epoch != len(run.states):
                error = StaleAttemptError
        args: dict[str, Any] = {"run_id": run_id, "expected_version": version, "reason": reason}
        if with_cleanup:
            args["cleanup"] = {**CLEANUP, "epoch": epoch}
        self._run("cancel", args, error)
        if error is None and run is not None:
            run.version += 1
            if run.running():
                run.states[-1] = "interrupted"
            run.status, run.cancel_reason = "cancelled", run.pending or reason
            run.pending = None

    @rule(data=st.data())
    def repeat(self, data: st.DataObject) -> None:
        if not self.done:
            return
        op, args, run = data.draw(st.sampled_from(self.done))
        again = getattr(self.ex, op)(**args)
        assert again.replayed and again.run == run
        if "expected_version" in args:
            with pytest.raises(CommandConflictError):
                getattr(self.ex, op)(**{**args, "expected_version": args["expected_version"] + 1})

    # invariants

    @invariant()
    def agrees_with_the_reference(self) -> None:
        for run_id in RUNS:
            run, ref = self.ex.read(run_id), self.ref.get(run_id)
            if ref is None:
                assert run is None
                continue
            assert run is not None
            assert [a.state for a in run.attempts] == ref.states
            assert [a.worker for a in run.attempts] == ref.workers
            assert (run.status, run.version, run.cancel_reason) == (
                ref.status,
                ref.version,
                ref.cancel_reason,
            )
            expected = None if ref.pending is None else {"reason": ref.pending}
            assert run.cancel_requested == expected
            check_run(self.journal.load("run:" + run_id).state)  # type: ignore[union-attr]

    @invariant()
    def every_run_is_the_fold_of_its_events(self) -> None:
        assert_consistent(self.journal)


# Input generation speed is not what these tests check: a slow CI box must not fail them.
RunMachine.TestCase.settings = settings(
    max_examples=examples(100),
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_run_commands_agree_with_the_reference = RunMachine.TestCase
