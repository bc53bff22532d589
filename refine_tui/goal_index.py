"""Every Goal's searchable words, status and recency in memory: lists at 100,000 Goals without
the journal.

The journal's ``contains`` pre-filter scans every stored state (≈ 90 ms at 100k) and parses each
hit (a common word like "queued" hits tens of thousands: ≈ 0.4 s); the cleared list's two status
queries take 80–250 ms there. Here each Goal is one lowercase line ``id\\ntitle\\nstatus\\nnode``
(≈ 3 ms to scan 100k), its status, and a recency rank. Built once after the first paint, in a
thread on a connection of its own (live reads go on meanwhile), then kept current from the rows
the dashboard reads anyway: every commit reaches it as a touched Goal whose row is re-read
(``update``), those made during the build included.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable, Mapping

from refine_tui.rows import ACTIVE, TERMINAL, GoalRow
from store.journal.api import Journal
from store.ops import reads

BUILD_PAGE = 2_000  # Goals read at a time while building
CHUNK = 1_024  # lines searched at once, in C, before looking at them one by one


def _words(goal_id: str, title: object, status: object, node_id: object) -> str:
    return "\n".join(str(f or "") for f in (goal_id, title, status, node_id)).lower()


class GoalIndex:
    """Goal id → its searchable line and status; the active ones; all by recency of change."""

    def __init__(self, lines: dict[str, str], status: dict[str, str], order: list[str]) -> None:
        self._lines = lines
        # The lines again in id order: a filter's hits come by id, so a common word stops at
        # the list's cap ("queued" at 100k: the first 1,200 of ≈ 30,000), not at the end.
        self._ids = sorted(lines)
        self._texts = [lines[g] for g in self._ids]
        # Each CHUNK of lines joined, made when first searched: a word in none of a chunk's
        # lines is ruled out by one C-level scan (a rare word: ≈ 1 ms at 100k, not ≈ 8).
        self._blobs: dict[int, str] = {}
        for chunk in range(0, (len(self._ids) + CHUNK - 1) // CHUNK):
            self._blob(chunk)  # here, in the build's thread, not in the first filter's read
        self._status = status
        self._active = sorted(g for g, s in status.items() if s in ACTIVE)  # by id
        self._order = dict.fromkeys(order)  # least recently changed first

    @classmethod
    def build(cls, journal: Journal) -> tuple[int, GoalIndex]:
        """Read every Goal once (in a thread, on a connection of its own: ≈ 1 s at 100k); with
        the last sequence it saw, whose later commits ``update`` takes in.

        Newest first, as the journal orders by each Goal's last commit: that order is the rank.
        """
        lines, status, newest = {}, {}, []
        with journal.snapshot():
            seen = journal.last_sequence()
            # Pages, keeping only the few strings the index needs: every parsed state at once
            # pinned ≈ 265 MB of Python's arenas at 100k, never given back.
            for goal_id, state in reads.goal_states(journal, newest_first=True, page=BUILD_PAGE):
                lines[goal_id] = _words(
                    goal_id, state.get("title"), state.get("status"), state.get("node_id")
                )
                status[goal_id] = str(state.get("status"))
                newest.append(goal_id)
        newest.reverse()
        return seen, cls(lines, status, newest)

    def __len__(self) -> int:
        return len(self._lines)

    def update(self, rows: Mapping[str, GoalRow | None], changed: Iterable[str] = ()) -> None:
        """Take in rows just read (None: the Goal is gone); ``changed``: the Goals commits
        touched, oldest change first (they become the most recent)."""
        for goal_id, row in rows.items():
            if row is None:
                if self._lines.pop(goal_id, None) is not None:
                    at = bisect_left(self._ids, goal_id)
                    del self._ids[at], self._texts[at]
                    self._moved(at)
                self._status.pop(goal_id, None)
                self._set_active(goal_id, False)
                self._order.pop(goal_id, None)
                continue
            self._put(goal_id, _words(goal_id, row.title, row.status, row.node_id))
            if row.status == "corrupt":  # a broken record keeps the place its status gave it
                continue
            self._status[goal_id] = row.status
            self._set_active(goal_id, row.status in ACTIVE)
        for goal_id in changed:
            if goal_id in self._lines:
                self._order.pop(goal_id, None)
                self._order[goal_id] = None  # now the most recent

    def _put(self, goal_id: str, line: str) -> None:
        at = bisect_left(self._ids, goal_id)
        if goal_id in self._lines:
            if self._texts[at] != line:
                self._texts[at] = line
                self._blobs.pop(at // CHUNK, None)
        else:
            self._ids.insert(at, goal_id)
            self._texts.insert(at, line)
            self._moved(at)
        self._lines[goal_id] = line

    def _moved(self, at: int) -> None:
        """Lines from ``at`` on moved by one: their chunks are joined again when searched."""
        for chunk in [c for c in self._blobs if c >= at // CHUNK]:
            del self._blobs[chunk]

    def _set_active(self, goal_id: str, active: bool) -> None:
        at = bisect_left(self._active, goal_id)
        here = at < len(self._active) and self._active[at] == goal_id
        if active and not here:
            insort(self._active, goal_id)
        elif here and not active:
            del self._active[at]

    def _blob(self, chunk: int) -> str:
        blob = self._blobs.get(chunk)
        if blob is None:
            blob = "\0".join(self._texts[chunk * CHUNK : (chunk + 1) * CHUNK])
            self._blobs[chunk] = blob
        return blob

    def matching(self, text: str, limit: int) -> list[str]:
        """The first ``limit`` Goal ids (by id) whose id, title, status or node has ``text``."""
        needle, found = text.lower(), []
        for chunk in range(0, (len(self._ids) + CHUNK - 1) // CHUNK):
            if needle not in self._blob(chunk):
                continue
            lines = slice(chunk * CHUNK, (chunk + 1) * CHUNK)
            for goal_id, line in zip(self._ids[lines], self._texts[lines], strict=True):
                if needle in line:
                    found.append(goal_id)
                    if len(found) >= limit:
                        return found
        return found

    def listed(self, active: int, recent: int) -> list[str]:
        """The unfiltered list, by id: the first ``active`` active Goals (by id) and the
        ``recent`` most recently changed terminal ones (as ``Reader.visible_goal_ids``)."""
        found = self._active[:active]
        ended = 0
        for goal_id in reversed(self._order):  # most recent first: a few hundred steps
            if ended >= recent:
                break
            if self._status.get(goal_id) in TERMINAL:
                found.append(goal_id)
                ended += 1
        return sorted(set(found))


def matches(row: GoalRow, text: str) -> bool:
    """The filter as a commit's row is judged by (the index judges a new list's)."""
    if not text:
        return True
    needle = text.lower()
    return any(needle in f.lower() for f in (row.goal_id, row.title, row.status, row.node_id))
