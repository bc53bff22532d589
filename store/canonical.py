"""Canonical JSON: one byte string per value, so payloads compare by equality of text."""

from __future__ import annotations

import json
from typing import Any

from store.errors import InvalidInputError


def _refuse(value: Any) -> Any:
    raise InvalidInputError(f"not plain JSON data: {type(value).__name__}")


# It refuses non-finite numbers (ValueError) and anything but None, bool, int, float, str, list,
# tuple and dict (``_refuse``); only non-str keys, which json would turn into strings, need a look
# of our own. No cycle check: a cycle ends in RecursionError, refused like any value nested too
# deeply to encode. (Calling json's C encoder directly, built once, saved ≈ 1 µs of a ≈ 300 µs
# command: bench/commands.py and bench/lifecycle.py could not tell it apart, issue 28.)
_ENCODER = json.JSONEncoder(
    sort_keys=True,
    separators=(",", ":"),
    ensure_ascii=False,
    allow_nan=False,
    check_circular=False,
    default=_refuse,
)


# Plain leaves, skipped with one set look-up (most children are leaves); subclasses of them fall
# through to the isinstance test, which is what the encoder itself does.
_LEAVES = frozenset({str, int, float, bool, type(None)})
_CONTAINERS = (dict, list, tuple)


def canonical_json(value: Any) -> str:
    """Sorted keys, no whitespace, UTF-8 text; only plain JSON data (no NaN, no non-str keys)."""
    try:
        text = _ENCODER.encode(value)
    except ValueError as exc:  # a NaN or an infinity (or an int too long to print)
        finite = "float" in str(exc)
        raise InvalidInputError(
            "numbers must be finite" if finite else f"not plain JSON data: {exc}"
        ) from None
    except RecursionError:
        raise InvalidInputError("not plain JSON data: nested too deeply (or circular)") from None
    except TypeError:  # keys json cannot even coerce (e.g. tuples)
        raise InvalidInputError("object keys must be strings") from None
    if isinstance(value, _CONTAINERS):  # encoded, so finite: no cycle to walk forever
        _check_keys(value)
    return text


def _check_keys(value: Any) -> None:
    """Every object key is a string, looked at without recursion (values go to the encoder)."""
    stack = [value]
    pop, push = stack.pop, stack.append
    while stack:
        item = pop()
        if isinstance(item, dict):
            try:
                "".join(item)  # str keys only: the C-level test of every key at once
            except TypeError:
                raise InvalidInputError("object keys must be strings") from None
            item = item.values()
        for child in item:
            if type(child) not in _LEAVES and isinstance(child, _CONTAINERS):
                push(child)
