"""Rows by key, iterated in key order: a dict for the rows and a sorted list of their keys.

The Goals view's list is in id order, and a commit may list a Goal whose id sorts between the
listed ones. A dict keeps insertion order only, so putting it in order again took a sort of
every key and a new dict per such commit (≈ 190 µs at 1,500 Goals); here a new key costs a
binary search and one ``list.insert`` (a ``memmove`` in C), and lookups stay a dict's.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Mapping
from typing import TypeVar

R = TypeVar("R")


class SortedRows(Mapping[str, R]):
    """``rows`` (given in key order) by key; iterated in key order, whatever the order of
    later insertions."""

    __slots__ = ("_keys", "_rows")

    def __init__(self, rows: Mapping[str, R] | None = None) -> None:
        self._rows: dict[str, R] = dict(rows or {})
        self._keys: list[str] = list(self._rows)
        if any(a >= b for a, b in zip(self._keys, self._keys[1:], strict=False)):
            self._keys.sort()  # not given in order after all: never iterate out of order

    def __getitem__(self, key: str) -> R:
        return self._rows[key]

    def __contains__(self, key: object) -> bool:
        return key in self._rows

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __reversed__(self) -> Iterator[str]:
        return reversed(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def get(self, key: str, default: R | None = None) -> R | None:  # type: ignore[override]
        return self._rows.get(key, default)

    def put(self, key: str, row: R) -> None:
        """Set ``key``'s row; a new key goes into its place."""
        if key not in self._rows:
            keys = self._keys
            if not keys or keys[-1] < key:  # ids that grow: appended
                keys.append(key)
            else:
                keys.insert(bisect.bisect_left(keys, key), key)
        self._rows[key] = row

    def pop(self, key: str) -> R | None:
        """Remove ``key``; its row, or None when it was not here."""
        if key not in self._rows:
            return None
        del self._keys[bisect.bisect_left(self._keys, key)]
        return self._rows.pop(key)

    def index(self, key: str) -> int:
        """``key``'s place in key order (where it would go, when it is not here)."""
        return bisect.bisect_left(self._keys, key)
