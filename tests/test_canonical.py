"""Canonical JSON: the prebuilt encoder writes exactly the bytes json.JSONEncoder writes, and
refuses exactly what is not plain JSON data."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from store.canonical import canonical_json
from store.errors import InvalidInputError

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


@settings(max_examples=2000, suppress_health_check=[HealthCheck.too_slow], deadline=None)
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
