"""Pulses (DESIGN §17): attempts started, completed and failed per minute over the last hour.

Built from the journal's history by commit time, so they are full the moment a dashboard opens:
the first event of the hour is found by a binary search over the gap-free sequence (each probe
one index seek), then only the attempt events after it are read (an index range, ``types``).
Kept current from the events a reader already has (``note``). Counted per Goal too (an attempt
event's aggregate is its Run, ``run:GOAL.rN``), so that a filter's pulses (``narrowed``) are a sum
in memory, not another read. Commit times are wall clock, informational: a clock stepped back
only moves a count to another minute.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from store.journal.api import MAX_PAGE
from store.model.goal import chosen_end, goal_id_of

if TYPE_CHECKING:
    from store.journal.api import Journal

WINDOW_MIN = 60
EventData = Mapping[str, Any] | str | None  # as read: parsed (``Event.data``) or stored text
KINDS = ("starts", "completions", "failures")
# Failures: an attempt that failed (the last of an exhausted Run's too) or was interrupted by
# what befell it (its process gone, confirmed lost), not by a Stop's or a Cancel's choice: a
# batch cancel of a bad deploy drew a spike of failures.
KIND_OF = {
    "attempt.claimed": "starts",
    "attempt.completed": "completions",
    "attempt.failed": "failures",
    "attempt.interrupted": "failures",
}


class Pulses:
    """Counts per (kind, minute since the epoch), in all and per Goal; the last ``WINDOW_MIN``
    minutes kept (``series`` and ``prune`` drop older ones)."""

    def __init__(self, narrowed: bool = False) -> None:
        self.counts: Counter[tuple[str, int]] = Counter()
        self.by_goal: dict[str, Counter[tuple[str, int]]] = {}
        self.latest: dict[str, int] = {}  # each Goal's last minute counted (``prune``)
        self.narrowed = narrowed  # the counts are only some Goals' (``narrowed``)

    def note(self, events: Iterable[tuple[str, float, str, EventData]]) -> bool:
        """(type, committed_at, aggregate_id, data) of events; True if any was counted. ``data``
        as read (a mapping, or the stored JSON text), looked at only for an interruption."""
        counted = False
        for type_, at, aggregate_id, data in events:
            if (kind := KIND_OF.get(type_)) is not None and not _chosen(type_, data):
                key = (kind, int(at // 60))
                self.counts[key] += 1
                if (goal_id := goal_id_of(aggregate_id)) is not None:
                    self.by_goal.setdefault(goal_id, Counter())[key] += 1
                    self.latest[goal_id] = max(key[1], self.latest.get(goal_id, key[1]))
                counted = True
        return counted

    def totals(self) -> Pulses:
        """The counts of every Goal, without the per-Goal ones (what a screen draws)."""
        other = Pulses()
        other.counts = self.counts.copy()
        return other

    def narrowed_to(self, goal_ids: Collection[str]) -> Pulses:
        """The counts of ``goal_ids`` only, summed in memory: a walk of the smaller of them and
        the Goals counted this hour."""
        other = Pulses(narrowed=True)
        if len(goal_ids) < len(self.by_goal):
            counted = (self.by_goal.get(g) for g in goal_ids)
        else:
            counted = (c for g, c in self.by_goal.items() if g in goal_ids)
        for counts in counted:
            if counts:
                other.counts.update(counts)
        return other

    def prune(self, now: float) -> None:
        """Drop the minutes older than the window: the Goals counted in none of the window's
        (a comparison each, not a look into each Goal's counts: 30,000 Goals took ≈ 40 ms
        that way), and a Goal's old minutes once it holds more than a window's worth (older
        minutes are harmless meanwhile: ``series`` never shows them)."""
        first = int(now // 60) - WINDOW_MIN + 1
        _drop_before(self.counts, first)
        for goal_id in [g for g, last in self.latest.items() if last < first]:
            del self.by_goal[goal_id], self.latest[goal_id]
        for counts in self.by_goal.values():
            if len(counts) > len(KINDS) * WINDOW_MIN:
                _drop_before(counts, first)

    def series(self, now: float) -> dict[str, list[int]]:
        """Each kind's counts, oldest minute first, the current minute last."""
        last = int(now // 60)
        minutes = range(last - WINDOW_MIN + 1, last + 1)
        _drop_before(self.counts, minutes[0])  # older than the window: never shown again
        return {kind: [self.counts[(kind, m)] for m in minutes] for kind in KINDS}


def _chosen(type_: str, data: EventData) -> bool:
    """An interruption that was a Stop's or a Cancel's choice (``chosen_end``)."""
    if type_ != "attempt.interrupted" or data is None:
        return False
    parsed = json.loads(data) if isinstance(data, str) else data
    cleanup = parsed.get("cleanup") if isinstance(parsed, Mapping) else None
    return isinstance(cleanup, Mapping) and chosen_end(cleanup)


def _drop_before(counts: Counter[tuple[str, int]], first: int) -> None:
    """Drop the minutes before ``first``."""
    for key in [k for k in counts if k[1] < first]:
        del counts[key]


def first_sequence_since(journal: Journal, since: float) -> int:
    """The sequence just before the first event committed at or after ``since`` (a binary
    search over the sequence: each probe reads one event through the index)."""
    low, high = 0, journal.last_sequence()  # the answer is in [low, high]
    while low < high:
        mid = (low + high) // 2
        probe = journal.events_after(mid, limit=1)
        if probe and probe[0].committed_at < since:
            low = mid + 1
        else:
            high = mid
    return low


def read_pulses(journal: Journal, now: float, upto: int | None = None) -> Pulses:
    """The last hour's pulses from the journal's history (``upto``: its events up to this
    sequence only, those a reader has seen: it notes the later ones when it reads them)."""
    pulses = Pulses()
    after = first_sequence_since(journal, now - WINDOW_MIN * 60)
    types = sorted(KIND_OF)
    while records := journal.event_records(after, MAX_PAGE, types):
        if upto is not None and records[-1][0] > upto:
            records = [r for r in records if r[0] <= upto]
            pulses.note((r[3], r[5], r[1], r[4]) for r in records)
            break
        pulses.note((r[3], r[5], r[1], r[4]) for r in records)
        after = records[-1][0]
    return pulses
