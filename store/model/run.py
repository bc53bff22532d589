"""The Run model: frozen Run/Attempt views, the invariants of a stored Run, and the event fold.

A stored Run (the JSON under ``run:<run_id>``) is::

    {"run_id", "pins": {...}, "budget": {...}, "status", "attempts": [...],
     "cancel_requested": {"reason"}  (optional; only while running),
     "cancel_reason": str            (present exactly when cancelled)}

and each Attempt holds ``attempt_id, epoch, worker, state`` plus, by state: completed →
``evidence``; failed → ``reason, evidence``; interrupted → ``cleanup``; running → nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from json.encoder import encode_basestring as _quote
from types import MappingProxyType
from typing import Any

from store.canonical import canonical_json
from store.errors import CorruptRunError, DecisionError
from store.journal.api import Event, Stored
from store.journal.core import register_fold
from store.model import run_rules as rules
from store.model.run_rules import EXECUTION_LIMITS, Invalid
from store.records import dataclass
from store.statuses import RUN_STATUSES, TERMINAL_STATUSES, RunStatus

ATTEMPT_STATES = ("running", "completed", "failed", "interrupted")
_ATTEMPT_BASE = rules.keys("attempt_id", "epoch", "worker", "state")
_ATTEMPT_KEYS = {
    "running": _ATTEMPT_BASE,
    "completed": _ATTEMPT_BASE | {"evidence"},
    "failed": _ATTEMPT_BASE | {"reason", "evidence"},
    "interrupted": _ATTEMPT_BASE | {"cleanup"},
}
_RUN_KEYS = rules.keys("run_id", "pins", "budget", "status", "attempts")
_RUN_OPTIONAL = rules.keys("cancel_requested", "cancel_reason")
_REASON = rules.keys("reason")
_UNSEEN = object()  # matches nothing by identity
_NOTHING_CHECKED: Mapping[str, Any] = MappingProxyType({})


def run_aggregate_id(run_id: str) -> str:
    return "run:" + run_id


def attempt_id_for(run_id: str, epoch: int) -> str:
    return f"{run_id}/{epoch}"


# --- frozen views ----------------------------------------------------------------------------


def _frozen(mapping: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    return None if mapping is None else MappingProxyType(dict(mapping))


class FrozenList(tuple[Any, ...]):
    """An immutable sequence that compares equal to a list with the same items.

    Callers pass lists (``evidence=[...]``) and naturally compare with lists; the view stays
    frozen all the same.
    """

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, list):
            return tuple.__eq__(self, tuple(other))
        return tuple.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = tuple.__hash__


@dataclass(frozen=True)
class Attempt:
    attempt_id: str
    epoch: int
    worker: str
    state: str  # running | completed | failed | interrupted
    evidence: tuple[str, ...] = ()
    reason: str | None = None
    cleanup: Mapping[str, Any] | None = None  # {epoch, confirmed_by, method}

    def to_json(self) -> dict[str, Any]:
        return {
            "attempt_id": self.attempt_id,
            "epoch": self.epoch,
            "worker": self.worker,
            "state": self.state,
            "evidence": list(self.evidence),
            "reason": self.reason,
            "cleanup": None if self.cleanup is None else dict(self.cleanup),
        }


@dataclass(frozen=True)
class Run:
    run_id: str
    pins: Mapping[str, str]
    budget: Mapping[str, int]
    status: str  # queued | running | completed | exhausted | cancelled
    attempts: tuple[Attempt, ...]
    cancel_requested: Mapping[str, str] | None
    cancel_reason: str | None
    version: int

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    @property
    def running_attempt(self) -> Attempt | None:
        """The Attempt that is running now, if any (always the last one)."""
        if self.attempts and self.attempts[-1].state == "running":
            return self.attempts[-1]
        return None

    def runs_attempt(self, epoch: int) -> bool:
        """Attempt ``epoch`` is the one running now."""
        attempt = self.running_attempt
        return attempt is not None and attempt.epoch == epoch

    @property
    def attempts_left(self) -> int:
        return int(self.budget["max_attempts"]) - len(self.attempts)

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "pins": dict(self.pins),
            "budget": dict(self.budget),
            "status": self.status,
            "attempts": [a.to_json() for a in self.attempts],
            "cancel_requested": _plain(self.cancel_requested),
            "cancel_reason": self.cancel_reason,
            "version": self.version,
        }


def _plain(mapping: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return None if mapping is None else dict(mapping)


def _attempt_view(state: Mapping[str, Any]) -> Attempt:
    return Attempt(
        attempt_id=state["attempt_id"],
        epoch=state["epoch"],
        worker=state["worker"],
        state=state["state"],
        evidence=FrozenList(state.get("evidence", ())),
        reason=state.get("reason"),
        cleanup=_frozen(state.get("cleanup")),
    )


def run_view(state: Mapping[str, Any], version: int) -> Run:
    """A frozen Run over a state that already passed check_run."""
    return Run(
        run_id=state["run_id"],
        pins=_frozen(state["pins"]),  # type: ignore[arg-type]
        budget=_frozen(state["budget"]),  # type: ignore[arg-type]
        status=state["status"],
        attempts=FrozenList(_attempt_view(a) for a in state["attempts"]),
        cancel_requested=_frozen(state.get("cancel_requested")),
        cancel_reason=state.get("cancel_reason"),
        version=version,
    )


def run_from_stored(stored: Stored) -> Run:
    """The Run a stored record holds; CorruptRunError if it breaks any invariant (or is null)."""
    run_id = stored.aggregate_id.partition(":")[2]
    if type(stored.version) is not int or stored.version < 1:
        raise CorruptRunError(f"stored Run {run_id} has a bad version", run_id=run_id)
    check_run(stored.state, run_id=run_id)
    return run_view(stored.state, stored.version)


def run_text(state: Mapping[str, Any]) -> str:
    """``canonical_json(state)`` of a state that passed check_run, ≈ 3× faster: its keys are
    the known ones and its values exact str and int (the rules check exact types), so formats
    in sorted key order give the same bytes (tests/unit/test_canonical.py)."""
    pins, budget = state["pins"], state["budget"]
    if not _plain_records(state):  # a mappingproxy passes the rules but is no JSON: refused
        return canonical_json(state)
    parts = [
        f'{{"attempts":[{",".join(map(_attempt_text, state["attempts"]))}],'
        f'"budget":{{"attempt_timeout_ms":{budget["attempt_timeout_ms"]},'
        f'"max_attempts":{budget["max_attempts"]}}}'
    ]
    if "cancel_reason" in state:
        parts.append(f',"cancel_reason":{_quote(state["cancel_reason"])}')
    if "cancel_requested" in state:
        parts.append(
            f',"cancel_requested":{{"reason":{_quote(state["cancel_requested"]["reason"])}}}'
        )
    parts.append(
        f',"pins":{{"candidate_digest":{_quote(pins["candidate_digest"])},'
        f'"recipe_revision":{_quote(pins["recipe_revision"])},'
        f'"scenario_revision":{_quote(pins["scenario_revision"])}}},'
        f'"run_id":{_quote(state["run_id"])},"status":{_quote(state["status"])}}}'
    )
    return "".join(parts)


def _plain_records(state: Mapping[str, Any]) -> bool:
    """Every record in a checked Run is a dict (the rules also let a mappingproxy through)."""
    if type(state["pins"]) is not dict or type(state["budget"]) is not dict:
        return False
    if "cancel_requested" in state and type(state["cancel_requested"]) is not dict:
        return False
    return all(type(a["cleanup"]) is dict for a in state["attempts"] if "cleanup" in a)


def _attempt_text(attempt: Mapping[str, Any]) -> str:
    text = f'{{"attempt_id":{_quote(attempt["attempt_id"])}'
    if "cleanup" in attempt:
        cleanup = attempt["cleanup"]
        text += (
            f',"cleanup":{{"confirmed_by":{_quote(cleanup["confirmed_by"])},'
            f'"epoch":{cleanup["epoch"]},"method":{_quote(cleanup["method"])}}}'
        )
    text += f',"epoch":{attempt["epoch"]}'
    if "evidence" in attempt:
        text += f',"evidence":[{",".join(map(_quote, attempt["evidence"]))}]'
    if "reason" in attempt:
        text += f',"reason":{_quote(attempt["reason"])}'
    return text + f',"state":{_quote(attempt["state"])},"worker":{_quote(attempt["worker"])}}}'


# --- invariants ------------------------------------------------------------------------------


def check_run(
    state: Any, *, run_id: str | None = None, checked: Mapping[str, Any] | None = None
) -> None:
    """Raise CorruptRunError unless ``state`` is a Run that keeps invariants 1–4 and 7.

    ``checked``: a state that already passed, from which ``state`` was built; parts of it that
    ``state`` shares *by identity* (pins, budget, settled attempts) are not checked twice.
    """
    try:
        _check_state(state, run_id, checked)
    except Invalid as exc:
        shown = run_id or (state.get("run_id") if isinstance(state, dict) else None)
        shown = shown if isinstance(shown, str) else None
        raise CorruptRunError(
            f"stored Run {shown or '?'} is corrupt: {exc}", run_id=shown
        ) from None


# The text of each Run's state last seen to pass check_run, by run_id. check_run is a function of
# the parsed value and the run_id alone, and a text parses to one value: a stored text equal to
# one that passed needs no second look. A command's new state is remembered as it is written
# (``run_text``; a checked Run reads back as a value that passes, test_canonical.py), so the
# next command on that Run parses it but does not check it again. The oldest go first.
_PASSED: dict[str, str] = {}
_PASSED_LIMIT = 4096


def check_stored_run(stored: Stored, run_id: str) -> None:
    """check_run of a loaded Run, skipped when its text is the one last seen to pass."""
    text = stored.text
    if text is None or _PASSED.get(run_id) != text:
        check_run(stored.state, run_id=run_id)
        if text is not None:
            passed_run(run_id, text)


def passed_run(run_id: str, text: str) -> None:
    """``text`` is the canonical JSON of a Run of ``run_id`` that passed check_run."""
    if _PASSED.pop(run_id, None) is None and len(_PASSED) >= _PASSED_LIMIT:
        with contextlib.suppress(KeyError, RuntimeError, StopIteration):  # another thread's
            del _PASSED[next(iter(_PASSED))]  # the Run remembered longest ago
    _PASSED[run_id] = text


def _check_state(state: Any, run_id: str | None, checked: Mapping[str, Any] | None) -> None:
    if state is None:
        raise Invalid("the record is null")
    run = rules.record(state, "run", _RUN_KEYS, _RUN_OPTIONAL)
    known = checked or _NOTHING_CHECKED
    rid = run["run_id"]
    if rid is not known.get("run_id", _UNSEEN):
        rules.run_id_rule(rid)
    if run_id is not None and rid != run_id:
        raise Invalid(f"run_id {rid} is stored under run:{run_id}")
    if run["pins"] is not known.get("pins", _UNSEEN):
        rules.pins(run["pins"])
    if run["budget"] is not known.get("budget", _UNSEEN):
        rules.budget(run["budget"])
    limit = run["budget"]["max_attempts"]
    status = run["status"]
    if status not in RUN_STATUSES:
        raise Invalid(f"unknown status {status!r}")
    attempts = run["attempts"]
    if type(attempts) is not list or len(attempts) > limit:
        raise Invalid(f"attempts must be a list of at most {limit}")
    old = known.get("attempts", ())
    states = [
        a["state"] if i < len(old) and a is old[i] else _check_attempt(a, rid, i + 1)
        for i, a in enumerate(attempts)
    ]
    if any(s in ("running", "completed") for s in states[:-1]):
        raise Invalid("only the last attempt may be running or completed")
    _check_status(status, states, limit)
    _check_cancel_fields(run, status)


def _check_attempt(value: Any, run_id: str, epoch: int) -> str:
    name = f"attempts[{epoch - 1}]"
    state = value.get("state") if type(value) is dict else None
    if state not in _ATTEMPT_KEYS:
        raise Invalid(f"{name} has no valid state")
    rec = rules.record(value, name, _ATTEMPT_KEYS[state])
    if rec["epoch"] != epoch or type(rec["epoch"]) is not int:
        raise Invalid(f"{name} must have epoch {epoch}")
    if rec["attempt_id"] != attempt_id_for(run_id, epoch):
        raise Invalid(f"{name} must have id {attempt_id_for(run_id, epoch)}")
    rules.identifier(rec["worker"], f"{name}.worker")
    if "evidence" in rec:
        rules.evidence(rec["evidence"], f"{name}.evidence")
    if "reason" in rec:
        rules.text(rec["reason"], f"{name}.reason")
    if "cleanup" in rec and rules.cleanup(rec["cleanup"], f"{name}.cleanup")["epoch"] != epoch:
        raise Invalid(f"{name}.cleanup must confirm epoch {epoch}")
    checked: str = state  # one of _ATTEMPT_KEYS
    return checked


def _check_status(status: str, states: list[str], limit: int) -> None:
    last = states[-1] if states else None
    if status == "queued" and (last in ("running", "completed") or len(states) >= limit):
        raise Invalid("a queued Run has no running attempt and at least one attempt left")
    if status == "running" and last != "running":
        raise Invalid("a running Run's last attempt must be running")
    if status == "completed" and last != "completed":
        raise Invalid("a completed Run's last attempt must be completed")
    if status == "exhausted" and (len(states) != limit or last in ("running", "completed")):
        raise Invalid("an exhausted Run used every budgeted attempt and none completed")
    if status == "cancelled" and last in ("running", "completed"):
        raise Invalid("a cancelled Run has no running or completed attempt")


def _check_cancel_fields(run: Mapping[str, Any], status: str) -> None:
    if ("cancel_reason" in run) != (status == "cancelled"):
        raise Invalid("cancel_reason is present exactly when the Run is cancelled")
    if "cancel_reason" in run:
        rules.text(run["cancel_reason"], "cancel_reason")
    if "cancel_requested" in run:
        if status != "running":
            raise Invalid("cancel_requested is only allowed while the Run is running")
        request = rules.record(run["cancel_requested"], "cancel_requested", _REASON)
        rules.text(request["reason"], "cancel_requested.reason")


def check_transition(before: Mapping[str, Any] | None, after: Mapping[str, Any]) -> None:
    """Raise DecisionError unless ``before`` → ``after`` keeps invariants 1–7.

    Both states must already pass check_run.
    """
    try:
        _check_transition(before, after)
    except Invalid as exc:
        run_id = after.get("run_id") if isinstance(after, Mapping) else None
        raise DecisionError(f"transition breaks an invariant: {exc}", run_id=run_id) from None


def _check_transition(before: Mapping[str, Any] | None, after: Mapping[str, Any]) -> None:
    if before is None:
        if after["status"] != "queued" or after["attempts"] or len(after) != len(_RUN_KEYS):
            raise Invalid("a new Run is queued, with no attempt and no cancellation")
        return
    if before == after:
        raise Invalid("a command must change the Run")
    if before["status"] in TERMINAL_STATUSES:
        raise Invalid("a terminal Run never changes")
    for key in ("run_id", "pins", "budget"):
        if before[key] != after[key]:
            raise Invalid(f"{key} never changes after submit")
    _check_attempts_grow(before["attempts"], after["attempts"])
    request = before.get("cancel_requested")
    if request is not None:
        if after.get("cancel_requested", request) != request:
            raise Invalid("a pending cancellation is never replaced")
        if "cancel_requested" not in after and after.get("cancel_reason") != request["reason"]:
            raise Invalid("a pending cancellation ends only as cancelled with its own reason")
    elif "cancel_requested" in after and after["attempts"] != before["attempts"]:
        raise Invalid("requesting cancellation changes no attempt")


def _check_attempts_grow(before: list[Any], after: list[Any]) -> None:
    if len(after) < len(before) or len(after) > len(before) + 1:
        raise Invalid("attempts are only ever added, one at a time")
    for old, new in zip(before, after, strict=False):
        if old == new:
            continue
        if old["state"] != "running" or new["worker"] != old["worker"]:
            raise Invalid("settled attempts are never rewritten; an ending keeps the worker")
    if len(after) > len(before):
        if before and before[-1]["state"] == "running":
            raise Invalid("a claim needs no attempt running")
        if after[-1]["state"] != "running":
            raise Invalid("a claim adds a running attempt")


# --- the fold ---------------------------------------------------------------------------------


def fold_run(events: Iterable[Event | tuple[str, Mapping[str, Any]]]) -> dict[str, Any] | None:
    """The Run state a Run's events imply (None for no events); CorruptRunError if they don't fold.

    Used by checks (``refine check``, tests): Execution itself reads stored state, not events.
    """
    state: dict[str, Any] | None = None
    for event in events:
        type_, data = (event.type, event.data) if isinstance(event, Event) else event
        try:
            state = _apply(state, type_, data)
        except (KeyError, IndexError, TypeError, Invalid) as exc:
            run_id = data.get("run_id") if isinstance(data, Mapping) else None
            raise CorruptRunError(f"event {type_} does not fold: {exc!r}", run_id=run_id) from None
    return state


def _apply(state: dict[str, Any] | None, type_: str, data: Mapping[str, Any]) -> dict[str, Any]:
    if type_ == "run.submitted":
        if state is not None:
            raise Invalid("submitted twice")
        return {
            "run_id": data["run_id"],
            "pins": dict(data["pins"]),
            "budget": dict(data["budget"]),
            "status": "queued",
            "attempts": [],
        }
    if state is None:
        raise Invalid("an event before run.submitted")
    state = {**state, "attempts": list(state["attempts"])}
    attempts = state["attempts"]
    if type_ == "attempt.claimed":
        attempts.append(
            {
                "attempt_id": data["attempt_id"],
                "epoch": data["epoch"],
                "worker": data["worker"],
                "state": "running",
            }
        )
        state["status"] = "running"
    elif type_ in _ENDINGS:
        ending, fields = _ENDINGS[type_]
        index = data["epoch"] - 1
        base = {k: attempts[index][k] for k in ("attempt_id", "epoch", "worker")}
        attempts[index] = {**base, "state": ending, **{k: data[k] for k in fields}}
        state["status"] = "completed" if ending == "completed" else "queued"
    elif type_ == "run.completed":
        state["status"] = "completed"
    elif type_ == "run.exhausted":
        state["status"] = "exhausted"
    elif type_ == "run.cancel-requested":
        state["cancel_requested"] = {"reason": data["reason"]}
    elif type_ == "run.cancelled":
        state.pop("cancel_requested", None)
        state["status"] = "cancelled"
        state["cancel_reason"] = data["reason"]
    else:
        raise Invalid(f"unknown event type {type_}")
    return state


_ENDINGS = {
    "attempt.completed": ("completed", ("evidence",)),
    "attempt.failed": ("failed", ("reason", "evidence")),
    "attempt.interrupted": ("interrupted", ("cleanup",)),
}

__all__ = [
    "ATTEMPT_STATES",
    "EXECUTION_LIMITS",
    "RUN_STATUSES",
    "TERMINAL_STATUSES",
    "Attempt",
    "Run",
    "RunStatus",
    "attempt_id_for",
    "check_run",
    "check_transition",
    "fold_run",
    "run_aggregate_id",
    "run_from_stored",
    "run_view",
]


register_fold("run", fold_run)
