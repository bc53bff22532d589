"""SortedRows (the Goals view's list): lookups of a dict, iteration in key order, whatever the
order of insertions and removals."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from refine_tui.sorted_rows import SortedRows

KEYS = st.text(alphabet="ab01-", min_size=1, max_size=4)
STEPS = st.lists(st.tuples(st.booleans(), KEYS, st.integers()), max_size=60)


@settings(max_examples=300, deadline=None)
@given(start=st.dictionaries(KEYS, st.integers(), max_size=20), steps=STEPS)
def test_agrees_with_a_dict_sorted_after_every_step(
    start: dict[str, int], steps: list[tuple[bool, str, int]]
) -> None:
    rows = SortedRows(dict(sorted(start.items())))
    plain = dict(start)
    for put, key, value in steps:
        if put:
            rows.put(key, value)
            plain[key] = value
        else:
            assert rows.pop(key) == plain.pop(key, None)
        assert list(rows) == sorted(plain)
        assert list(reversed(rows)) == sorted(plain, reverse=True)
        assert dict(rows.items()) == plain and len(rows) == len(plain)
        assert all(rows.index(k) == i for i, k in enumerate(sorted(plain)))
        assert (key in rows) == (key in plain) and rows.get(key) == plain.get(key)


def test_rows_given_out_of_order_are_iterated_in_order() -> None:
    rows = SortedRows({"b": 2, "a": 1, "c": 3})
    assert list(rows) == ["a", "b", "c"] and rows.index("b") == 1


def test_a_key_between_others_goes_into_its_place_and_one_that_grows_is_appended() -> None:
    rows = SortedRows({"g1": 1, "g3": 3})
    rows.put("g2", 2)
    rows.put("g4", 4)
    rows.put("g2", 22)  # a row changed: its place stays
    assert list(rows.items()) == [("g1", 1), ("g2", 22), ("g3", 3), ("g4", 4)]
    assert rows.pop("g9") is None and len(rows) == 4
