"""Goal and node ids: the one rule every layer checks (they appear in paths and command ids)."""

from __future__ import annotations

from typing import Any

from store.errors import InvalidInputError

MAX_NAME = 64
# The ids' alphabets, checked as sets of characters rather than patterns: compiling the patterns
# cost ≈ 0.1–0.2 ms each of a command's start-up (bench/cli.py).
ALNUM = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
NAME_CHARS = ALNUM | frozenset("._-")  # a goal or node id
ID_CHARS = ALNUM | frozenset("._:/-")  # a command id, token, revision, worker, evidence
ACTOR_CHARS = ID_CHARS | {"@"}  # "<operator>@<node>" (DESIGN §5)


def check_name(value: Any, name: str) -> str:
    """A goal or node id: 1–64 of A-Z a-z 0-9 . _ -, starting with a letter or digit."""
    if type(value) is not str or len(value) > MAX_NAME or not spelled(value, NAME_CHARS):
        raise InvalidInputError(
            f"{name} must be 1–{MAX_NAME} characters of A-Z a-z 0-9 . _ -,"
            " starting with a letter or digit"
        )
    return value


def spelled(value: str, chars: frozenset[str]) -> bool:
    """``value`` is a letter or digit, then only ``chars``: ``re.fullmatch(r"[A-Za-z0-9][…]*")``
    for the alphabet ``chars`` (which holds the letters and digits)."""
    return value[:1] in ALNUM and chars.issuperset(value)
