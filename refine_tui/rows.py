"""What the dashboard shows, read from the journal and the node's process registry.

No Textual here: these functions run in threads, off the UI, and return plain frozen rows that
the widgets turn into cells. Every record is validated on read (goal_from_stored,
run_from_stored); a broken one becomes a row saying so, never an exception in the UI.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from store.errors import RefineError
from store.host.processes import (
    ProcessObservation,
    ProcessRecord,
    ProcessRegistry,
    observe,
    same_process,
)
from store.journal.api import Event, Journal
from store.model.goals import Goal, ended_by_words
from store.model.run import Run
from store.ops import reads
from store.ops.evidence import records_here
from store.ops.reads import ClaimTimes, GoalAndRun
from store.statuses import ACTIVE_GOAL_STATUSES, TERMINAL_GOAL_STATUSES

ACTIVE = ACTIVE_GOAL_STATUSES
TERMINAL = TERMINAL_GOAL_STATUSES
ACTIVE_LIMIT = 1000  # active Goals shown at most (DataTable paints ~1k rows in ≈ 0.4 s)
RECENT_LIMIT = 200  # most recent terminal Goals shown beside them
HERE_FOR_S = 2.0  # how long whether this machine keeps the node's records is taken as known


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
    starting: bool = False  # claimed here moments ago, its process not recorded yet
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
    needs_cleanup: bool = False  # this node's running attempt with no live process (as Goals says)


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
    comm: str = ""  # the command's file name and its arguments (the Command column)


class Reader:
    """Reads rows for the dashboard through one (read-only) journal connection."""

    def __init__(self, journal: Journal, node: str) -> None:
        self.journal = journal
        self.node = node
        self.registry = ProcessRegistry.for_journal(journal, node)
        self.claims = ClaimTimes()
        self._here, self._here_at = True, -HERE_FOR_S

    def records_here(self) -> bool:
        """Whether this machine keeps this node's process records (``evidence.records_here``):
        else no attempt of it is judged gone from here. Looked up at most every ``HERE_FOR_S``
        (a presence read, only when the node's lock is not held here)."""
        now = time.monotonic()
        if now - self._here_at >= HERE_FOR_S:
            with contextlib.suppress(RefineError, OSError):
                self._here = records_here(self.journal, self.node)
            self._here_at = now
        return self._here

    def learn(self, events: Iterable[Event]) -> None:
        """Take in a polled batch: its claims give running rows their start times."""
        self.claims.learn(events)

    # --- Goals ---------------------------------------------------------------------------------

    def visible_goal_ids(self, text: str = "") -> tuple[list[str], int]:
        """The Goals to list (active ones, then the most recent terminal ones) and the total.

        Read from the journal; ``GoalIndex`` serves the same lists from memory once built.
        """
        j = self.journal
        with j.snapshot():
            total = j.count("goal")
            if text:
                found = _matching(j, text)
            else:
                found = reads.goal_ids(j, status=ACTIVE, limit=ACTIVE_LIMIT)
                found += reads.goal_ids(j, status=TERMINAL, newest_first=True, limit=RECENT_LIMIT)
        return sorted(set(found)), total

    def goal_rows(self, goal_ids: Sequence[str]) -> dict[str, GoalRow | None]:
        """Rows for these Goals (None for a Goal that no longer exists)."""
        found = reads.goals_with_runs(self.journal, goal_ids)
        return {g: self._goal_row(entry) if entry else None for g, entry in found.items()}

    def _goal_row(self, entry: GoalAndRun) -> GoalRow:
        goal, run = entry.goal, entry.run
        if goal is None:
            assert entry.error is not None
            return _corrupt_row(entry.goal_id, entry.error)
        note = f"corrupt run: {entry.run_error.message}" if entry.run_error else ""
        used = len(run.attempts) if run else 0
        budget = int(goal.budget.get("max_attempts", 0))
        attempt = run.running_attempt if run else None
        started_at = None
        orphan = starting = False
        if run is not None and attempt is not None:
            started_at = self.claims.get(self.journal, run.run_id, attempt.epoch)
            if goal.node_id == self.node:
                with contextlib.suppress(RefineError, OSError):
                    orphan, starting = self.proof(run.run_id, attempt.epoch, started_at)
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
            starting=starting,
            cancelling=cancelling,
        )

    def proof(self, run_id: str, epoch: int, claimed: float | None) -> tuple[bool, bool]:
        """(needs cleanup, starting) for this node's running attempt ``epoch`` of ``run_id``.

        A live recorded process proves it; a dead one does not; with no record yet, a young
        claim is starting (``reads.launching``: the rule Stop's advice follows too). An
        attempt a Stop or Cancel on this node is ending is not an orphan: its stopper records
        the end within its deadline (``ProcessRegistry.stopping``). Without that, the moment
        between the signal and the record showed "needs cleanup", and alerted, on an attempt
        the operator had just cancelled.
        """
        if not self.records_here():  # they are elsewhere: nothing here proves it gone
            return False, False
        # The log first: a worker writes its record, then creates its log. Read the other way
        # round, a record written between the two reads showed a starting attempt as an
        # orphan for a moment (CI, 2026-12-02).
        has_log = self.registry.find_log(run_id, epoch).exists()
        record = self.registry.get(run_id, epoch)
        if record is not None and same_process(record):
            return False, False
        if record is None and reads.launching(claimed, has_log=has_log):
            return False, True
        if record is None and not self.registry.readable(run_id, epoch):
            return False, False  # another user's node keeps it to itself: no answer here
        return self.registry.stopping(run_id, epoch) is None, False

    def liveness_changed(self, rows: Sequence[GoalRow]) -> list[str]:
        """This node's running rows whose `needs cleanup` / starting marker no longer matches
        the processes.

        A process can die without any commit; checking its record and pid here (no journal
        read, but for ``records_here`` when the node's lock is not held here) keeps the
        periodic look cheap, and only rows that flipped are read again.
        """
        changed = []
        for row in rows:
            if row.node_id != self.node or row.run_id is None or row.running_epoch is None:
                continue
            with contextlib.suppress(OSError, RefineError):
                now = self.proof(row.run_id, row.running_epoch, row.started_at)
                if now != (row.needs_cleanup, row.starting):
                    changed.append(row.goal_id)
        return changed

    # --- Runs, Attempts, history ---------------------------------------------------------------

    def goal(self, goal_id: str) -> Goal | None:
        return reads.read_goal(self.journal, goal_id)

    def run_rows(self, goal_id: str) -> list[RunRow]:
        goal = self.goal(goal_id)
        if goal is None:
            return []
        rows = []
        for run, submitted_at in reads.runs_of(self.journal, goal):
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
                    submitted_at=submitted_at,
                )
            )
        return rows

    def attempt_rows(self, run_id: str, node_id: str) -> list[AttemptRow]:
        run: Run | None = reads.read_run(self.journal, run_id)
        if run is None:
            return []
        started, ended = reads.attempt_times(self.journal, run_id)
        rows = []
        for a in run.attempts:
            record = self.registry.get(run_id, a.epoch) if node_id == self.node else None
            obs = _observe(record) if record is not None and a.state == "running" else None
            orphan = False
            if node_id == self.node and a.state == "running":
                with contextlib.suppress(RefineError, OSError):
                    orphan, _ = self.proof(run_id, a.epoch, started.get(a.epoch))
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
                    needs_cleanup=orphan,
                )
            )
        return rows

    def log_path(self, run_id: str, epoch: int, node_id: str) -> str | None:
        """The attempt's log file, when it lives on this node."""
        if node_id != self.node:
            return None
        record = self.registry.get(run_id, epoch)
        return record.log_path if record else str(self.registry.find_log(run_id, epoch))

    def history(self, run_id: str) -> list[Event]:
        return reads.run_history(self.journal, run_id)

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
                    comm=comm(rec.argv),
                )
            )
        return rows


def comm(argv: Sequence[str]) -> str:
    """``/root/.pyenv/versions/3.11.7/bin/python -m x`` → ``python -m x`` (what htop's Command
    shows first): at 80 columns the path's first folder was all the column had room for."""
    if not argv:
        return ""
    return " ".join([os.path.basename(argv[0]) or argv[0], *argv[1:]])


def _observe(record: ProcessRecord) -> ProcessObservation | None:
    try:
        return observe(record)
    except (OSError, RefineError):
        return None


def _matching(journal: Journal, text: str) -> list[str]:
    """The first Goals by id whose id, title, status or node contains ``text``
    (case-insensitive), as many as a list shows.

    Read a page at a time (under the caller's snapshot) and only until that many are found:
    read whole, a common word at a million Goals (`completed`) brought every state holding it
    over and parsed it to keep the first 1,200 (27 s and 2.6 GB on SQLite; now 0.01 s)."""
    needle, limit = text.lower(), ACTIVE_LIMIT + RECENT_LIMIT
    found: list[str] = []
    for goal_id, state in reads.goal_states(journal, contains=text, page=limit):
        fields = (goal_id, state.get("title"), state.get("status"), state.get("node_id"))
        if any(isinstance(f, str) and needle in f.lower() for f in fields):
            found.append(goal_id)
            if len(found) == limit:
                break
    return found


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
