"""What the dashboard shows, read from the journal and the node's process registry.

No Textual here: these functions run in threads, off the UI, and return plain frozen rows that
the widgets turn into cells. Every record is validated on read (goal_from_stored,
run_from_stored); a broken one becomes a row saying so, never an exception in the UI.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from store.errors import RefineError
from store.execution import run_from_stored
from store.goals import Goal, ended_by_words, goal_from_stored
from store.journal_api import Event, Journal, Stored
from store.operator import claimed_at, needs_cleanup
from store.processes import ProcessRecord, ProcessRegistry, observe, same_process

ACTIVE = ("queued", "held", "running")
TERMINAL = ("completed", "exhausted", "cancelled")
ACTIVE_LIMIT = 1000  # active Goals shown at most (DataTable paints ~1k rows in ≈ 0.4 s)
RECENT_LIMIT = 200  # most recent terminal Goals shown beside them
ENDINGS = {"attempt.completed", "attempt.failed", "attempt.interrupted"}


def goal_id_of(aggregate_id: str) -> str | None:
    """The Goal an aggregate belongs to: ``goal:G`` and ``run:G.rN`` both name ``G``."""
    kind, _, key = aggregate_id.partition(":")
    if kind == "goal":
        return key
    if kind == "run" and ".r" in key:
        return key.rpartition(".r")[0]
    return None


def goals_touched(events: Iterable[Event]) -> list[str]:
    seen: dict[str, None] = {}
    for event in events:
        goal_id = goal_id_of(event.aggregate_id)
        if goal_id is not None:
            seen[goal_id] = None
    return list(seen)


@dataclass(frozen=True)
class GoalRow:
    goal_id: str
    title: str
    node_id: str
    status: str  # a Goal status, or "corrupt"
    round: int
    attempts: str  # "used/budget"
    worker: str
    started_at: float | None  # the running attempt's claim time: elapsed ticks from here
    note: str  # marker and cancel reason, in words
    run_id: str | None = None
    redelivery: str = "safe"
    running_epoch: int | None = None
    needs_cleanup: bool = False
    cancelling: bool = False

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL


@dataclass(frozen=True)
class RunRow:
    run_id: str
    status: str
    attempts: str
    cancel: str
    submitted_at: float | None


@dataclass(frozen=True)
class AttemptRow:
    run_id: str
    epoch: int
    worker: str
    state: str  # "interrupted (sigterm by dana@n1)" etc.
    started_at: float | None
    ended_at: float | None
    pid: int | None
    alive: bool | None
    cpu_percent: float | None
    rss_bytes: int | None
    log_path: str | None
    running: bool
    observed_at: float | None = None  # when pid/alive were looked at (kept after the record goes)


@dataclass(frozen=True)
class WorkerRow:
    run_id: str
    epoch: int
    pid: int
    worker: str
    started_at: float
    alive: bool
    cpu_percent: float | None
    rss_bytes: int | None
    argv: str


class Reader:
    """Reads rows for the dashboard through one (read-only) journal connection."""

    def __init__(self, journal: Journal, node: str) -> None:
        self.journal = journal
        self.node = node
        self.registry = ProcessRegistry.for_journal(journal, node)

    # --- Goals ---------------------------------------------------------------------------------

    def visible_goal_ids(
        self, text: str = "", matching: Callable[[str, int], list[str]] | None = None
    ) -> tuple[list[str], int]:
        """The Goals to list (active ones, then the most recent terminal ones) and the total.

        ``matching(text, limit)``: an in-memory search (``GoalIndex``) instead of the journal's.
        """
        j = self.journal
        with j.snapshot():
            total = j.count("goal")
            if text and matching is not None:
                return matching(text, ACTIVE_LIMIT + RECENT_LIMIT), total
            if text:
                stored = _matching(j, text)
            else:
                stored = j.aggregates("goal", status=list(ACTIVE), limit=ACTIVE_LIMIT)
                stored += j.aggregates(
                    "goal", status=list(TERMINAL), newest_first=True, limit=RECENT_LIMIT
                )
        ids = sorted({s.aggregate_id.partition(":")[2] for s in stored})
        return ids, total

    def goal_rows(self, goal_ids: Sequence[str]) -> dict[str, GoalRow | None]:
        """Rows for these Goals (None for a Goal that no longer exists)."""
        j = self.journal
        with j.snapshot():
            goals = j.load_many(["goal:" + g for g in goal_ids])
            parsed: dict[str, Goal | RefineError] = {}
            for key, stored in goals.items():
                try:
                    parsed[key.partition(":")[2]] = goal_from_stored(stored)
                except RefineError as exc:
                    parsed[key.partition(":")[2]] = exc
            run_ids = [g.run_id for g in parsed.values() if isinstance(g, Goal) and g.run_id]
            runs = j.load_many(["run:" + r for r in run_ids])
            rows: dict[str, GoalRow | None] = {}
            for goal_id in goal_ids:
                goal = parsed.get(goal_id)
                if goal is None:
                    rows[goal_id] = None
                elif isinstance(goal, RefineError):
                    rows[goal_id] = _corrupt_row(goal_id, goal)
                else:
                    rows[goal_id] = self._goal_row(goal, runs.get("run:" + goal.run_id))
        return rows

    def _goal_row(self, goal: Goal, stored_run: Stored | None) -> GoalRow:
        run = None
        note = ""
        if stored_run is not None:
            try:
                run = run_from_stored(stored_run)
            except RefineError as exc:
                note = f"corrupt run: {exc.message}"
        used = len(run.attempts) if run else 0
        budget = int(goal.budget.get("max_attempts", 0))
        attempt = run.running_attempt if run else None
        started_at = None
        orphan = False
        if attempt is not None:
            started_at = claimed_at(self.journal, run.run_id, attempt.epoch)
            if goal.node_id == self.node:
                with contextlib.suppress(RefineError, OSError):
                    orphan = needs_cleanup(self.journal, run, node=self.node)
        cancelling = bool(run and run.cancel_requested and not run.terminal)
        note = note or _note(goal, cancelling, orphan)
        return GoalRow(
            goal_id=goal.goal_id,
            title=goal.title,
            node_id=goal.node_id,
            status=goal.status,
            round=goal.round,
            attempts=f"{used}/{budget}",
            worker=attempt.worker if attempt else "",
            started_at=started_at,
            note=note,
            run_id=goal.run_id,
            redelivery=goal.redelivery,
            running_epoch=attempt.epoch if attempt else None,
            needs_cleanup=orphan,
            cancelling=cancelling,
        )

    def liveness_changed(self, rows: Sequence[GoalRow]) -> list[str]:
        """This node's running rows whose `needs cleanup` marker no longer matches the processes.

        A process can die without any commit; checking its record and pid here (no journal
        read) keeps the periodic look cheap, and only rows that flipped are read again.
        """
        changed = []
        for row in rows:
            if row.node_id != self.node or row.run_id is None or row.running_epoch is None:
                continue
            with contextlib.suppress(OSError):
                record = self.registry.get(row.run_id, row.running_epoch)
                orphan = record is None or not same_process(record)
                if orphan != row.needs_cleanup:
                    changed.append(row.goal_id)
        return changed

    # --- Runs, Attempts, history ---------------------------------------------------------------

    def goal(self, goal_id: str) -> Goal | None:
        stored = self.journal.load("goal:" + goal_id)
        return goal_from_stored(stored) if stored is not None else None

    def run_rows(self, goal_id: str) -> list[RunRow]:
        goal = self.goal(goal_id)
        if goal is None:
            return []
        ids = [f"run:{goal_id}.r{n}" for n in range(1, goal.round + 1)]
        rows = []
        stored = self.journal.load_many(ids)
        for agg in ids:
            if agg not in stored:
                continue
            run = run_from_stored(stored[agg])
            first = self.journal.history(agg, 0, 1)
            cancel = ""
            if run.cancel_requested and not run.terminal:
                cancel = f"cancelling… ({run.cancel_requested.get('reason', '')})"
            elif run.cancel_reason:
                cancel = run.cancel_reason
            rows.append(
                RunRow(
                    run_id=run.run_id,
                    status=run.status,
                    attempts=f"{len(run.attempts)}/{run.budget['max_attempts']}",
                    cancel=cancel,
                    submitted_at=first[0].committed_at if first else None,
                )
            )
        return rows

    def attempt_rows(self, run_id: str, node_id: str) -> list[AttemptRow]:
        stored = self.journal.load("run:" + run_id)
        if stored is None:
            return []
        run = run_from_stored(stored)
        started: dict[int, float] = {}
        ended: dict[int, float] = {}
        for event in self.journal.history("run:" + run_id, 0, 1000):
            epoch = event.data.get("epoch")
            if event.type == "attempt.claimed":
                started[epoch] = event.committed_at
            elif event.type in ENDINGS:
                ended[epoch] = event.committed_at
        rows = []
        for a in run.attempts:
            record = self.registry.get(run_id, a.epoch) if node_id == self.node else None
            obs = _observe(record) if record is not None and a.state == "running" else None
            rows.append(
                AttemptRow(
                    run_id=run_id,
                    epoch=a.epoch,
                    worker=a.worker,
                    state=attempt_state(a.state, a.reason, a.cleanup),
                    started_at=started.get(a.epoch),
                    ended_at=ended.get(a.epoch),
                    pid=record.pid if record else None,
                    alive=obs.alive if obs else (False if record else None),
                    cpu_percent=obs.cpu_percent if obs else None,
                    rss_bytes=obs.rss_bytes if obs else None,
                    log_path=self.log_path(run_id, a.epoch, node_id),
                    running=a.state == "running",
                    observed_at=time.time() if record is not None else None,
                )
            )
        return rows

    def log_path(self, run_id: str, epoch: int, node_id: str) -> str | None:
        """The attempt's log file, when it lives on this node."""
        if node_id != self.node:
            return None
        record = self.registry.get(run_id, epoch)
        return record.log_path if record else str(self.registry.log_path(run_id, epoch))

    def history(self, run_id: str) -> list[Event]:
        events: list[Event] = []
        after = 0
        while True:
            page = self.journal.history("run:" + run_id, after, 1000)
            events += page
            if len(page) < 1000:
                return events
            after = page[-1].sequence

    def worker_rows(self) -> list[WorkerRow]:
        rows = []
        for rec in sorted(self.registry.all(), key=lambda r: r.started_at):
            obs = _observe(rec)
            rows.append(
                WorkerRow(
                    run_id=rec.run_id,
                    epoch=rec.epoch,
                    pid=rec.pid,
                    worker=rec.worker,
                    started_at=rec.started_at,
                    alive=bool(obs and obs.alive),
                    cpu_percent=obs.cpu_percent if obs else None,
                    rss_bytes=obs.rss_bytes if obs else None,
                    argv=" ".join(rec.argv),
                )
            )
        return rows


def _observe(record: ProcessRecord):  # -> ProcessObservation | None
    try:
        return observe(record)
    except (OSError, RefineError):
        return None


def _matching(journal: Journal, text: str) -> list[Stored]:
    """Goals whose id, title, status or node contains ``text`` (case-insensitive)."""
    needle = text.lower()
    found = []
    for stored in journal.aggregates("goal", contains=text):
        state = stored.state if isinstance(stored.state, dict) else {}
        fields = (stored.aggregate_id[5:], state.get("title"), state.get("status"))
        if any(isinstance(f, str) and needle in f.lower() for f in (*fields, state.get("node_id"))):
            found.append(stored)
    return found[: ACTIVE_LIMIT + RECENT_LIMIT]


def _note(goal: Goal, cancelling: bool, orphan: bool) -> str:
    parts = []
    if orphan:
        parts.append("needs cleanup")
    if cancelling:
        parts.append("cancelling…")
    if goal.status == "held":
        parts.append("R: release")
    if goal.cancel_reason:
        parts.append(goal.cancel_reason)
    return " · ".join(parts)


def _corrupt_row(goal_id: str, error: RefineError) -> GoalRow:
    return GoalRow(goal_id, "", "", "corrupt", 0, "", "", None, error.message)


def attempt_state(state: str, reason: str | None, cleanup: Mapping[str, Any] | None) -> str:
    """An Attempt's state in words: ``interrupted (sigterm by dana@n1)``, ``failed (exit 1)``."""
    if state == "interrupted" and cleanup:
        method = str(cleanup.get("method", ""))
        who = str(cleanup.get("confirmed_by", ""))
        return f"interrupted ({ended_by_words(method, who)})"
    if state == "failed" and reason:
        return f"failed ({reason})"
    return state
