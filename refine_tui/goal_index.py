"""Every Goal's searchable words, status and recency in memory: lists at 100,000 Goals without
the journal.

The journal's ``contains`` pre-filter scans every stored state (≈ 90 ms at 100k) and parses each
hit (a common word like "queued" hits tens of thousands: ≈ 0.4 s); the cleared list's two status
queries take 80–250 ms there. Here each Goal is one lowercase line ``id\\ntitle\\nstatus\\nnode``
(≈ 3 ms to scan 100k), its status, and a recency rank. Built once after the first paint, in a
thread on a connection of its own (live reads go on meanwhile), then kept current from the rows
the dashboard reads anyway: every commit reaches it as a touched Goal whose row is re-read
(``update``), those made during the build included.

Compact, for a million Goals (DESIGN §9: the dashboard ≤ 300 MB): the lines live only joined,
CHUNK at a time, in id order (the search reads them that way anyway); a status is one byte
naming an interned status; the recency order is a list of the ids already held, a Goal changed
again appended anew (its last place counts). No per-Goal dict, tuple or second string: ≈ 140
bytes per Goal instead of ≈ 400.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterable, Mapping

from refine_tui.rows import ACTIVE, TERMINAL, GoalRow
from store.journal.api import Journal
from store.ops import reads

BUILD_PAGE = 2_000  # Goals read at a time while building
CHUNK = 1_024  # lines joined into one string, searched at once in C before one by one
_SEP = "\0"  # between the lines of a chunk: never in a line (_words)
_STATUSES = 255  # distinct statuses kept by name; a further one counts as none (corrupt data)


def _words(goal_id: str, title: object, status: object, node_id: object) -> str:
    line = "\n".join(str(f or "") for f in (goal_id, title, status, node_id)).lower()
    return line.replace(_SEP, " ")


class GoalIndex:
    """Goal id → its searchable line and status; the active ones; all by recency of change."""

    def __init__(
        self, lines: Mapping[str, str], status: Mapping[str, str], order: list[str]
    ) -> None:
        ids = sorted(lines)
        self._setup(ids, [lines[g] for g in ids], [status.get(g, "") for g in ids], order)

    def _setup(
        self, ids: list[str], texts: list[str], statuses: Iterable[str], order: list[str]
    ) -> None:
        self._ids = ids  # sorted: a filter's hits come by id, so a common word stops at the cap
        self._names: list[str] = []  # status code → status
        self._codes: dict[str, int] = {}
        self._status = bytearray(self._code(s) for s in statuses)  # by position in _ids
        # Each CHUNK of lines joined (more or fewer after updates): a word in none of a chunk's
        # lines is ruled out by one C-level scan; _starts[k] is chunk k's first position.
        self._blobs = [_SEP.join(texts[at : at + CHUNK]) for at in range(0, len(texts), CHUNK)]
        self._starts = list(range(0, len(texts), CHUNK))
        self._active = [
            g for g, c in zip(ids, self._status, strict=True) if self._names[c] in ACTIVE
        ]
        self._order = order  # least recently changed first; a Goal's last place counts

    def _code(self, status: str) -> int:
        code = self._codes.get(status)
        if code is None:
            if len(self._names) >= _STATUSES:
                return self._code("")  # neither active nor terminal, as any unknown status
            code = self._codes[status] = len(self._names)
            self._names.append(status)
        return code

    @classmethod
    def build(cls, journal: Journal) -> tuple[int, GoalIndex]:
        """Read every Goal once (in a thread, on a connection of its own: ≈ 1 s at 100k); with
        the last sequence it saw, whose later commits ``update`` takes in.

        Newest first, as the journal orders by each Goal's last commit: that order is the rank.
        """
        newest: list[str] = []
        lines: list[str] = []  # as read; joined in id order below
        status: list[str] = []
        with journal.snapshot():
            seen = journal.last_sequence()
            # Pages, keeping only the few strings the index needs: every parsed state at once
            # pinned ≈ 265 MB of Python's arenas at 100k, never given back.
            for goal_id, state in reads.goal_states(journal, newest_first=True, page=BUILD_PAGE):
                lines.append(
                    _words(goal_id, state.get("title"), state.get("status"), state.get("node_id"))
                )
                status.append(str(state.get("status")))
                newest.append(goal_id)
        by_id = sorted(range(len(newest)), key=newest.__getitem__)
        index = cls.__new__(cls)
        index._setup(
            [newest[at] for at in by_id],
            [lines[at] for at in by_id],
            (status[at] for at in by_id),
            newest[::-1],
        )
        return seen, index

    def __len__(self) -> int:
        return len(self._ids)

    def update(self, rows: Mapping[str, GoalRow | None], changed: Iterable[str] = ()) -> None:
        """Take in rows just read (None: the Goal is gone); ``changed``: the Goals commits
        touched, oldest change first (they become the most recent)."""
        gone = set()
        for goal_id, row in rows.items():
            if row is None:
                if self._remove(goal_id):
                    gone.add(goal_id)
                self._set_active(goal_id, False)
                continue
            at = self._put(goal_id, _words(goal_id, row.title, row.status, row.node_id))
            if row.status == "corrupt":  # a broken record keeps the place its status gave it
                continue
            self._status[at] = self._code(row.status)
            self._set_active(goal_id, row.status in ACTIVE)
        if gone:
            self._order = [g for g in self._order if g not in gone]
        for goal_id in changed:
            if self._find(goal_id) is not None:
                self._order.append(goal_id)  # now the most recent
        if len(self._order) > 2 * len(self._ids) + CHUNK:
            self._compact_order()

    def _find(self, goal_id: str) -> int | None:
        at = bisect_left(self._ids, goal_id)
        return at if at < len(self._ids) and self._ids[at] == goal_id else None

    def _chunk(self, at: int) -> tuple[int, list[str]]:
        """The chunk holding position ``at`` (or the last, for the end) and its lines."""
        k = max(bisect_right(self._starts, at) - 1, 0)
        return k, self._blobs[k].split(_SEP)

    def _put(self, goal_id: str, line: str) -> int:
        """Set a Goal's line, inserting the Goal where new; returns its position."""
        at = bisect_left(self._ids, goal_id)
        if at < len(self._ids) and self._ids[at] == goal_id:
            k, lines = self._chunk(at)
            if lines[at - self._starts[k]] != line:
                lines[at - self._starts[k]] = line
                self._blobs[k] = _SEP.join(lines)
            return at
        self._ids.insert(at, goal_id)
        self._status.insert(at, self._code(""))
        if not self._blobs:
            self._blobs, self._starts = [line], [0]
            return at
        k, lines = self._chunk(at)
        lines.insert(at - self._starts[k], line)
        self._shift(k, 1)
        if len(lines) > 2 * CHUNK:  # split: a chunk stays a fast scan
            half = len(lines) // 2
            self._blobs[k : k + 1] = [_SEP.join(lines[:half]), _SEP.join(lines[half:])]
            self._starts.insert(k + 1, self._starts[k] + half)
        else:
            self._blobs[k] = _SEP.join(lines)
        return at

    def _remove(self, goal_id: str) -> bool:
        at = self._find(goal_id)
        if at is None:
            return False
        del self._ids[at], self._status[at]
        k, lines = self._chunk(at)
        del lines[at - self._starts[k]]
        self._shift(k, -1)
        if lines:
            self._blobs[k] = _SEP.join(lines)
        else:
            del self._blobs[k], self._starts[k]
        return True

    def _shift(self, k: int, by: int) -> None:
        """Chunks after ``k`` start ``by`` positions later."""
        for later in range(k + 1, len(self._starts)):
            self._starts[later] += by

    def _compact_order(self) -> None:
        """Each Goal once, at its last place."""
        kept: dict[str, None] = {}
        for goal_id in reversed(self._order):
            kept.setdefault(goal_id)
        self._order = list(reversed(kept))

    def _set_active(self, goal_id: str, active: bool) -> None:
        at = bisect_left(self._active, goal_id)
        here = at < len(self._active) and self._active[at] == goal_id
        if active and not here:
            insort(self._active, goal_id)
        elif here and not active:
            del self._active[at]

    def matching(self, text: str, limit: int) -> list[str]:
        """The first ``limit`` Goal ids (by id) whose id, title, status or node has ``text``."""
        needle, found = text.lower(), []
        for k, blob in enumerate(self._blobs):
            if needle not in blob:
                continue
            first = self._starts[k]
            for offset, line in enumerate(blob.split(_SEP)):
                if needle in line:
                    found.append(self._ids[first + offset])
                    if len(found) >= limit:
                        return found
        return found

    def listed(self, active: int, recent: int) -> list[str]:
        """The unfiltered list, by id: the first ``active`` active Goals (by id) and the
        ``recent`` most recently changed terminal ones (as ``Reader.visible_goal_ids``)."""
        found = self._active[:active]
        ended, seen = 0, set()
        for goal_id in reversed(self._order):  # most recent first: a few hundred steps
            if ended >= recent:
                break
            if goal_id in seen:
                continue  # changed again later: counted at that place
            seen.add(goal_id)
            at = self._find(goal_id)
            if at is not None and self._names[self._status[at]] in TERMINAL:
                found.append(goal_id)
                ended += 1
        return sorted(set(found))
