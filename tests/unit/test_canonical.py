"""Canonical JSON: exactly the bytes json.JSONEncoder writes (sorted keys, no whitespace), and
refuses exactly what is not plain JSON data."""

from __future__ import annotations

import json
import math
import string
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from store.canonical import canonical_json
from store.errors import InvalidInputError
from tests.helpers.examples import examples

REFERENCE = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


def plain(value: Any) -> bool:
    """The definition: None, bool, int, finite float, str, and lists, tuples, dicts of them
    with str keys."""
    if value is None or isinstance(value, bool | int | str):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list | tuple):
        return all(plain(item) for item in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and plain(v) for k, v in value.items())
    return False


scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()  # NaN and infinities included: they must be refused
    | st.text()  # any code point, surrogates and controls included
)
keys = st.text() | st.integers() | st.booleans() | st.none() | st.floats(allow_nan=False)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.lists(inner, max_size=5).map(tuple)
        | st.dictionaries(st.text(), inner, max_size=5)
        | st.dictionaries(keys, inner, max_size=3)  # non-str keys: refused
    ),
    max_leaves=30,
)


@settings(max_examples=examples(2000), suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(values)
def test_same_bytes_as_json_or_the_same_refusal(value: Any) -> None:
    if plain(value):
        assert canonical_json(value) == REFERENCE.encode(value)
    else:
        with pytest.raises(InvalidInputError):
            canonical_json(value)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"a": float("nan")}, "numbers must be finite"),
        ([1, float("inf")], "numbers must be finite"),
        ({1: "a"}, "object keys must be strings"),
        ({"a": [{"b": {None: 1}}]}, "object keys must be strings"),
        ({"a": {1, 2}}, "not plain JSON data: set"),
        ({"a": object()}, "not plain JSON data: object"),
    ],
)
def test_refusals_name_the_problem(value: Any, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        canonical_json(value)


def test_a_circular_value_is_refused_not_encoded_forever() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(InvalidInputError, match="nested too deeply"):
        canonical_json({"a": loop})


def test_a_refusal_leaves_the_encoder_clean() -> None:
    shared = {"x": 1}
    with pytest.raises(InvalidInputError):
        canonical_json([shared, float("nan")])
    assert canonical_json([shared, shared]) == '[{"x":1},{"x":1}]'


# --- the models' own encoders for the records their rules check -------------------------------

# Any text the rules accept: quotes, backslashes, control characters (not in titles), non-BMP.
texts = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12)
# The values of r"[A-Za-z0-9][A-Za-z0-9._-]{0,10}" and r"[0-9a-f]{64}", drawn as text over those
# alphabets: the same values as ``st.from_regex`` gives, at a tenth of its cost per draw.
_ALNUM = string.ascii_letters + string.digits
names = st.tuples(st.sampled_from(_ALNUM), st.text(_ALNUM + "._-", max_size=10)).map("".join)
hex64 = st.text("0123456789abcdef", min_size=64, max_size=64)
small = st.integers(min_value=1, max_value=20)
budgets = st.fixed_dictionaries(
    {"max_attempts": small, "attempt_timeout_ms": st.integers(1, 2**53 - 1)}
)


@st.composite
def goal_states(draw: st.DrawFn) -> dict[str, Any]:
    from store.model.goal import GOAL_STATUSES, run_id_for

    goal_id, round_ = draw(names), draw(st.integers(1, 9999))
    status = draw(st.sampled_from(GOAL_STATUSES))
    return {
        "goal_id": goal_id,
        "title": draw(texts.filter(lambda t: t.strip() and t.isprintable())),
        "node_id": draw(names),
        "status": status,
        "round": round_,
        "run_id": run_id_for(goal_id, round_),
        "recipe": {
            "argv": draw(st.lists(texts, min_size=1, max_size=3) | st.tuples(texts, texts)),
            "cwd": draw(st.none() | texts),
        },
        "budget": draw(budgets),
        "redelivery": draw(st.sampled_from(["safe", "operator"])),
        "cancel_reason": draw(texts.filter(str.strip)) if status == "cancelled" else None,
    }


@st.composite
def run_states(draw: st.DrawFn) -> dict[str, Any]:
    run_id = draw(names)
    ends = draw(st.lists(st.sampled_from(["failed", "interrupted"]), max_size=3))
    last = draw(st.sampled_from(["", "running", "completed", "failed", "interrupted"]))
    attempts = []
    for epoch, state in enumerate([*ends, last] if last else ends, 1):
        attempt: dict[str, Any] = {
            "attempt_id": f"{run_id}/{epoch}",
            "epoch": epoch,
            "worker": draw(names),
            "state": state,
        }
        refs = st.lists(names, unique=True, max_size=3) | st.tuples(names)
        if state == "completed":
            attempt["evidence"] = draw(refs)
        if state == "failed":
            attempt.update(reason=draw(texts.filter(str.strip)), evidence=draw(refs))
        if state == "interrupted":
            attempt["cleanup"] = {
                "epoch": epoch,
                "confirmed_by": draw(names) + "@n1",
                "method": draw(texts.filter(str.strip)),
            }
        attempts.append(attempt)
    running = attempts and attempts[-1]["state"] == "running"
    completed = attempts and attempts[-1]["state"] == "completed"
    status = (
        "running"
        if running
        else "completed"
        if completed
        else draw(st.sampled_from(["queued", "exhausted", "cancelled"]))
    )
    state = {
        "run_id": run_id,
        "pins": {
            "candidate_digest": "sha256:" + draw(hex64),
            "recipe_revision": draw(names),
            "scenario_revision": "node:" + draw(names),
        },
        "budget": draw(budgets),
        "status": status,
        "attempts": attempts,
    }
    if status == "cancelled":
        state["cancel_reason"] = draw(texts.filter(str.strip))
    if status == "running" and draw(st.booleans()):
        state["cancel_requested"] = {"reason": draw(texts.filter(str.strip))}
    return state


@settings(max_examples=examples(1500), deadline=None)
@given(goal_states())
def test_goal_text_is_the_canonical_json_of_every_checked_goal(state: dict[str, Any]) -> None:
    from store.model.goal import check_goal_state, goal_text

    try:
        check_goal_state(state)
    except InvalidInputError:
        return  # not a record the rules accept: goal_text is never asked
    assert goal_text(state) == canonical_json(state)


@settings(max_examples=examples(1500), deadline=None)
@given(run_states())
def test_run_text_is_the_canonical_json_of_every_checked_run(state: dict[str, Any]) -> None:
    from store.errors import CorruptRunError
    from store.model.run import check_run, run_text

    try:
        check_run(state)
    except CorruptRunError:
        return  # not a record the rules accept: run_text is never asked
    assert run_text(state) == canonical_json(state)


@settings(max_examples=examples(1500), deadline=None)
@given(run_states())
def test_a_checked_run_reads_back_as_a_run_that_passes(state: dict[str, Any]) -> None:
    """What lets a command remember its new Run's text as passing (run_model.passed_run): the
    text, parsed as the next command loads it, passes check_run too."""
    import json

    from store.errors import CorruptRunError
    from store.model.run import check_run, run_text

    try:
        check_run(state)
    except CorruptRunError:
        return
    check_run(json.loads(run_text(state)), run_id=state["run_id"])


def test_run_text_refuses_a_record_that_is_no_json_as_canonical_json_does() -> None:
    from types import MappingProxyType

    from store.model.run import check_run, run_text

    state = {
        "run_id": "r",
        "pins": MappingProxyType({
            "candidate_digest": "sha256:" + "a" * 64,
            "recipe_revision": "v1",
            "scenario_revision": "node:n1",
        }),
        "budget": {"max_attempts": 3, "attempt_timeout_ms": 1},
        "status": "queued",
        "attempts": [],
    }  # fmt: skip
    check_run(state)  # the rules accept a mappingproxy record
    with pytest.raises(InvalidInputError):
        run_text(state)
