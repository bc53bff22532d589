"""Execution: who owns each Run and Attempt and how each ended, as atomic journal commands.

The Python port of the seed's Execution (DESIGN §4). It starts no process, measures no time and
judges nothing. Each command is: validate the input (nothing touched), then one
``Journal.execute`` whose decision is :func:`decide_run`. The Goals layer composes
``validate_run_command`` + ``decide_run`` with its own Goal change in one transaction.

Refusal order (seed): InvalidInputError; JournalClosedError / JournalReadOnlyError; replay or
CommandConflictError; VersionConflictError; then the decision: CorruptRunError,
RunNotFoundError (RunExistsError for submit), RunTerminalError, CancelPendingError,
AttemptActiveError / StaleAttemptError.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from store.errors import (
    AttemptActiveError,
    CancelPendingError,
    CorruptRunError,
    DecisionError,
    InvalidInputError,
    RunExistsError,
    RunNotFoundError,
    RunTerminalError,
    StaleAttemptError,
)
from store.journal.api import Change, Event, Journal, Stored
from store.model.run import (
    ATTEMPT_STATES,
    RUN_STATUSES,
    TERMINAL_STATUSES,
    Attempt,
    Run,
    RunStatus,
    attempt_id_for,
    check_run,
    check_stored_run,
    check_transition,
    fold_run,
    passed_run,
    run_aggregate_id,
    run_from_stored,
    run_text,
    run_view,
)
from store.model.run_rules import (
    EXECUTION_LIMITS,
    MAX_SAFE_INTEGER,
    OPERATIONS,
    ExecutionLimits,
    Invalid,
    check_run_id,
    identifier,
    integer,
    validate_run_command,
)
from store.records import dataclass

__all__ = [
    "ATTEMPT_STATES",
    "EXECUTION_LIMITS",
    "OPERATIONS",
    "RUN_STATUSES",
    "TERMINAL_STATUSES",
    "Attempt",
    "ClaimResult",
    "CommandResult",
    "Execution",
    "ExecutionLimits",
    "Run",
    "RunStatus",
    "attempt_id_for",
    "check_run",
    "check_transition",
    "decide_run",
    "fold_run",
    "run_aggregate_id",
    "run_from_stored",
    "validate_run_command",
]


@dataclass(frozen=True)
class CommandResult:
    run: Run
    replayed: bool


@dataclass(frozen=True)
class ClaimResult(CommandResult):
    attempt: Attempt


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


MISSING: Any = _Missing()  # a keyword the caller did not pass: refused as a missing field


# --- the decision ----------------------------------------------------------------------------

State = dict[str, Any]
Events = list[tuple[str, dict[str, Any]]]


def decide_run(op: str, stored: Stored | None, inputs: Mapping[str, Any]) -> Change:
    """The seed's decision step for one Run: its new state and events, or a typed refusal.

    ``inputs`` come from :func:`validate_run_command`. Refusals in order: CorruptRunError,
    RunNotFoundError (RunExistsError for submit), RunTerminalError, CancelPendingError,
    AttemptActiveError / StaleAttemptError. A new state that breaks an invariant is a bug:
    DecisionError, and nothing is written.
    """
    if op not in OPERATIONS:
        raise InvalidInputError(f"unknown Run operation {op!r}")
    run_id = inputs["run_id"]
    aggregate_id = run_aggregate_id(run_id)
    if op == "submit":
        before = None
        if stored is not None:
            if stored.state is not None:
                check_run(stored.state, run_id=run_id)
            raise RunExistsError(f"Run {run_id} was already submitted", run_id=run_id)
        after, events = _submit(inputs)
    else:
        before = _current(stored, run_id)
        if before["status"] in TERMINAL_STATUSES:
            raise RunTerminalError(f"Run {run_id} is {before['status']}", run_id=run_id)
        after, events = _STEPS[op](before, inputs)
    try:
        check_run(after, run_id=run_id, checked=before)
    except CorruptRunError as exc:
        raise DecisionError(f"decision broke an invariant: {exc.message}", run_id=run_id) from exc
    check_transition(before, after)
    events_ = [(t, {"run_id": run_id, **d}) for t, d in events]
    text = run_text(after)
    passed_run(run_id, text)
    return Change(aggregate_id, after, events_, folded=True, text=text)


def _current(stored: Stored | None, run_id: str) -> State:
    """The stored Run a command acts on; a stored JSON null counts as missing (seed, inv. 9)."""
    if stored is not None and stored.state is not None:
        check_stored_run(stored, run_id)
        state: State = stored.state  # checked: a Run's state
        return state
    raise RunNotFoundError(f"Run {run_id} was never submitted", run_id=run_id)


def _submit(inputs: Mapping[str, Any]) -> tuple[State, Events]:
    pins, budget = dict(inputs["pins"]), dict(inputs["budget"])
    state = {
        "run_id": inputs["run_id"],
        "pins": pins,
        "budget": budget,
        "status": "queued",
        "attempts": [],
    }
    return state, [("run.submitted", {"pins": pins, "budget": budget})]


def _claim(before: State, inputs: Mapping[str, Any]) -> tuple[State, Events]:
    _refuse_pending(before)
    if before["status"] == "running":
        raise AttemptActiveError(
            f"Run {before['run_id']} already has attempt {before['attempts'][-1]['attempt_id']}"
            " running",
            run_id=before["run_id"],
        )
    epoch = len(before["attempts"]) + 1
    attempt = {
        "attempt_id": attempt_id_for(before["run_id"], epoch),
        "epoch": epoch,
        "worker": inputs["worker"],
        "state": "running",
    }
    after = {**before, "status": "running", "attempts": [*before["attempts"], attempt]}
    data = {k: attempt[k] for k in ("attempt_id", "epoch", "worker")}
    return after, [("attempt.claimed", data)]


def _complete(before: State, inputs: Mapping[str, Any]) -> tuple[State, Events]:
    _refuse_pending(before)
    ended = _end(before, inputs["epoch"], "completed", evidence=inputs["evidence"])
    after = {**before, "status": "completed", "attempts": [*before["attempts"][:-1], ended]}
    data = {"epoch": inputs["epoch"], "evidence": inputs["evidence"]}
    return after, [("attempt.completed", data), ("run.completed", {})]


def _fail(before: State, inputs: Mapping[str, Any]) -> tuple[State, Events]:
    epoch, reason, refs = inputs["epoch"], inputs["reason"], inputs["evidence"]
    ended = _end(before, epoch, "failed", reason=reason, evidence=refs)
    event = ("attempt.failed", {"epoch": epoch, "reason": reason, "evidence": refs})
    return _after_ending(before, ended, event)


def _interrupt(before: State, inputs: Mapping[str, Any]) -> tuple[State, Events]:
    cleanup = inputs["cleanup"]
    ended = _end(before, cleanup["epoch"], "interrupted", cleanup=cleanup)
    event = ("attempt.interrupted", {"epoch": cleanup["epoch"], "cleanup": cleanup})
    return _after_ending(before, ended, event)


def _after_ending(
    before: State, ended: State, event: tuple[str, dict[str, Any]]
) -> tuple[State, Events]:
    """Retry by re-queueing while the Budget lasts; a pending cancellation ends as cancelled."""
    attempts = [*before["attempts"][:-1], ended]
    after = {k: v for k, v in before.items() if k != "cancel_requested"}
    after["attempts"] = attempts
    request = before.get("cancel_requested")
    if request is not None:
        after.update(status="cancelled", cancel_reason=request["reason"])
        return after, [event, ("run.cancelled", {"reason": request["reason"]})]
    if len(attempts) < before["budget"]["max_attempts"]:
        after["status"] = "queued"
        return after, [event]
    after["status"] = "exhausted"
    return after, [event, ("run.exhausted", {"attempts": len(attempts)})]


def _request_cancel(before: State, inputs: Mapping[str, Any]) -> tuple[State, Events]:
    _refuse_pending(before)
    reason = inputs["reason"]
    if before["status"] == "queued":  # nothing runs: the request is the cancellation
        after = {**before, "status": "cancelled", "cancel_reason": reason}
        return after, [("run.cancelled", {"reason": reason})]
    after = {**before, "cancel_requested": {"reason": reason}}
    epoch = before["attempts"][-1]["epoch"]
    return after, [("run.cancel-requested", {"epoch": epoch, "reason": reason})]


def _cancel(before: State, inputs: Mapping[str, Any]) -> tuple[State, Events]:
    cleanup = inputs.get("cleanup")
    request = before.get("cancel_requested")
    reason = request["reason"] if request is not None else inputs["reason"]
    if before["status"] == "queued":
        if cleanup is not None:
            raise StaleAttemptError(
                f"Run {before['run_id']} has no running attempt {cleanup['epoch']} to clean up",
                run_id=before["run_id"],
            )
        after = {**before, "status": "cancelled", "cancel_reason": reason}
        return after, [("run.cancelled", {"reason": reason})]
    if cleanup is None:
        raise AttemptActiveError(
            f"Run {before['run_id']} has attempt {before['attempts'][-1]['attempt_id']} running:"
            " cancel it with a cleanup confirmation, or request cancellation",
            run_id=before["run_id"],
        )
    ended = _end(before, cleanup["epoch"], "interrupted", cleanup=cleanup)
    after = {k: v for k, v in before.items() if k != "cancel_requested"}
    after.update(
        status="cancelled", cancel_reason=reason, attempts=[*before["attempts"][:-1], ended]
    )
    event = ("attempt.interrupted", {"epoch": cleanup["epoch"], "cleanup": cleanup})
    return after, [event, ("run.cancelled", {"reason": reason})]


def _refuse_pending(before: State) -> None:
    request = before.get("cancel_requested")
    if request is not None:
        raise CancelPendingError(
            f"Run {before['run_id']} has a pending cancellation ({request['reason']})",
            run_id=before["run_id"],
        )


def _end(before: State, epoch: int, state: str, **fields: Any) -> State:
    """The running Attempt of ``epoch``, ended; StaleAttemptError if that is not what runs."""
    attempts = before["attempts"]
    current = attempts[-1] if attempts and attempts[-1]["state"] == "running" else None
    if current is None or current["epoch"] != epoch:
        now = f"attempt {current['epoch']} is running" if current else "no attempt is running"
        raise StaleAttemptError(
            f"Run {before['run_id']}: attempt {epoch} is not the running attempt ({now})",
            run_id=before["run_id"],
        )
    base = {k: current[k] for k in ("attempt_id", "epoch", "worker")}
    return {**base, "state": state, **fields}


_STEPS: dict[str, Callable[[State, Mapping[str, Any]], tuple[State, Events]]] = {
    "claim": _claim,
    "complete": _complete,
    "fail": _fail,
    "interrupt": _interrupt,
    "request_cancel": _request_cancel,
    "cancel": _cancel,
}


# --- the API ---------------------------------------------------------------------------------


class Execution:
    """Run and Attempt commands over a :class:`Journal` (writable, or read-only for reads)."""

    def __init__(self, journal: Journal) -> None:
        if not isinstance(journal, Journal):
            raise InvalidInputError("Execution needs a Journal")
        self.journal = journal

    # commands

    def submit(
        self,
        *,
        command_id: str = MISSING,
        run_id: str = MISSING,
        pins: Mapping[str, str] = MISSING,
        budget: Mapping[str, int] = MISSING,
        **unknown: Any,
    ) -> CommandResult:
        """A new queued Run with fixed pins and Budget (RunExistsError if it exists)."""
        fields = {"run_id": run_id, "pins": pins, "budget": budget}
        return self._command("submit", command_id, None, fields, unknown)

    def claim(
        self,
        *,
        command_id: str = MISSING,
        run_id: str = MISSING,
        expected_version: int = MISSING,
        worker: str = MISSING,
        **unknown: Any,
    ) -> ClaimResult:
        """Open attempt ``<run_id>/<n>`` for ``worker``. A replayed claim is history, not
        ownership: never launch work from it; re-read the Run instead."""
        result = self._command(
            "claim", command_id, expected_version, {"run_id": run_id, "worker": worker}, unknown
        )
        return ClaimResult(result.run, result.replayed, result.run.attempts[-1])

    def complete(
        self,
        *,
        command_id: str = MISSING,
        run_id: str = MISSING,
        expected_version: int = MISSING,
        epoch: int = MISSING,
        evidence: list[str] | tuple[str, ...] = MISSING,
        **unknown: Any,
    ) -> CommandResult:
        """The owner of attempt ``epoch`` ran the recipe to its end: the Run completes."""
        fields = {"run_id": run_id, "epoch": epoch, "evidence": evidence}
        return self._command("complete", command_id, expected_version, fields, unknown)

    def fail(
        self,
        *,
        command_id: str = MISSING,
        run_id: str = MISSING,
        expected_version: int = MISSING,
        epoch: int = MISSING,
        reason: str = MISSING,
        evidence: list[str] | tuple[str, ...] = MISSING,
        **unknown: Any,
    ) -> CommandResult:
        """The owner of attempt ``epoch`` reports failure: queued while the Budget lasts, else
        exhausted; cancelled (with the pending reason) if a cancellation is pending."""
        fields = {"run_id": run_id, "epoch": epoch, "reason": reason, "evidence": evidence}
        return self._command("fail", command_id, expected_version, fields, unknown)

    def interrupt(
        self,
        *,
        command_id: str = MISSING,
        run_id: str = MISSING,
        expected_version: int = MISSING,
        cleanup: Mapping[str, Any] = MISSING,
        **unknown: Any,
    ) -> CommandResult:
        """A trusted cleanup confirmation ends attempt ``cleanup.epoch``; then as ``fail``."""
        fields = {"run_id": run_id, "cleanup": cleanup}
        return self._command("interrupt", command_id, expected_version, fields, unknown)

    def request_cancel(
        self,
        *,
        command_id: str = MISSING,
        run_id: str = MISSING,
        expected_version: int = MISSING,
        reason: str = MISSING,
        **unknown: Any,
    ) -> CommandResult:
        """Durable cancellation: a running Run keeps it until it ends as cancelled; a queued
        Run is cancelled at once. Never replaced (CancelPendingError)."""
        fields = {"run_id": run_id, "reason": reason}
        return self._command("request_cancel", command_id, expected_version, fields, unknown)

    def cancel(
        self,
        *,
        command_id: str = MISSING,
        run_id: str = MISSING,
        expected_version: int = MISSING,
        reason: str = MISSING,
        cleanup: Mapping[str, Any] | None = None,
        **unknown: Any,
    ) -> CommandResult:
        """Cancel now: a queued Run, or a running one with the cleanup of its attempt. A
        pending request's own reason is kept."""
        fields = {"run_id": run_id, "reason": reason, "cleanup": cleanup}
        return self._command("cancel", command_id, expected_version, fields, unknown)

    # reads

    def read(self, run_id: str) -> Run | None:
        """The Run as stored now, re-validated (CorruptRunError), or None if never submitted."""
        check_run_id(run_id)
        stored = self.journal.load(run_aggregate_id(run_id))
        return None if stored is None else run_from_stored(stored)

    def history(self, run_id: str, after_sequence: int = 0, limit: int = 100) -> list[Event]:
        """The Run's events in commit order ([] if never submitted); the journal checks paging."""
        check_run_id(run_id)
        return self.journal.history(run_aggregate_id(run_id), after_sequence, limit)

    # one command

    def _command(
        self,
        op: str,
        command_id: Any,
        expected_version: Any,
        fields: dict[str, Any],
        unknown: dict[str, Any],
    ) -> CommandResult:
        given = {k: v for k, v in fields.items() if v is not MISSING}
        given.update(unknown)
        inputs = validate_run_command(op, given)
        _check_envelope(op, command_id, expected_version, inputs["run_id"])
        aggregate_id = run_aggregate_id(inputs["run_id"])
        outcome = self.journal.execute(
            command_id=command_id,
            payload={"op": op, **inputs},
            expected={aggregate_id: None if op == "submit" else expected_version},
            decide=lambda loaded: [decide_run(op, loaded[aggregate_id], inputs)],
        )
        stored = outcome.states[aggregate_id]
        if outcome.replayed:  # a receipt is a stored record too: re-validate it
            return CommandResult(run_from_stored(stored), True)
        return CommandResult(run_view(stored.state, stored.version), False)


def _check_envelope(op: str, command_id: Any, expected_version: Any, run_id: str) -> None:
    try:
        identifier(command_id, "command_id")
        if op != "submit":
            integer(expected_version, "expected_version", 0, MAX_SAFE_INTEGER)
    except Invalid as exc:
        raise InvalidInputError(str(exc), run_id=run_id) from None
