"""The invariant checker behind `refine check`: fold every aggregate's events, compare, cross-check.

It reads only; every violation names the aggregate and the event sequences involved.

A journal is read in pages (issue 27: a million Goals are ≈ 7 million events): the events in
sequence order once (gaps, unreadable data, the outbox), then the aggregates in id order, each
with its own history (a page's histories in one read: on PostgreSQL a round trip per aggregate
was most of the time). Nothing is kept between pages but counts, so memory stays flat. That every
event is in its aggregate's history is proved by counting: each history holds only its own
aggregate's events, so the histories' lengths add up to the number of events exactly when each
holds all of them. A journal with any violation is then read again whole, the way that names each
violation's events exactly (holding the journal in memory: damage is rare, its report precise).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from store.errors import RefineError
from store.journal.api import MAX_PAGE, Event, Journal, Stored
from store.journal.core import UnreadableData
from store.model.goal import GOAL_EVENT_STATUS, fold_goal, goal_from_stored
from store.model.run import fold_run, run_from_stored
from store.statuses import TERMINAL_STATUSES

__all__ = ["GOAL_EVENT_STATUS", "CheckReport", "Violation", "check_journal", "fold_goal"]

# Which Run statuses each Goal status may sit on (a cancelled Goal's Run may still be running
# with a pending cancel request until its process is cleaned up).
AGREEING_RUN_STATUS: Mapping[str, tuple[str, ...]] = {
    "queued": ("queued",),
    "held": ("queued",),
    "running": ("running",),
    "completed": ("completed",),
    "exhausted": ("exhausted",),
    "cancelled": ("cancelled", "running"),
}


@dataclass(frozen=True)
class Violation:
    aggregate_id: str
    sequences: tuple[int, ...]
    message: str

    def to_json(self) -> dict[str, Any]:
        return {
            "aggregate_id": self.aggregate_id,
            "sequences": list(self.sequences),
            "message": self.message,
        }


@dataclass
class CheckReport:
    goals: int = 0
    runs: int = 0
    events: int = 0
    violations: list[Violation] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not self.violations

    def add(self, aggregate_id: str, sequences: tuple[int, ...], message: str) -> None:
        self.violations.append(Violation(aggregate_id, sequences, message))

    def to_json(self) -> dict[str, Any]:
        return {
            "clean": self.clean,
            "goals": self.goals,
            "runs": self.runs,
            "events": self.events,
            "violations": [v.to_json() for v in self.violations],
        }

    def text(self) -> str:
        head = f"checked {self.goals} goals, {self.runs} runs, {self.events} events: " + (
            "clean" if self.clean else f"{len(self.violations)} violation(s)"
        )
        lines = [f"  {v.aggregate_id} at {list(v.sequences)}: {v.message}" for v in self.violations]
        return "\n".join([head, *lines])


Progress = Callable[[int, int], None]  # (rows checked, rows in all: events + aggregates)
PAGE = 500  # aggregates read and checked at a time


def check_journal(journal: Journal, progress: Progress | None = None) -> CheckReport:
    """Check every invariant over one consistent snapshot of the journal."""
    report = _check_in_pages(journal, progress or _quiet)
    return report if report.clean else _check_whole(journal)


def _quiet(done: int, total: int) -> None:
    pass


def _check_in_pages(journal: Journal, progress: Progress) -> CheckReport:
    """Every check with memory flat; any violation it finds is named by ``_check_whole``."""
    report = CheckReport()
    with journal.snapshot():
        total = journal.last_sequence() + journal.count("goal") + journal.count("run")
        done = _check_event_pages(journal, report, progress, total)
        in_histories = 0
        for kind in ("goal", "run"):
            for page in _aggregate_pages(journal, kind):
                in_histories += _check_page(journal, report, page)
                done += len(page)
                progress(min(done, total), total)
    if in_histories != report.events:
        report.add("events", (), "events outside their aggregate's history")
    return report


def _check_event_pages(
    journal: Journal, report: CheckReport, progress: Progress, total: int
) -> int:
    """Sequence gaps, unreadable data, and the outbox naming each event: page by page."""
    after, expected = 0, 1
    while page := journal.events_after(after):
        for event in page:
            if event.sequence != expected:
                report.add(event.aggregate_id, (expected, event.sequence), "sequence has a gap")
            expected = event.sequence + 1
            if isinstance(event.data, UnreadableData):
                report.add(event.aggregate_id, (event.sequence,), "event data is not a JSON object")
        fed = [(e.sequence, e.aggregate_id, e.type) for e in page]
        if [tuple(row) for row in journal.outbox(after, len(page))] != fed:
            report.add("outbox", (fed[0][0],), "outbox rows that differ from their event")
        after = page[-1].sequence
        report.events += len(page)
        progress(min(report.events, total), total)
    if journal.outbox(after, 1):
        report.add("outbox", (after,), "outbox rows without an event")
    return report.events


def _aggregate_pages(journal: Journal, kind: str) -> Iterator[list[Stored]]:
    after: str | None = None
    while page := journal.aggregates(kind, limit=PAGE, after_id=after):
        yield page
        after = page[-1].aggregate_id


def _check_page(journal: Journal, report: CheckReport, page: list[Stored]) -> int:
    """One page of aggregates of one kind; the number of events in their histories."""
    events = _Histories(journal)
    events.read([stored.aggregate_id for stored in page])
    for stored in page:
        _check_aggregate(report, stored.aggregate_id, stored, events[stored.aggregate_id])
    goals = [s for s in page if s.aggregate_id.startswith("goal:")]
    if goals:
        runs = journal.load_many(sorted({run for g in goals for run in _runs_of(g)}))
        events.read(sorted({run for g in goals for run in _runs_cancelled(g, events)}))
        for goal in goals:
            _check_goal_against_runs(report, goal, runs, events)
    return sum(len(events[s.aggregate_id]) for s in page)


def _runs_of(goal: Stored) -> list[str]:
    """The Runs a Goal's record names: its current one and those of its earlier rounds."""
    state = goal.state
    if not isinstance(state, Mapping):
        return []
    runs = [f"run:{state.get('run_id')}"]
    if type(state.get("round")) is int:
        name = goal.aggregate_id.split(":", 1)[1]
        runs += [f"run:{name}.r{n}" for n in range(1, state["round"])]
    return runs


def _runs_cancelled(goal: Stored, events: Mapping[str, list[Event]]) -> set[str]:
    """The Runs of a cancelled Goal, whose histories its check reads."""
    mine = events[goal.aggregate_id]
    return _runs_named(mine) if any(e.type == "goal.cancelled" for e in mine) else set()


def _runs_named(goal_events: list[Event]) -> set[str]:
    """Every Run a Goal ever had: its own events name each (created, reassigned)."""
    return {f"run:{e.data['run_id']}" for e in goal_events if "run_id" in e.data}


class _Histories(Mapping[str, list[Event]]):
    """Aggregates' histories: a page's read together (one round trip on PostgreSQL), any other
    read when first asked for (a Run's only if a check needs it)."""

    def __init__(self, journal: Journal) -> None:
        self._journal = journal
        self._read: dict[str, list[Event]] = {}

    def read(self, aggregate_ids: list[str]) -> None:
        unread = [agg for agg in aggregate_ids if agg not in self._read]
        if unread:
            self._read.update(self._journal.histories(unread))

    def __getitem__(self, aggregate_id: str) -> list[Event]:
        if aggregate_id not in self._read:
            self.read([aggregate_id])
        return self._read[aggregate_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._read)

    def __len__(self) -> int:
        return len(self._read)


def _check_whole(journal: Journal) -> CheckReport:
    """Every check with the whole journal in memory: each violation named with its events."""
    report = CheckReport()
    with journal.snapshot():
        events = _events_by_aggregate(journal, report)
        stored = {s.aggregate_id: s for kind in ("goal", "run") for s in journal.aggregates(kind)}
        outbox = {row[0]: row for row in _all_outbox(journal)}
        _check_histories(report, journal, events)
    _check_outbox(report, events, outbox)
    for aggregate_id in sorted(set(stored) | set(events)):
        _check_aggregate(
            report, aggregate_id, stored.get(aggregate_id), events.get(aggregate_id, [])
        )
    for aggregate_id, goal_stored in stored.items():
        if aggregate_id.startswith("goal:"):
            _check_goal_against_runs(report, goal_stored, stored, events)
    return report


def _events_by_aggregate(journal: Journal, report: CheckReport) -> dict[str, list[Event]]:
    events: dict[str, list[Event]] = defaultdict(list)
    expected = 1
    for event in _all_events(journal):
        if event.sequence != expected:
            report.add(event.aggregate_id, (expected, event.sequence), "sequence has a gap")
        expected = event.sequence + 1
        events[event.aggregate_id].append(event)
        report.events += 1
        if isinstance(event.data, UnreadableData):
            report.add(event.aggregate_id, (event.sequence,), "event data is not a JSON object")
    return events


def _all_events(journal: Journal) -> Iterator[Event]:
    after = 0
    while page := journal.events_after(after):
        yield from page
        after = page[-1].sequence


def _all_outbox(journal: Journal) -> Iterator[tuple[int, str, str]]:
    after = 0
    while page := journal.outbox(after):
        yield from page
        after = page[-1][0]


def _check_histories(
    report: CheckReport, journal: Journal, events: Mapping[str, list[Event]]
) -> None:
    """Each aggregate's history (read by the way the backend finds one aggregate's events: on
    SQLite a chain through ``prev``, on PostgreSQL an index) is its slice of the events."""
    for aggregate_id, mine in events.items():
        found: list[int] = []
        while page := journal.history(aggregate_id, found[-1] if found else 0, MAX_PAGE):
            found += [e.sequence for e in page]
        if found != [e.sequence for e in mine]:
            missing = sorted({e.sequence for e in mine} ^ set(found))
            report.add(aggregate_id, tuple(missing[:20]), "its history differs from its events")


def _check_outbox(
    report: CheckReport,
    events: Mapping[str, list[Event]],
    outbox: Mapping[int, tuple[int, str, str]],
) -> None:
    """The outbox feed names every event, with its aggregate and its type as topic. Both
    backends now derive it from the events (a view); a journal read before its migration still
    has the table of rows it kept, and an exported one is checked by its target's import."""
    fed = {e.sequence: (e.sequence, e.aggregate_id, e.type) for evs in events.values() for e in evs}
    missing = sorted(set(fed) - set(outbox))
    if missing:
        report.add("outbox", tuple(missing[:20]), "events without an outbox row")
    differ = sorted(seq for seq in set(fed) & set(outbox) if fed[seq] != tuple(outbox[seq]))
    if differ:
        report.add("outbox", tuple(differ[:20]), "outbox rows that differ from their event")


def _check_aggregate(
    report: CheckReport, aggregate_id: str, stored: Stored | None, events: list[Event]
) -> None:
    seqs = tuple(e.sequence for e in events[-3:])
    if stored is None:
        report.add(aggregate_id, seqs, "events without a stored state")
        return
    versions = sorted({e.version for e in events})
    if versions != list(range(1, stored.version + 1)):
        report.add(
            aggregate_id,
            seqs,
            f"versions {versions[:5]}… do not run 1..{stored.version} one per command",
        )
    kind = aggregate_id.split(":", 1)[0]
    try:
        if kind == "run":
            report.runs += 1
            run_from_stored(stored)
            folded = fold_run(events)
        else:
            report.goals += 1
            goal_from_stored(stored)
            folded = fold_goal(events)
    except RefineError as exc:
        report.add(aggregate_id, seqs, f"stored record refused: {exc}")
        return
    except (KeyError, TypeError, ValueError) as exc:
        report.add(aggregate_id, seqs, f"events do not fold: {exc!r}")
        return
    if folded != stored.state:
        report.add(aggregate_id, seqs, "stored state differs from the fold of its events")


def _check_goal_against_runs(
    report: CheckReport,
    goal_stored: Stored,
    stored: Mapping[str, Stored],
    events: Mapping[str, list[Event]],
) -> None:
    goal = goal_stored.state
    goal_id = goal_stored.aggregate_id
    if not isinstance(goal, Mapping):
        return  # not a record at all: _check_aggregate reports it
    run_agg = f"run:{goal.get('run_id')}"
    run = stored.get(run_agg)
    if run is None:
        report.add(goal_id, (), f"its run {goal.get('run_id')} does not exist")
        return
    if not isinstance(run.state, Mapping):
        return  # likewise, reported as the run's own violation
    allowed = AGREEING_RUN_STATUS.get(str(goal.get("status")), ())
    run_status = run.state.get("status")
    pending = run.state.get("cancel_requested") is not None
    if run_status not in allowed or (
        goal.get("status") == "cancelled" and run_status == "running" and not pending
    ):
        seqs = _last(events.get(goal_id)) + _last(events.get(run_agg))
        report.add(goal_id, seqs, f"goal is {goal.get('status')} but its run is {run_status}")
    _check_earlier_rounds(report, goal_id, goal, stored, events)
    _check_no_claim_while_stopped(report, goal_id, events)


def _check_earlier_rounds(
    report: CheckReport,
    goal_id: str,
    goal: Mapping[str, Any],
    stored: Mapping[str, Stored],
    events: Mapping[str, list[Event]],
) -> None:
    """Only the current round's Run may still be open: a Round moves on only by cancelling it."""
    current = goal.get("round")
    if type(current) is not int:
        return
    for round_ in range(1, current):
        run_agg = f"run:{goal_id.split(':', 1)[1]}.r{round_}"
        run = stored.get(run_agg)
        state = run.state if run is not None else None
        status = state.get("status") if isinstance(state, Mapping) else None
        if status not in TERMINAL_STATUSES:
            seqs = _last(events.get(goal_id)) + _last(events.get(run_agg))
            report.add(goal_id, seqs, f"run of earlier round {round_} is {status or 'missing'}")


def _check_no_claim_while_stopped(
    report: CheckReport, goal_id: str, events: Mapping[str, list[Event]]
) -> None:
    """A cancelled Goal never gets a later attempt; a held Goal none before its release."""
    goal_events = events.get(goal_id, [])
    cancelled = [e.sequence for e in goal_events if e.type == "goal.cancelled"]
    if cancelled:
        late = [
            e.sequence
            for run in sorted(_runs_named(goal_events))
            for e in events.get(run, [])
            if e.type == "attempt.claimed" and e.sequence > cancelled[0]
        ]
        if late:
            report.add(goal_id, (cancelled[0], *late), "attempt claimed after the goal's cancel")
    blocked_since: tuple[str, int] | None = None
    for event in goal_events:
        if event.type in ("goal.cancelled", "goal.held"):
            blocked_since = (event.type, event.sequence)
        elif event.type in ("goal.released", "goal.queued") and blocked_since:
            if blocked_since[0] == "goal.cancelled":
                report.add(goal_id, (blocked_since[1], event.sequence), "cancelled goal requeued")
            blocked_since = None
        elif event.type == "goal.started" and blocked_since:
            report.add(
                goal_id,
                (blocked_since[1], event.sequence),
                f"attempt started after {blocked_since[0]}",
            )


def _last(events: list[Event] | None) -> tuple[int, ...]:
    return (events[-1].sequence,) if events else ()
