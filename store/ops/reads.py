"""Reads for screens: what a dashboard shows, without knowing how the journal keys its records.

The UI asks here for Goals with their current Run (in bulk, one snapshot), the Runs of a Goal,
a Run's history and attempt times, and which Goals a batch of events touched; aggregate ids
(``goal:<id>``, ``run:<id>``) stay inside the store. Every record is validated on read; a broken
one comes back as its error, for the screen to show, never as an exception mid-list.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from store.errors import RefineError
from store.journal.api import Event, Journal, Stored
from store.model.goal import Goal, goal_aggregate_id, goal_from_stored, goal_id_of, run_id_for
from store.model.run import Run, attempt_id_for, run_aggregate_id, run_from_stored
from store.records import dataclass

PAGE = 1000  # history page (a Run has at most 20 attempts: one page in practice)
ENDINGS = frozenset({"attempt.completed", "attempt.failed", "attempt.interrupted"})
# A worker records its process right after its claim commits, then opens its log: an attempt
# with neither, claimed less than this ago, is starting (not gone: no cleanup, no Stop yet).
LAUNCH_WINDOW_S = 10.0


@dataclass(frozen=True)
class GoalAndRun:
    """A Goal and its current Run as stored now; a corrupt one carries its error instead."""

    goal_id: str
    goal: Goal | None
    run: Run | None = None
    error: RefineError | None = None  # the Goal's record is corrupt
    run_error: RefineError | None = None  # the current Run's record is corrupt


def goals_touched(events: Iterable[Event]) -> list[str]:
    """The Goals a batch of events changed (a Goal's own events and its Runs'), first seen first."""
    seen: dict[str, None] = {}
    for event in events:
        goal_id = goal_id_of(event.aggregate_id)
        if goal_id is not None:
            seen[goal_id] = None
    return list(seen)


def goal_ids(
    journal: Journal,
    *,
    status: Sequence[str] | None = None,
    newest_first: bool = False,
    limit: int | None = None,
) -> list[str]:
    """Ids of stored Goals (not parsed: a listing reads the records it shows afterwards)."""
    statuses = list(status) if status is not None else None
    found = journal.aggregates("goal", status=statuses, newest_first=newest_first, limit=limit)
    return [s.aggregate_id.partition(":")[2] for s in found]


def goal_states(
    journal: Journal,
    contains: str | None = None,
    *,
    newest_first: bool = False,
    page: int | None = None,
) -> Iterator[tuple[str, Mapping[str, object]]]:
    """(goal id, stored state) of every Goal, unparsed and maybe corrupt: a search's haystack.

    ``contains``: only Goals whose stored record has this text somewhere (a cheap pre-filter);
    ``newest_first``: by each Goal's last commit, newest first (else by id); ``page``: read that
    many at a time (call under ``journal.snapshot()``), so a caller keeping a little of each
    never holds every state at once (≈ 265 MB at 100k Goals).
    """
    # Each page starts where the last one ended (an index range), never at an offset: skipping
    # reads every row skipped, so a million Goals in pages read ≈ 250 million rows.
    after: dict[str, Any] = {}
    while True:
        batch = journal.aggregates(
            "goal", contains=contains, newest_first=newest_first, limit=page, **after
        )
        for stored in batch:
            state = stored.state if isinstance(stored.state, dict) else {}
            yield stored.aggregate_id.partition(":")[2], state
        if page is None or len(batch) < page:
            return
        last = batch[-1]
        after = {"before": last.recency} if newest_first else {"after_id": last.aggregate_id}


def goal_fields(
    journal: Journal, names: Sequence[str], *, page: int
) -> Iterator[tuple[str, tuple[Any, ...]]]:
    """(goal id, the named fields of its stored state) of every Goal, newest first, ``page`` at
    a time (call under ``journal.snapshot()``), by ``Journal.state_fields``."""
    before: tuple[int, str] | None = None
    while True:
        batch = journal.state_fields("goal", names, limit=page, before=before)
        for aggregate_id, _, values in batch:
            yield aggregate_id.partition(":")[2], values
        if len(batch) < page:
            return
        before = (batch[-1][1], batch[-1][0])


def goals_with_runs(journal: Journal, ids: Sequence[str]) -> dict[str, GoalAndRun | None]:
    """These Goals with their current Runs, in one snapshot (None: no such Goal)."""
    goal_ids = [goal_aggregate_id(g) for g in ids]
    stored, runs = journal.load_linked(goal_ids, "run_id", run_aggregate_id(""))
    found: dict[str, GoalAndRun | None] = {}
    for goal_id, aggregate_id in zip(ids, goal_ids, strict=True):
        record = stored.get(aggregate_id)
        found[goal_id] = None if record is None else _goal_and_run(goal_id, record, runs)
    return found


def _goal_and_run(goal_id: str, record: Stored, runs: Mapping[str, Stored]) -> GoalAndRun:
    """A stored Goal and its Run among ``runs``, each corrupt one kept with its error."""
    try:
        goal = goal_from_stored(record)
    except RefineError as exc:
        return GoalAndRun(goal_id, None, error=exc)
    run_record = runs.get(run_aggregate_id(goal.run_id))
    try:
        run = run_from_stored(run_record) if run_record is not None else None
    except RefineError as exc:
        return GoalAndRun(goal_id, goal, run_error=exc)
    return GoalAndRun(goal_id, goal, run)


def read_goal(journal: Journal, goal_id: str) -> Goal | None:
    stored = journal.load(goal_aggregate_id(goal_id))
    return goal_from_stored(stored) if stored is not None else None


def read_run(journal: Journal, run_id: str) -> Run | None:
    stored = journal.load(run_aggregate_id(run_id))
    return run_from_stored(stored) if stored is not None else None


def runs_of(journal: Journal, goal: Goal) -> list[tuple[Run, float | None]]:
    """The Runs of every round of a Goal, oldest first, each with its submission time."""
    ids = [run_aggregate_id(run_id_for(goal.goal_id, n)) for n in range(1, goal.round + 1)]
    stored = journal.load_many(ids)
    runs = []
    for agg in ids:
        if agg in stored:
            first = journal.history(agg, 0, 1)
            runs.append((run_from_stored(stored[agg]), first[0].committed_at if first else None))
    return runs


def run_history(journal: Journal, run_id: str, after: int = 0) -> list[Event]:
    """Every event of a Run after sequence ``after``, oldest first."""
    return _history(journal, run_aggregate_id(run_id), after)


def goal_history(journal: Journal, goal_id: str) -> list[Event]:
    """Every event of a Goal itself (not its Runs'), oldest first."""
    return _history(journal, goal_aggregate_id(goal_id), 0)


def _history(journal: Journal, aggregate_id: str, after: int) -> list[Event]:
    events: list[Event] = []
    while True:
        page = journal.history(aggregate_id, after, PAGE)
        events += page
        if len(page) < PAGE:
            return events
        after = page[-1].sequence


def attempt_times(journal: Journal, run_id: str) -> tuple[dict[int, float], dict[int, float]]:
    """When each attempt of a Run was claimed and when it ended ({epoch: commit time} each)."""
    started: dict[int, float] = {}
    ended: dict[int, float] = {}
    for event in journal.history(run_aggregate_id(run_id), 0, PAGE):  # ≤ 20 attempts
        epoch = event.data.get("epoch")
        if not isinstance(epoch, int):
            continue
        if event.type == "attempt.claimed":
            started[epoch] = event.committed_at
        elif event.type in ENDINGS:
            ended[epoch] = event.committed_at
    return started, ended


class ClaimTimes:
    """When running attempts were claimed, learned from the events a reader already polled.

    A claim seen in a batch costs nothing more; one that predates the reader (its first full
    read) is looked up once in its Run's history and remembered.
    """

    LIMIT = 100_000  # forget everything past this many (a long-lived dashboard's bound)

    def __init__(self) -> None:
        self._at: dict[str, float] = {}

    def learn(self, events: Iterable[Event]) -> None:
        for event in events:
            if event.type == "attempt.claimed":
                if len(self._at) >= self.LIMIT:
                    self._at.clear()
                self._at[str(event.data.get("attempt_id"))] = float(event.committed_at)

    def get(self, journal: Journal, run_id: str, epoch: int) -> float | None:
        key = attempt_id_for(run_id, epoch)
        if key not in self._at:
            at = claimed_at(journal, run_id, epoch)
            if at is None:
                return None
            self._at[key] = at
        return self._at[key]


def claimed_at(journal: Journal, run_id: str, epoch: int) -> float | None:
    """When attempt ``epoch`` was claimed: its commit time (wall clock, informational)."""
    return attempt_times(journal, run_id)[0].get(epoch)


def launching(claimed: float | None, *, has_log: bool, now: float | None = None) -> bool:
    """An attempt with no process record is *starting* while its claim (commit time) is younger
    than the launch window and its log does not exist yet; otherwise nothing proves it runs.

    The one rule behind Stop's "starting" advice and the dashboard's `needs cleanup` marker.
    """
    if claimed is None or has_log:
        return False
    return (time.time() if now is None else now) - claimed < LAUNCH_WINDOW_S


def launch_ends(claimed: float) -> float:
    """When an attempt claimed at ``claimed`` stops counting as starting (wall clock)."""
    return claimed + LAUNCH_WINDOW_S
