"""Canonical JSON: one byte string per value, so payloads compare by equality of text."""

from __future__ import annotations

import json
import math
from typing import Any

from store.errors import InvalidInputError

_ENCODER = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


def canonical_json(value: Any) -> str:
    """Sorted keys, no whitespace, UTF-8 text; only plain JSON data (no NaN, no non-str keys)."""
    _check_common(value)
    return _ENCODER.encode(value)


def _check_common(value: Any) -> None:
    """The common shapes checked without recursion; anything else takes the careful path."""
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is str or kind is int or kind is bool or item is None:
            continue
        if kind is dict:
            if not all(type(key) is str for key in item):
                raise InvalidInputError("object keys must be strings")
            stack.extend(item.values())
        elif kind is list or kind is tuple:
            stack.extend(item)
        else:
            _check_plain(item)


def _check_plain(value: Any) -> None:
    if value is None or isinstance(value, bool | str):
        return
    if isinstance(value, int):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidInputError("numbers must be finite")
        return
    if isinstance(value, list | tuple):
        for item in value:
            _check_plain(item)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidInputError("object keys must be strings")
            _check_plain(item)
        return
    raise InvalidInputError(f"not plain JSON data: {type(value).__name__}")
