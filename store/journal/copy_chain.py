"""Each copied event's ``prev`` (its aggregate's previous event), with memory flat.

A copy into SQLite chains every event to its aggregate's previous one (schema 5). Events arrive
in sequence order, so that is the newest event of its aggregate seen so far: the copy needs every
aggregate's head while it runs. Kept in a Python dict, that map grew ≈ 125 bytes per aggregate
(279 MB at a million Goals). Here it is a table of a private temporary SQLite database (on disk,
deleted when closed) whose page cache is bounded, so a copy's memory does not depend on the
journal's size: per batch, one lookup of the batch's aggregates and one upsert of their heads.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from store.speedups.sqlite import sqlite3

# The scratch table's page cache, its memory at any size: it holds the b-tree's interior pages
# (≈ 50 at 2M aggregates), so a lookup reads at most its leaf from the file (the OS's cache).
_CACHE_KB = 512
_LOOKUP = 500  # aggregate ids per lookup (under any build's limit of bound parameters)


class ChainHeads:
    """Every aggregate's newest copied event, on disk; ``close`` deletes it."""

    def __init__(self) -> None:
        self._db = sqlite3.connect("", isolation_level=None)  # "": a private temporary file
        self._db.execute(f"PRAGMA cache_size = -{_CACHE_KB}")
        self._db.execute("PRAGMA journal_mode = OFF")  # scratch: nothing to roll back
        self._db.execute(
            "CREATE TABLE heads (aggregate_id TEXT PRIMARY KEY, sequence INTEGER NOT NULL)"
            " WITHOUT ROWID"
        )
        self._db.execute("BEGIN")  # one transaction: pages reach the file only when evicted

    def chained(self, rows: Sequence[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        """Events ``(sequence, aggregate_id, …)`` in sequence order, each with its aggregate's
        previous event appended (None for its first); the heads move to these events."""
        ids = sorted({row[1] for row in rows})
        heads = dict(self._heads(ids))
        out = []
        for row in rows:
            out.append((*row, heads.get(row[1])))
            heads[row[1]] = row[0]
        self._db.executemany(
            "INSERT OR REPLACE INTO heads VALUES (?, ?)", [(agg, heads[agg]) for agg in ids]
        )
        return out

    def _heads(self, ids: list[str]) -> Iterable[tuple[str, int]]:
        for first in range(0, len(ids), _LOOKUP):
            part = ids[first : first + _LOOKUP]
            yield from self._db.execute(
                "SELECT aggregate_id, sequence FROM heads"
                f" WHERE aggregate_id IN ({', '.join('?' * len(part))})",
                part,
            )

    def close(self) -> None:
        self._db.close()
