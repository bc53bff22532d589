"""Goal and node ids: the one rule every layer checks (they appear in paths and command ids)."""

from __future__ import annotations

import re
from typing import Any

from store.errors import InvalidInputError

MAX_NAME = 64
_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]*"  # compiled by `re` on first use


def check_name(value: Any, name: str) -> str:
    """A goal or node id: 1–64 of A-Z a-z 0-9 . _ -, starting with a letter or digit."""
    if type(value) is not str or len(value) > MAX_NAME or not re.fullmatch(_NAME, value):
        raise InvalidInputError(
            f"{name} must be 1–{MAX_NAME} characters of A-Z a-z 0-9 . _ -,"
            " starting with a letter or digit"
        )
    return value
