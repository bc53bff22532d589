"""What the metrics count, folded from the journal's events (DESIGN §16).

A scrape must not reread history: ``JournalStats`` folds each event once, in sequence order, and
keeps only what the figures need (the running attempts, the runs waiting to be claimed, counts
and histogram buckets), so a later scrape reads just the events after its last sequence (an
index range). It reads only the event types in ``FOLDED`` and parses the data of those whose
fields it needs. The figures agree with the stored records at the folded sequence: an attempt's
node is the node part of its worker's name (``<node>/<token>``), its outcome its final state, as
``refine runs --json`` shows them; a Goal's terminal status is for good, so the events that
reach one count it.

Times are the events' commit times (wall clock, informational): an attempt's duration runs from
its claim to its ending; its queue wait from when its Run became claimable (submitted, requeued
by the previous attempt's ending, or released from held) to its claim.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from store.journal.api import EventRecord
from store.journal.core import loads
from store.journal.presence import Presence

OUTCOMES = ("completed", "failed", "interrupted")
ENDINGS = {f"attempt.{outcome}": outcome for outcome in OUTCOMES}
RUN_ENDS = frozenset({"run.completed", "run.exhausted", "run.cancelled"})
GOAL_ENDS = {"goal.completed": "completed", "goal.exhausted": "exhausted",
             "goal.cancelled": "cancelled"}  # fmt: skip
# The types the fold reads (the rest, e.g. goal.created and its large recipe, it never reads).
FOLDED = frozenset(
    {*ENDINGS, *RUN_ENDS, *GOAL_ENDS, "attempt.claimed", "run.submitted",
     "run.cancel-requested", "goal.held", "goal.released"}
)  # fmt: skip
# Seconds. An attempt lasts from a second to a day; a claim comes within milliseconds on an idle
# node and hours behind a backlog.
DURATION_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200, 86400)
QUEUE_WAIT_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 14400, 86400)


class Histogram:
    """Observations counted into fixed buckets (upper bounds, +Inf implied), and their sum."""

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        value = max(value, 0.0)  # a clock stepped back between two commits: count it as 0
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value

    def cumulative(self) -> list[tuple[str, int]]:
        """``(le, observations ≤ le)`` per bucket, ``+Inf`` last: the exposition's buckets."""
        out, total = [], 0
        for bound, count in zip([*map(str, self.bounds), "+Inf"], self.counts, strict=True):
            total += count
            out.append((bound, total))
        return out


class JournalStats:
    """The fold of a journal's events, up to ``sequence``. Every figure is kept as it changes,
    so reading them costs nothing however many attempts run."""

    def __init__(self) -> None:
        self.sequence = 0
        self.nodes: set[str] = set()  # every node an attempt ran on
        # run aggregate → (epoch, node, worker, claimed at) of its running attempt (at most one)
        self.running: dict[str, tuple[int, str, str, float]] = {}
        self.running_count: Counter[str] = Counter()  # node → attempts running there
        self.finished: Counter[tuple[str, str]] = Counter()  # (node, outcome) → attempts
        self.durations = Histogram(DURATION_BUCKETS)
        self.queue_waits = Histogram(QUEUE_WAIT_BUCKETS)
        self.last_seen: dict[str, float] = {}  # node → its last act in the journal
        self.terminal_goals: Counter[str] = Counter()  # terminal status → Goals
        self._claimable: dict[str, float] = {}  # run aggregate → claimable since
        self._held: set[str] = set()  # runs of held Goals (claimable only once released)
        self._cancel_requested: set[str] = set()  # running runs whose cancel awaits cleanup

    def fold(self, records: Iterable[EventRecord]) -> None:
        for record in records:
            self.apply(record)

    def apply(self, record: EventRecord) -> None:
        sequence, run, _, kind, text, at, _ = record
        if kind == "run.submitted":
            self._claimable[run] = at
        elif kind in GOAL_ENDS:
            self.terminal_goals[GOAL_ENDS[kind]] += 1
        elif kind == "attempt.claimed":
            self._claimed(run, _data(text), at)
        elif kind in ENDINGS:
            self._ended(run, ENDINGS[kind], _data(text), at)
        elif kind in RUN_ENDS:
            self._claimable.pop(run, None)
            self._held.discard(run)
            self._cancel_requested.discard(run)
        elif kind == "run.cancel-requested":
            if run in self.running:
                self._cancel_requested.add(run)
        elif kind == "goal.held":  # before its attempt's ending, in the same command
            self._held.add(f"run:{_data(text).get('run_id')}")
        elif kind == "goal.released":
            held = f"run:{_data(text).get('run_id')}"
            self._held.discard(held)
            self._claimable[held] = at
        self.sequence = max(self.sequence, sequence)

    def _claimed(self, run: str, data: Mapping[str, Any], at: float) -> None:
        worker = str(data.get("worker", ""))
        node = node_of_worker(worker)
        self.nodes.add(node)
        since = self._claimable.pop(run, None)
        if since is not None:
            self.queue_waits.observe(at - since)
        if run in self.running:  # a claim over a running attempt: a record `check` reports
            self.running_count[self.running[run][1]] -= 1
        self.running[run] = (_epoch(data), node, worker, at)
        self.running_count[node] += 1
        self.last_seen[node] = at

    def _ended(self, run: str, outcome: str, data: Mapping[str, Any], at: float) -> None:
        attempt = self.running.get(run)
        if attempt is None or attempt[0] != _epoch(data):
            return  # an ending without its claim: a record `refine check` reports
        del self.running[run]
        self._cancel_requested.discard(run)
        _, node, worker, claimed = attempt
        self.running_count[node] -= 1
        self.finished[(node, outcome)] += 1
        self.durations.observe(at - claimed)
        cleanup = data.get("cleanup")
        by = cleanup.get("confirmed_by") if isinstance(cleanup, Mapping) else None
        if outcome != "interrupted" or by in (worker, f"scheduler@{node}"):
            self.last_seen[node] = at  # reported by the node itself (not by an operator)
        if outcome != "completed" and run not in self._held:
            self._claimable[run] = at  # requeued (a Run's ending event, if any, follows)

    def cleanup_pending(self) -> int:
        """Running attempts of Runs whose cancellation is requested: the cleanup (the end of
        the attempt's process, recorded) that the cancel still waits for."""
        return len(self._cancel_requested)


def node_of_worker(worker: str) -> str:
    """A worker is named ``<node>/<token>`` (store.worker): its node."""
    return worker.partition("/")[0] or worker


def _data(text: str) -> Mapping[str, Any]:
    try:
        data = loads(text)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}  # unreadable: `refine check` reports it


def _epoch(data: Mapping[str, Any]) -> int:
    epoch = data.get("epoch")
    return epoch if isinstance(epoch, int) else 0


def node_presence(
    nodes: Iterable[str], stats: JournalStats, beats: Sequence[Presence], now: float
) -> dict[str, tuple[bool, float | None]]:
    """Each node's (up, last seen), from its heartbeats (``store.journal.presence``): up while
    ``live`` by the database's clock ``now``. A node that never beat (it has goals, or acted in
    the journal, but was not started since presence exists) is down, last seen at its last act
    in the journal (a claim, a report), if any. Presence is evidence, never authority."""
    beaten = {row.node_id: row for row in beats}
    found: dict[str, tuple[bool, float | None]] = {}
    for node in {*nodes, *beaten}:
        row = beaten.get(node)
        if row is None:
            found[node] = (False, stats.last_seen.get(node))
        else:
            found[node] = (row.state(now) == "live", row.last_seen)
    return found
