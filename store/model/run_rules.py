"""Field rules of Runs and their commands: limits, identifiers, digests, text, strict records.

One set of rules checks both what a caller passes in (InvalidInputError) and what a stored Run
holds (CorruptRunError): a rule raises the private ``Invalid`` and each caller maps it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from store.errors import InvalidInputError
from store.names import ACTOR_CHARS, ID_CHARS, spelled
from store.records import dataclass

MAX_SAFE_INTEGER = 2**53 - 1
OPERATIONS = ("submit", "claim", "complete", "fail", "interrupt", "request_cancel", "cancel")


@dataclass(frozen=True)
class ExecutionLimits:
    """The seed's frozen limits; readable as attributes or as ``EXECUTION_LIMITS["name"]``."""

    max_attempts: int = 20
    max_text_length: int = 500  # UTF-16 code units, counted as the seed counts them
    max_id_length: int = 128
    # "run:<run_id>" (the aggregate id) and "<run_id>/<epoch>" (an attempt id) fit in 128.
    max_run_id_length: int = 124
    max_expected_version: int = MAX_SAFE_INTEGER

    def __getitem__(self, name: str) -> int:
        if name not in self.keys():
            raise KeyError(name)
        return int(getattr(self, name))

    def keys(self) -> tuple[str, ...]:
        from dataclasses import fields  # here: reading a limit never needs dataclasses

        return tuple(f.name for f in fields(self))


EXECUTION_LIMITS = ExecutionLimits()

# The ids' alphabets (store.names); DESIGN §5 names who confirmed a cleanup
# "<operator>@<node>": the seed's alphabet plus "@".
_ID = ID_CHARS
_CONFIRMER = ACTOR_CHARS
_DIGEST_PREFIX = "sha256:"
_HEX = frozenset("0123456789abcdef")
_RECORD_TYPES = (dict, MappingProxyType)


class Invalid(ValueError):
    """A value breaks a field rule; the message names the field."""


# --- single values ---------------------------------------------------------------------------


def identifier(
    value: Any,
    name: str,
    max_length: int = EXECUTION_LIMITS.max_id_length,
    chars: frozenset[str] = _ID,
) -> str:
    if type(value) is not str or len(value) > max_length or not spelled(value, chars):
        extra = " @" if "@" in chars else ""
        raise Invalid(
            f"{name} must be 1–{max_length} characters of A-Z a-z 0-9 . _ : /{extra} -,"
            " starting with a letter or digit"
        )
    return value


def confirmer(value: Any, name: str) -> str:
    return identifier(value, name, chars=_CONFIRMER)


def run_id_rule(value: Any, name: str = "run_id") -> str:
    return identifier(value, name, EXECUTION_LIMITS.max_run_id_length)


def digest(value: Any, name: str) -> str:
    if (
        type(value) is not str
        or len(value) != len(_DIGEST_PREFIX) + 64
        or not value.startswith(_DIGEST_PREFIX)
        or not _HEX.issuperset(value[len(_DIGEST_PREFIX) :])
    ):
        raise Invalid(f"{name} must be sha256: followed by 64 lowercase hex characters")
    return value


def text(value: Any, name: str) -> str:
    """Non-blank text of at most 500 UTF-16 code units (no lone surrogates: it must store)."""
    limit = EXECUTION_LIMITS.max_text_length
    if type(value) is not str or not value.strip():
        raise Invalid(f"{name} must be non-empty text")
    try:
        units = len(value.encode("utf-16-le")) // 2
    except UnicodeEncodeError:
        raise Invalid(f"{name} must be valid Unicode text") from None
    if units > limit:
        raise Invalid(f"{name} must be at most {limit} UTF-16 code units")
    return value


def integer(value: Any, name: str, low: int, high: int) -> int:
    if type(value) is not int or not low <= value <= high:
        raise Invalid(f"{name} must be an integer from {low} to {high}")
    return value


def epoch_rule(value: Any, name: str = "epoch") -> int:
    return integer(value, name, 1, EXECUTION_LIMITS.max_attempts)


# --- records ---------------------------------------------------------------------------------


def keys(*names: str) -> frozenset[str]:
    return frozenset(names)


NO_KEYS: frozenset[str] = frozenset()


def record(
    value: Any, name: str, required: frozenset[str], optional: frozenset[str] = NO_KEYS
) -> Mapping[str, Any]:
    """A plain mapping with exactly the ``required`` keys and perhaps some ``optional`` ones."""
    if type(value) not in _RECORD_TYPES:
        raise Invalid(f"{name} must be a plain object")
    checked: Mapping[str, Any] = value  # a dict or mappingproxy (its keys are checked below)
    present = checked.keys()
    if present == required or (required <= present and present <= required | optional):
        return checked  # the common case, checked with set operations alone
    unknown = sorted(str(k) for k in present - required - optional)
    if unknown:
        raise Invalid(f"{name} has unknown field(s) {', '.join(unknown)}")
    raise Invalid(f"{name} is missing {', '.join(sorted(required - present))}")


_PINS = keys("candidate_digest", "recipe_revision", "scenario_revision")
_BUDGET = keys("max_attempts", "attempt_timeout_ms")
_CLEANUP = keys("epoch", "confirmed_by", "method")


def pins(value: Any, name: str = "pins") -> dict[str, str]:
    rec = record(value, name, _PINS)
    return {
        "candidate_digest": digest(rec["candidate_digest"], f"{name}.candidate_digest"),
        "recipe_revision": identifier(rec["recipe_revision"], f"{name}.recipe_revision"),
        "scenario_revision": identifier(rec["scenario_revision"], f"{name}.scenario_revision"),
    }


def budget(value: Any, name: str = "budget") -> dict[str, int]:
    rec = record(value, name, _BUDGET)
    return {
        "max_attempts": integer(
            rec["max_attempts"], f"{name}.max_attempts", 1, EXECUTION_LIMITS.max_attempts
        ),
        "attempt_timeout_ms": integer(
            rec["attempt_timeout_ms"], f"{name}.attempt_timeout_ms", 1, MAX_SAFE_INTEGER
        ),
    }


def evidence(value: Any, name: str = "evidence") -> list[str]:
    if type(value) not in (list, tuple):
        raise Invalid(f"{name} must be a list of references")
    refs = [identifier(ref, f"{name}[{i}]") for i, ref in enumerate(value)]
    if len(set(refs)) != len(refs):
        raise Invalid(f"{name} must not repeat a reference")
    return refs


def cleanup(value: Any, name: str = "cleanup") -> dict[str, Any]:
    rec = record(value, name, _CLEANUP)
    return {
        "epoch": epoch_rule(rec["epoch"], f"{name}.epoch"),
        "confirmed_by": confirmer(rec["confirmed_by"], f"{name}.confirmed_by"),
        "method": text(rec["method"], f"{name}.method"),
    }


# --- command inputs --------------------------------------------------------------------------

Rule = Callable[[Any], Any]

_FIELDS: dict[str, dict[str, Rule]] = {
    "submit": {"run_id": run_id_rule, "pins": pins, "budget": budget},
    "claim": {"run_id": run_id_rule, "worker": lambda v: identifier(v, "worker")},
    "complete": {"run_id": run_id_rule, "epoch": epoch_rule, "evidence": evidence},
    "fail": {
        "run_id": run_id_rule,
        "epoch": epoch_rule,
        "reason": lambda v: text(v, "reason"),
        "evidence": evidence,
    },
    "interrupt": {"run_id": run_id_rule, "cleanup": cleanup},
    "request_cancel": {"run_id": run_id_rule, "reason": lambda v: text(v, "reason")},
    "cancel": {"run_id": run_id_rule, "reason": lambda v: text(v, "reason"), "cleanup": cleanup},
}
_REQUIRED = {
    op: frozenset(rules) - (keys("cleanup") if op == "cancel" else NO_KEYS)
    for op, rules in _FIELDS.items()
}
_OPTIONAL = {"cancel": keys("cleanup")}


def validate_run_command(op: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """Check a command's fields (without command_id / expected_version); return a plain copy.

    Exactly the documented keys; for ``cancel`` only, ``cleanup`` may be absent or None (both
    mean "no cleanup" and are stored as absent, so they replay alike).
    """
    if op not in _FIELDS:
        raise InvalidInputError(f"unknown Run operation {op!r}")
    rules = _FIELDS[op]
    try:
        given = record(inputs, f"{op} input", _REQUIRED[op], _OPTIONAL.get(op, NO_KEYS))
        return {key: rules[key](v) for key, v in given.items() if not _absent(op, key, v)}
    except Invalid as exc:
        run_id = inputs.get("run_id") if type(inputs) in _RECORD_TYPES else None
        raise InvalidInputError(str(exc), run_id=_safe_run_id(run_id)) from None


def _absent(op: str, key: str, value: Any) -> bool:
    """cancel's cleanup=None means no cleanup: stored as absent, so both spellings replay alike."""
    return value is None and key == "cleanup" and op == "cancel"


def check_run_id(run_id: Any) -> str:
    try:
        return run_id_rule(run_id)
    except Invalid as exc:
        raise InvalidInputError(str(exc)) from None


def _safe_run_id(value: Any) -> str | None:
    try:
        return run_id_rule(value)
    except Invalid:
        return None
