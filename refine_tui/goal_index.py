"""Every Goal's searchable words, status and recency in memory: lists at 100,000 Goals without
the journal.

The journal's ``contains`` pre-filter scans every stored state (≈ 90 ms at 100k) and parses each
hit (a common word like "queued" hits tens of thousands: ≈ 0.4 s); the cleared list's two status
queries take 80–250 ms there. Here each Goal is one lowercase line ``id\\ntitle\\nstatus\\nnode``
(≈ 3 ms to scan 100k), its status, and a recency rank. Built once after the first paint, in a
thread on a connection of its own (live reads go on meanwhile), then kept current from the rows
the dashboard reads anyway: every commit reaches it as a touched Goal whose row is re-read
(``update``), those made during the build included.

Compact, for a million Goals (DESIGN §9: the dashboard ≤ 300 MB): no Python object per Goal.
The ids and the lines live joined, CHUNK at a time, in id order (the search reads them that way
anyway; a Goal is found by bisecting the chunks' first ids, then its chunk); a status is one byte
naming an interned status; the recency order is one joined string of ids, a Goal changed later
appended to a list after it (its last place counts). ≈ 60 bytes per Goal instead of ≈ 400.
"""

from __future__ import annotations

import sys
from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable, Iterable, Iterator, Mapping

from refine_tui.rows import ACTIVE, TERMINAL, GoalRow
from store.journal.api import Journal
from store.ops import reads

BUILD_PAGE = 2_000  # Goals read at a time while building
CHUNK = 1_024  # lines joined into one string, searched at once in C before one by one
_SEP = "\0"  # between the ids or lines of a chunk: never in a line (_words) nor in an id
_STATUSES = 255  # distinct statuses kept by name; a further one counts as none (corrupt data)


def _words(goal_id: str, title: object, status: object, node_id: object) -> str:
    if type(title) is str and type(status) is str and type(node_id) is str:  # a valid Goal
        line = f"{goal_id}\n{title}\n{status}\n{node_id}".lower()
    else:
        line = "\n".join(str(f or "") for f in (goal_id, title, status, node_id)).lower()
    return line.replace(_SEP, " ")


class GoalIndex:
    """Goal id → its searchable line and status; the active ones; all by recency of change."""

    def __init__(
        self, lines: Mapping[str, str], status: Mapping[str, str], order: list[str]
    ) -> None:
        """``order``: least recently changed first."""
        self._names: list[str] = []  # status code → status
        self._codes: dict[str, int] = {}
        goals = [self._packed(g, status.get(g, ""), lines[g]) for g in sorted(lines)]
        self._assemble(goals, _SEP.join(reversed(order)))
        self._derive()

    def _packed(self, goal_id: str, status: str, line: str) -> str:
        """One Goal as one string while building: its id, NUL, its status code, its line."""
        return f"{goal_id}\0{chr(self._code(status))}{line}"

    def _assemble(self, goals: list[str], newest: str) -> None:
        """Take in packed Goals sorted by id (emptying ``goals`` as it goes, so the joined
        chunks replace them rather than add to them); ``newest``: the ids joined, most recently
        changed first."""
        # Chunk k: positions _starts[k]… (CHUNK, more or fewer after updates), its ids and lines
        # joined; a word in none of its lines is ruled out by one C-level scan.
        self._starts = list(range(0, len(goals), CHUNK))
        self._size = len(goals)
        ids, lines, codes = [], [], []
        for start in reversed(self._starts):  # from the end: a list shrinks there in place
            parts = [goal.partition("\0") for goal in goals[start:]]
            del goals[start:]
            ids.append(_SEP.join([p[0] for p in parts]))
            codes.append(bytes(ord(p[2][0]) for p in parts))
            lines.append(_SEP.join([p[2][1:] for p in parts]))
        self._idblobs, self._blobs = ids[::-1], lines[::-1]
        self._status = bytearray(b"".join(reversed(codes)))  # by position, in id order
        self._order = newest  # every Goal once, most recently changed first
        self._newer: list[str] = []  # changed since, oldest first: a Goal's last place counts

    def _derive(self) -> None:
        """The chunks' first ids and the active Goals, as new strings from the joined ones:
        made after the build's many short-lived strings are gone, they pin none of the memory
        those took (Python gives an arena back only when nothing in it lives)."""
        self._firsts = [blob.partition(_SEP)[0] for blob in self._idblobs]
        live = {code for code, name in enumerate(self._names) if name in ACTIVE}
        self._active = []
        for k, blob in enumerate(self._idblobs):
            first = self._starts[k]
            codes = self._status[first : first + blob.count(_SEP) + 1]
            if any(code in live for code in codes):
                ids = blob.split(_SEP)
                self._active += [g for g, c in zip(ids, codes, strict=True) if c in live]

    def _code(self, status: str) -> int:
        code = self._codes.get(status)
        if code is None:
            if len(self._names) >= _STATUSES:
                return self._code("")  # neither active nor terminal, as any unknown status
            status = sys.intern(status)  # the known ones: the constants, not a parsed string
            code = self._codes[status] = len(self._names)
            self._names.append(status)
        return code

    @classmethod
    def build(cls, journal: Journal) -> tuple[int, GoalIndex]:
        """Read every Goal once (in a thread, on a connection of its own: ≈ 0.5 s at 100k); with
        the last sequence it saw, whose later commits ``update`` takes in. The database reads
        the three fields of each state the index keeps (``Journal.state_fields``).

        Newest first, as the journal orders by each Goal's last commit: that order is the rank.
        """
        index = cls.__new__(cls)
        index._names, index._codes = [], {}
        goals: list[str] = []  # packed (_packed), as read; sorted by id below
        pages: list[str] = []  # each page's ids joined: the recency order, newest first
        with journal.snapshot():
            seen = journal.last_sequence()
            # Pages, keeping only the few strings the index needs: every parsed state at once
            # pinned ≈ 265 MB of Python's arenas at 100k, never given back.
            page: list[str] = []
            for goal_id, (title, status, node_id) in reads.goal_fields(
                journal, ("title", "status", "node_id"), page=BUILD_PAGE
            ):
                line = _words(goal_id, title, status, node_id)
                goals.append(index._packed(goal_id, str(status), line))
                page.append(goal_id)
                if len(page) == BUILD_PAGE:
                    pages.append(_SEP.join(page))
                    page.clear()
            pages.append(_SEP.join(page))
        goals.sort()  # by id: NUL sorts before any character of an id
        index._assemble(goals, _SEP.join(p for p in pages if p))
        del goals, pages  # before _derive: see there
        index._derive()
        return seen, index

    def __len__(self) -> int:
        return self._size

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
        if gone:  # out of the order too: back only when changed again
            self._order = _SEP.join(g for g in self._order.split(_SEP) if g not in gone)
            self._newer = [g for g in self._newer if g not in gone]
        for goal_id in changed:
            if self._find(goal_id) is not None:
                self._newer.append(goal_id)  # now the most recent
        if len(self._newer) > max(CHUNK, self._size):
            self._fold_order()

    def _place(self, goal_id: str) -> tuple[int, int, list[str]]:
        """Chunk k where ``goal_id`` is or belongs, its place in the chunk, the chunk's ids."""
        k = max(bisect_right(self._firsts, goal_id) - 1, 0)
        ids = self._idblobs[k].split(_SEP)
        return k, bisect_left(ids, goal_id), ids

    def _find(self, goal_id: str) -> int | None:
        """A Goal's position, None when not held."""
        if not self._idblobs:
            return None
        k, i, ids = self._place(goal_id)
        return self._starts[k] + i if i < len(ids) and ids[i] == goal_id else None

    def _put(self, goal_id: str, line: str) -> int:
        """Set a Goal's line, inserting the Goal where new; returns its position."""
        if not self._idblobs:
            self._starts, self._firsts, self._idblobs, self._blobs = (
                [0],
                [goal_id],
                [goal_id],
                [line],
            )
            self._status.insert(0, self._code(""))
            self._size = 1
            return 0
        k, i, ids = self._place(goal_id)
        lines = self._blobs[k].split(_SEP)
        if i < len(ids) and ids[i] == goal_id:
            if lines[i] != line:
                lines[i] = line
                self._blobs[k] = _SEP.join(lines)
            return self._starts[k] + i
        ids.insert(i, goal_id)
        lines.insert(i, line)
        self._status.insert(self._starts[k] + i, self._code(""))
        self._size += 1
        self._shift(k, 1)
        if len(ids) > 2 * CHUNK:  # split: a chunk stays a fast scan
            half = len(ids) // 2
            self._starts.insert(k + 1, self._starts[k] + half)
            self._firsts.insert(k + 1, ids[half])
            self._idblobs[k : k + 1] = [_SEP.join(ids[:half]), _SEP.join(ids[half:])]
            self._blobs[k : k + 1] = [_SEP.join(lines[:half]), _SEP.join(lines[half:])]
        else:
            self._firsts[k] = ids[0]
            self._idblobs[k], self._blobs[k] = _SEP.join(ids), _SEP.join(lines)
        return self._starts[k] + i

    def _remove(self, goal_id: str) -> bool:
        if not self._idblobs:
            return False
        k, i, ids = self._place(goal_id)
        if not (i < len(ids) and ids[i] == goal_id):
            return False
        lines = self._blobs[k].split(_SEP)
        del ids[i], lines[i], self._status[self._starts[k] + i]
        self._size -= 1
        self._shift(k, -1)
        if ids:
            self._firsts[k] = ids[0]
            self._idblobs[k], self._blobs[k] = _SEP.join(ids), _SEP.join(lines)
        else:
            del self._starts[k], self._firsts[k], self._idblobs[k], self._blobs[k]
        return True

    def _shift(self, k: int, by: int) -> None:
        """Chunks after ``k`` start ``by`` positions later."""
        for later in range(k + 1, len(self._starts)):
            self._starts[later] += by

    def _recent_first(self) -> Iterator[str]:
        """Every Goal once, most recently changed first."""
        seen: set[str] = set()
        for goal_id in self._newest_places():
            if goal_id not in seen:
                seen.add(goal_id)
                yield goal_id

    def _newest_places(self) -> Iterator[str]:
        yield from reversed(self._newer)
        order, start = self._order, 0
        while start < len(order):  # the joined ids, one at a time
            end = order.find(_SEP, start)
            end = len(order) if end < 0 else end
            yield order[start:end]
            start = end + 1

    def _fold_order(self) -> None:
        """The order joined again, each Goal once (its earlier places dropped)."""
        self._order, self._newer = _SEP.join(list(self._recent_first())), []

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
            ids = self._idblobs[k].split(_SEP)
            for goal_id, line in zip(ids, blob.split(_SEP), strict=True):
                if needle in line:
                    found.append(goal_id)
                    if len(found) >= limit:
                        return found
        return found

    def listed(self, active: int, recent: int) -> list[str]:
        """The unfiltered list, by id: the first ``active`` active Goals (by id) and the
        ``recent`` most recently changed terminal ones (as ``Reader.visible_goal_ids``)."""
        found = self._active[:active]
        ended, status = 0, self._status_reader()
        for goal_id in self._recent_first():  # most recent first: a few hundred steps
            if ended >= recent:
                break
            if status(goal_id) in TERMINAL:
                found.append(goal_id)
                ended += 1
        return sorted(set(found))

    def _status_reader(self) -> Callable[[str], str | None]:
        """Goal id → its status, each chunk's ids split once however many Goals are asked."""
        split: dict[int, list[str]] = {}

        def status(goal_id: str) -> str | None:
            if not self._idblobs:
                return None
            k = max(bisect_right(self._firsts, goal_id) - 1, 0)
            ids = split.get(k)
            if ids is None:
                ids = split[k] = self._idblobs[k].split(_SEP)
            i = bisect_left(ids, goal_id)
            if i < len(ids) and ids[i] == goal_id:
                return self._names[self._status[self._starts[k] + i]]
            return None

        return status


def matches(row: GoalRow, text: str) -> bool:
    """The filter as a commit's row is judged by (the index judges a new list's)."""
    if not text:
        return True
    needle = text.lower()
    return any(needle in f.lower() for f in (row.goal_id, row.title, row.status, row.node_id))
