"""Pulses (DESIGN §17): attempts started, completed and failed per minute over the last hour.

Built from the journal's history by commit time, so they are full the moment a dashboard opens:
the first event of the hour is found by a binary search over the gap-free sequence (each probe
one index seek), then only the attempt events after it are read (an index range, ``types``).
Kept current from the events a reader already has (``note``). Commit times are wall clock,
informational: a clock stepped back only moves a count to another minute.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING

from store.journal.api import MAX_PAGE

if TYPE_CHECKING:
    from store.journal.api import Journal

WINDOW_MIN = 60
KINDS = ("starts", "completions", "failures")
# Failures: an attempt that failed (the last of an exhausted Run's too) or was interrupted.
KIND_OF = {
    "attempt.claimed": "starts",
    "attempt.completed": "completions",
    "attempt.failed": "failures",
    "attempt.interrupted": "failures",
}


class Pulses:
    """Counts per (kind, minute since the epoch), the last ``WINDOW_MIN`` minutes kept."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, int]] = Counter()

    def note(self, events: Iterable[tuple[str, float]]) -> bool:
        """(type, committed_at) of events; True if any was counted."""
        counted = False
        for type_, at in events:
            if (kind := KIND_OF.get(type_)) is not None:
                self.counts[(kind, int(at // 60))] += 1
                counted = True
        return counted

    def copy(self) -> Pulses:
        other = Pulses()
        other.counts = self.counts.copy()
        return other

    def series(self, now: float) -> dict[str, list[int]]:
        """Each kind's counts, oldest minute first, the current minute last."""
        last = int(now // 60)
        minutes = range(last - WINDOW_MIN + 1, last + 1)
        for key in [k for k in self.counts if k[1] < minutes[0]]:
            del self.counts[key]  # older than the window: never shown again
        return {kind: [self.counts[(kind, m)] for m in minutes] for kind in KINDS}


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


def read_pulses(journal: Journal, now: float) -> Pulses:
    """The last hour's pulses from the journal's history."""
    pulses = Pulses()
    after = first_sequence_since(journal, now - WINDOW_MIN * 60)
    types = sorted(KIND_OF)
    while records := journal.event_records(after, MAX_PAGE, types):
        pulses.note((r[3], r[5]) for r in records)
        after = records[-1][0]
    return pulses
