"""The Goal model: the Goal record, the rules it keeps, its ids and the fold of its events.

Mirrors the Run side (run_rules / run_model): nothing here reads or writes a journal. The Goals
API (store.model.goals) decides commands with these pieces; ``refine check`` folds events with
``fold_goal``; readers validate what they load with ``goal_from_stored``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from json.encoder import encode_basestring as _quote
from types import MappingProxyType
from typing import Any, TypeVar

from store.canonical import canonical_json
from store.errors import CorruptGoalError, InvalidInputError
from store.journal.api import Event, Stored
from store.journal.core import register_fold
from store.model import run_rules
from store.model.run_rules import EXECUTION_LIMITS
from store.names import ACTOR_CHARS, ID_CHARS, spelled
from store.names import MAX_NAME as MAX_NAME  # re-exported: the model names its ids
from store.names import check_name as check_name
from store.records import dataclass
from store.statuses import GOAL_STATUSES as GOAL_STATUSES  # re-exported: defined once there
from store.statuses import TERMINAL_STATUSES as TERMINAL_STATUSES
from store.statuses import GoalStatus as GoalStatus

REDELIVERY = ("safe", "operator")
RECIPE_REVISION = "recipe-argv.1"
MAX_TITLE = 200
MAX_ROUND = 9999
# Goal and node ids also name files (nodes/<node>/...) and appear inside command ids, so they
# use the identifier alphabet without ':' and '/'. 64 + len(".r9999") keeps run ids short.
MAX_ARGV_ITEMS = 1000
MAX_RECIPE_CHARS = 65536
WORKER_CLEANUP_METHOD = "worker-stopped"
OPERATOR_CONFIRMED = "operator-confirmed"  # Confirm cleanup's default method
# An attempt whose recorded process is gone, ended by whoever noticed (a Stop that found it
# dead, the node's reconciliation): one method, so both read the same in every report.
PROCESS_GONE_METHOD = "process-exited"
# An attempt ended by a Stop's or a Cancel's signals (its grace kept, or SIGKILL after it), and
# the prefix of a node's own cleanup of a cancelled attempt ("<prefix> n1: SIGTERM to ...").
SIGNAL_METHODS = ("sigterm", "sigkill")
NODE_CANCEL_CLEANUP = "cancel cleanup by node"


def chosen_end(cleanup: Mapping[str, Any]) -> bool:
    """Whether an interrupted attempt's end was someone's choice (a Stop or a Cancel, carried
    out by the operator, the worker or its node), not something that befell it (its process
    found gone, an attempt confirmed lost, a launch that never happened). Those that befell it
    are failures where failures are counted (the dashboard's pulses); the chosen ones are not."""
    method = str(cleanup.get("method", ""))
    chosen = (*SIGNAL_METHODS, WORKER_CLEANUP_METHOD)
    return method in chosen or method.startswith(NODE_CANCEL_CLEANUP + " ")


_IDENT = ID_CHARS  # ids are checked as sets of characters (store.names.spelled)
_ACTOR = ACTOR_CHARS  # "<operator>@<node>"
# Patterns as text, compiled by `re` on first use (and cached there): a command that never
# checks one does not pay for compiling it at start-up (DESIGN §9, CLI start-up).
# Unicode categories Cc (C0, DEL, C1) and Cs (surrogates), as unicodedata.category names them;
# both are fixed by the standard, so the ranges never change.
_CONTROL = "[\x00-\x1f\x7f-\x9f\ud800-\udfff]"
# What str.encode() refuses (a lone surrogate: a str holds code points, never pairs) and NUL.
_UNSTORABLE = "[\x00\ud800-\udfff]"
_RUN_OF_GOAL = r"([A-Za-z0-9][A-Za-z0-9._-]{0,63})\.r([1-9][0-9]{0,3})"  # MAX_NAME
_GOAL_KEYS = frozenset(
    {
        "goal_id",
        "title",
        "node_id",
        "status",
        "round",
        "run_id",
        "recipe",
        "budget",
        "redelivery",
        "cancel_reason",
    }
)


def ended_by_words(method: str, by: str) -> str:
    """How an attempt's end was recorded, in the one wording every report and screen uses:
    ``sigterm by dana@n1``; an operator's confirmation reads ``confirmed by dana@n1``."""
    return f"confirmed by {by}" if method == OPERATOR_CONFIRMED else f"{method} by {by}"


def goal_aggregate_id(goal_id: str) -> str:
    return "goal:" + goal_id


def run_id_for(goal_id: str, round_: int) -> str:
    return f"{goal_id}.r{round_}"


def goal_id_of_run(run_id: str) -> str | None:
    """The Goal a Run id belongs to, or None when the id is not ``<goal_id>.r<round>``."""
    match = re.fullmatch(_RUN_OF_GOAL, run_id) if isinstance(run_id, str) else None
    return match.group(1) if match else None


def goal_id_of(aggregate_id: str) -> str | None:
    """The Goal an aggregate belongs to: ``goal:G`` and ``run:G.rN`` both name ``G``."""
    kind, _, key = aggregate_id.partition(":")
    if kind == "goal":
        return key
    return goal_id_of_run(key) if kind == "run" else None


def pins_for(recipe: Mapping[str, Any], node_id: str) -> dict[str, str]:
    import hashlib  # here, not at the top: reading Goals (a quick `refine goals`) never hashes

    digest = hashlib.sha256(canonical_json(dict(recipe)).encode()).hexdigest()
    return {
        "candidate_digest": "sha256:" + digest,
        "recipe_revision": RECIPE_REVISION,
        "scenario_revision": "node:" + node_id,
    }


# --- the Goal record -------------------------------------------------------------------------


@dataclass(frozen=True)
class Goal:
    goal_id: str
    title: str
    node_id: str
    status: str
    round: int
    run_id: str
    recipe: Mapping[str, Any]  # {"argv": tuple[str, ...], "cwd": str | None}
    budget: Mapping[str, int]  # {"max_attempts", "attempt_timeout_ms"}
    redelivery: str
    cancel_reason: str | None
    version: int

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    def to_json(self) -> dict[str, Any]:
        return {**self.state(), "version": self.version}

    def state(self) -> dict[str, Any]:
        """The stored state (plain JSON, without the version)."""
        return {
            "goal_id": self.goal_id,
            "title": self.title,
            "node_id": self.node_id,
            "status": self.status,
            "round": self.round,
            "run_id": self.run_id,
            "recipe": {"argv": list(self.recipe["argv"]), "cwd": self.recipe["cwd"]},
            "budget": dict(self.budget),
            "redelivery": self.redelivery,
            "cancel_reason": self.cancel_reason,
        }


@dataclass(frozen=True)
class CorruptGoal:
    """A stored Goal that breaks the rules, as a listing shows it (``Goals.list_readable``)."""

    goal_id: str
    version: int
    error: CorruptGoalError

    def to_json(self) -> dict[str, Any]:
        """The Goal keys a listing promises, unknown ones null, and what is wrong."""
        keys = ("title", "node_id", "round", "run_id", "redelivery", "cancel_reason")
        return {
            **dict.fromkeys(keys),
            "goal_id": self.goal_id,
            "status": "corrupt",
            "version": self.version,
            "corrupt": self.error.message,
        }


def goal_from_stored(stored: Stored) -> Goal:
    """Validate a stored Goal and freeze it; CorruptGoalError if it breaks any rule."""
    state = stored.state
    goal_id = state.get("goal_id") if isinstance(state, dict) else None
    try:
        goal = _goal_from_state(state, stored.version)
    except InvalidInputError as exc:
        raise CorruptGoalError(
            f"stored goal {stored.aggregate_id} is corrupt: {exc.message}",
            goal_id=goal_id if isinstance(goal_id, str) else None,
        ) from None
    if stored.aggregate_id != goal_aggregate_id(goal.goal_id):
        raise CorruptGoalError(
            f"stored goal {stored.aggregate_id} names goal {goal.goal_id}", goal_id=goal.goal_id
        )
    return goal


def _goal_from_state(state: Any, version: int) -> Goal:
    check_goal_state(state)
    return goal_view(state, version)


def check_goal_state(state: Any, checked: Mapping[str, Any] | None = None) -> None:
    """InvalidInputError unless ``state`` is a Goal record that keeps every Goal rule.

    ``checked``: a state that already passed, from which ``state`` was built; fields it shares
    *by identity* are not checked twice (the rules between fields always are). The first rule
    broken is the one a full check would name: a shared field passes either way.
    """
    if type(state) is not dict or set(state) != _GOAL_KEYS:
        raise InvalidInputError("a goal must be an object with exactly the goal fields")
    known = checked or _NOTHING_CHECKED
    goal_id, round_ = state["goal_id"], state["round"]
    if goal_id is not known.get("goal_id", _UNSEEN):
        check_name(goal_id, "goal_id")
    if round_ is not known.get("round", _UNSEEN):
        check_integer(round_, "round", 1, MAX_ROUND)
    status = state["status"]
    if status not in GOAL_STATUSES:
        raise InvalidInputError(f"unknown goal status {status!r}")
    if state["run_id"] != run_id_for(goal_id, round_):
        raise InvalidInputError("run_id must be <goal_id>.r<round>")
    reason = state["cancel_reason"]
    if (status == "cancelled") != (reason is not None):
        raise InvalidInputError("cancel_reason is present exactly when the goal is cancelled")
    if reason is not None and reason is not known.get("cancel_reason", _UNSEEN):
        check_reason(reason, "cancel_reason")
    for key, rule in _FIELD_RULES:
        if state[key] is not known.get(key, _UNSEEN):
            rule(state[key])


def goal_text(state: Mapping[str, Any]) -> str:
    """``canonical_json(state)`` of a state that passed check_goal_state, ≈ 4× faster: its keys
    are known and its values are exact str, int, None and a list of str (the rules check exact
    types), so one format in sorted key order gives the same bytes (test_canonical.py)."""
    recipe, budget, reason = state["recipe"], state["budget"], state["cancel_reason"]
    cwd = recipe["cwd"]
    return (
        f'{{"budget":{{"attempt_timeout_ms":{budget["attempt_timeout_ms"]},'
        f'"max_attempts":{budget["max_attempts"]}}},'
        f'"cancel_reason":{"null" if reason is None else _quote(reason)},'
        f'"goal_id":{_quote(state["goal_id"])},"node_id":{_quote(state["node_id"])},'
        f'"recipe":{{"argv":[{",".join(map(_quote, recipe["argv"]))}],'
        f'"cwd":{"null" if cwd is None else _quote(cwd)}}},'
        f'"redelivery":{_quote(state["redelivery"])},"round":{state["round"]},'
        f'"run_id":{_quote(state["run_id"])},"status":{_quote(state["status"])},'
        f'"title":{_quote(state["title"])}}}'
    )


def goal_view(state: Mapping[str, Any], version: int) -> Goal:
    """A frozen Goal over a state that already passed check_goal_state."""
    recipe = state["recipe"]
    return Goal(
        goal_id=state["goal_id"],
        title=state["title"],
        node_id=state["node_id"],
        status=state["status"],
        round=state["round"],
        run_id=state["run_id"],
        recipe=MappingProxyType({"argv": tuple(recipe["argv"]), "cwd": recipe["cwd"]}),
        budget=MappingProxyType(dict(state["budget"])),
        redelivery=state["redelivery"],
        cancel_reason=state["cancel_reason"],
        version=version,
    )


# --- input rules (InvalidInputError, raised before anything is touched) ----------------------


def check_identifier(value: Any, name: str) -> str:
    if type(value) is not str or len(value) > 128 or not spelled(value, _IDENT):
        raise InvalidInputError(
            f"{name} must be 1–128 characters of A-Z a-z 0-9 . _ : / -,"
            " starting with a letter or digit"
        )
    return value


def check_actor(value: Any) -> str | None:
    """Who did it (e.g. "dana@n1"), or None."""
    if value is not None and (
        type(value) is not str or len(value) > 128 or not spelled(value, _ACTOR)
    ):
        raise InvalidInputError("by must be 1–128 characters of A-Z a-z 0-9 . _ : / @ -")
    return value


def _storable(value: str) -> bool:
    """UTF-8 encodable (no lone surrogates) and without NUL: SQLite and exec accept it."""
    if value.isascii():  # the common case, without the pattern
        return "\x00" not in value
    return re.search(_UNSTORABLE, value) is None


def check_title(value: Any) -> str:
    if type(value) is not str or not value.strip() or len(value) > MAX_TITLE:
        raise InvalidInputError(f"title must be non-empty text of at most {MAX_TITLE} characters")
    if not value.isprintable() and re.search(_CONTROL, value):  # Cc and Cs are unprintable
        raise InvalidInputError("title must not contain control characters")
    return value


def check_redelivery(value: Any) -> str:
    if value not in REDELIVERY or type(value) is not str:
        raise InvalidInputError("redelivery must be 'safe' or 'operator'")
    return value


def check_integer(value: Any, name: str, low: int, high: int) -> int:
    return _field_rule(run_rules.integer, value, name, low, high)


def check_reason(value: Any, name: str = "reason") -> str:
    """Non-blank text of at most 500 UTF-16 code units: the seed's rule for reasons."""
    return _field_rule(run_rules.text, value, name)


T = TypeVar("T")


def _field_rule(rule: Callable[..., T], *args: Any) -> T:
    """One of the Run model's field rules, refusing as the Goal layer does."""
    try:
        return rule(*args)
    except run_rules.Invalid as exc:
        raise InvalidInputError(str(exc)) from None


def check_run_of(goal_id: str, run_id: Any) -> str:
    """A run id of this Goal: ``<goal_id>.r<round>``."""
    if type(run_id) is not str or goal_id_of_run(run_id) != goal_id:
        raise InvalidInputError(f"run_id must be a run of goal {goal_id}", goal_id=goal_id)
    return run_id


def check_epoch(value: Any) -> int:
    return check_integer(value, "epoch", 1, EXECUTION_LIMITS.max_attempts)


def check_recipe(value: Any) -> dict[str, Any]:
    if type(value) is not dict or set(value) != {"argv", "cwd"}:
        raise InvalidInputError("recipe must be an object with exactly argv and cwd")
    return {"argv": check_argv(value["argv"]), "cwd": check_cwd(value["cwd"])}


def check_argv(value: Any) -> list[str]:
    if type(value) not in (list, tuple) or not value or len(value) > MAX_ARGV_ITEMS:
        raise InvalidInputError(
            f"argv must be a non-empty list of at most {MAX_ARGV_ITEMS} strings"
        )
    # Joined, the strings are searched in one go (no character pairs up across a join).
    joined = "".join(value) if all(type(arg) is str for arg in value) else None
    if joined is None or not _storable(joined) or not value[0]:
        raise InvalidInputError(
            "argv must hold text strings (no NUL, no undecodable bytes), the first one non-empty"
        )
    if len(joined) > MAX_RECIPE_CHARS:
        raise InvalidInputError(f"argv must be at most {MAX_RECIPE_CHARS} characters in all")
    return list(value)


MAX_CWD = 4096  # PATH_MAX on Linux


def check_cwd(value: Any) -> str | None:
    if value is None:
        return None
    if type(value) is not str or not value or not _storable(value) or len(value) > MAX_CWD:
        raise InvalidInputError(
            f"cwd must be null or a path of 1–{MAX_CWD} characters (no NUL, no undecodable bytes)"
        )
    return value


def check_budget(value: Any) -> dict[str, int]:
    if type(value) is not dict or set(value) != {"max_attempts", "attempt_timeout_ms"}:
        raise InvalidInputError("budget must be an object with max_attempts, attempt_timeout_ms")
    return {
        "max_attempts": check_integer(
            value["max_attempts"], "max_attempts", 1, EXECUTION_LIMITS.max_attempts
        ),
        "attempt_timeout_ms": check_integer(
            value["attempt_timeout_ms"], "attempt_timeout_ms", 1, 2**53 - 1
        ),
    }


# The Goal fields check_goal_state checks on their own, in the order it checks them.
_FIELD_RULES: tuple[tuple[str, Callable[[Any], Any]], ...] = (
    ("recipe", check_recipe),
    ("budget", check_budget),
    ("title", check_title),
    ("node_id", lambda value: check_name(value, "node_id")),
    ("redelivery", check_redelivery),
)
_NOTHING_CHECKED: Mapping[str, Any] = MappingProxyType({})
_UNSEEN = object()  # matches nothing by identity


# --- the fold ---------------------------------------------------------------------------------


def fold_goal(events: list[Event]) -> dict[str, Any] | None:
    """The Goal state its events imply."""
    state: dict[str, Any] | None = None
    for event in events:
        data = dict(event.data)
        if event.type == "goal.created":
            state = {**data, "status": "queued", "cancel_reason": None}
            continue
        if state is None:
            raise ValueError(f"{event.type} before goal.created")
        if event.type == "goal.cancelled":
            state.update(status="cancelled", cancel_reason=data["reason"])
        elif event.type == "goal.reassigned":
            state.update(node_id=data["to_node"], round=data["round"], run_id=data["run_id"])
        else:
            state["status"] = GOAL_EVENT_STATUS[event.type]
    return state


GOAL_EVENT_STATUS = {
    "goal.started": "running",
    "goal.queued": "queued",
    "goal.released": "queued",
    "goal.held": "held",
    "goal.completed": "completed",
    "goal.exhausted": "exhausted",
}


register_fold("goal", fold_goal)
