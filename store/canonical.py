"""Canonical JSON: one byte string per value, so payloads compare by equality of text."""

from __future__ import annotations

import json
import math
from typing import Any

from store.errors import InvalidInputError


def canonical_json(value: Any) -> str:
    """Sorted keys, no whitespace, UTF-8 text; only plain JSON data (no NaN, no non-str keys)."""
    _check_plain(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


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
