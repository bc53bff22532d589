"""``store.speedups.json_scan.loads`` (the journal's reader of stored JSON) is ``json.loads``:
the same value or the same error, for any text, on the running Python."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from store.journal import core
from store.speedups.json_scan import loads
from tests.helpers.examples import examples

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()  # NaN and infinities: json.dumps writes them, json.loads reads them
    | st.text()  # any code point, surrogates and controls included
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=30,
)


def _parsed(parse: Any, text: Any) -> tuple[str, Any]:
    try:
        return "value", parse(text)
    except Exception as exc:  # the very error json.loads raises, message included
        return type(exc).__name__, str(exc)


@settings(max_examples=examples(1500), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    values.map(lambda v: json.dumps(v, ensure_ascii=False, allow_nan=True))
    | st.text()
    | st.sampled_from(
        [" 1", "1 ", "\ufeff1", "[1] [2]", "{", "", "nul", "NaN", "1e999", '"\\ud800"']
    )
    | values.map(lambda v: json.dumps(v).encode())
)
def test_the_journals_json_reader_is_json_loads(text: Any) -> None:
    """A stored text is scanned directly: the same value as json.loads, or the same error, for
    any text (whitespace, a BOM, extra data, bytes)."""
    mine, theirs = _parsed(loads, text), _parsed(json.loads, text)
    if mine[0] == theirs[0] == "value":  # NaN is not equal to itself: compare as text too
        assert mine[1] == theirs[1] or json.dumps(mine[1]) == json.dumps(theirs[1])
    else:
        assert mine == theirs


def test_the_journal_reads_with_it() -> None:
    assert core.loads is loads
