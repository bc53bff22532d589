"""``refine node``: this node's scheduler.

It launches a worker (``python -m store.worker``) for each queued Goal that names this node,
within a soft capacity — forked from its warm forkserver (``forkserver``), or started as a
fresh process with ``REFINE_FORKSERVER=0`` or when the forkserver cannot start —
and cleans up after work the journal says has ended:

- reconciliation: a running attempt whose local process record proves the process gone (pid
  absent, or another create time) is interrupted with method ``process-exited``. Where there is
  no record there is no proof: the attempt is left for an operator (``needs cleanup``).
- cancellation: a Goal of this node cancelled while its attempt runs here has its process
  stopped (SIGTERM to the group, grace, SIGKILL) and the cancellation recorded with cleanup.

The launched set and the process records are efficiency controls, never authority: a start
that loses a race is simply refused by the journal. A restarted node rebuilds the set from live
records, so it does not launch a Goal twice; its workers outlive it.

Connections (PostgreSQL, DESIGN §14): the node keeps two (its reads and commands, its LISTEN);
its workers share the rest of ``max_connections`` through slots in its folder
(``store.journal.slots``), and learn of changes from the node (``wakeups``), not a LISTEN each.

One module over 600 lines because launching, reconciling and cancelling share the node's
launched set and its wake-ups; the worker, the forkserver and the wake-ups have modules of
their own.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import os
import select
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from store.errors import (
    InvalidInputError,
    NodeLiveError,
    RefineError,
    StorageError,
    VersionConflictError,
)
from store.host.processes import (
    STOP_MARGIN_S,
    ProcessRecord,
    ProcessRegistry,
    StopOutcome,
    create_time,
    same_pid,
    same_process,
    stop_process,
)
from store.journal.api import ChangeSource, Journal, JournalHandle, WakeUps, relay
from store.journal.locations import JournalLocation, Location
from store.journal.presence import Heartbeat, heartbeat_interval
from store.journal.slots import KEPT, SLOTS_ENV, ConnectionSlots, max_connections, named
from store.journal.watch import JournalWatcher
from store.model.execution import Execution
from store.model.goal import MAX_NAME, NODE_CANCEL_CLEANUP, PROCESS_GONE_METHOD
from store.model.goals import Goal, GoalResult, Goals, check_name, goal_id_of_run
from store.model.run import Run, run_aggregate_id, run_from_stored
from store.node.forkserver import Forkserver, cmdline
from store.node.launch_backoff import LaunchBackoff
from store.node.touched import TouchedGoals
from store.node.trouble import Trouble
from store.node.wakeups import Relay, write_node_file
from store.node.worker import EXIT_REFUSED, JOURNAL_ENV

# Workers are forked from the warm forkserver unless this is "0" (then each is a fresh process,
# the design before; also the fallback when no forkserver can start).
FORKSERVER_ENV = "REFINE_FORKSERVER"
EXIT_REPORT_S = 1.0  # how long to wait for the forkserver's word on a forked worker's exit
# Ticks happen on journal changes, and at least this often after the last (a look at the journal
# and housekeeping's rounds: what a wake-up missed, a time that came; a gone worker's grace ends
# on time, see _next_look). Each look costs an idle node ≈ 0.5 ms of CPU.
SAFETY_POLL_S = 5.0
GONE_GRACE_S = 3.0  # while running, an exited worker is reconciled after this long (see tick)
STOP_GRACE_S = 5.0
# Housekeeping reads a running attempt's Run again when an event touched its Goal, and every
# Run this often anyway (in one read): a safety net, as the safety poll is for wake-ups.
FULL_LOOK_S = 60.0
# The node's file watcher wakes this long after a commit's first write (the watcher's default
# 20 ms collapses bursts for readers; the node collapses them itself, and each launch waited it).
WAKE_STEP_MS = 2
# A file wake-up can come before its commit is readable (the writer still syncs the WAL and then
# publishes the commit) and none comes after: after one, the node looks whether another
# connection committed at these intervals, and ticks again when one did.
SETTLE_S = (0.004, 0.016, 0.064)


@dataclass
class _Launch:
    """A worker this node started (``proc``), forked (``forked``: pid and create time) or
    found running at startup (``record`` only)."""

    goal_id: str
    goal_version: int
    proc: subprocess.Popen[bytes] | None = None
    record: ProcessRecord | None = None
    pidfd: int | None = None  # readable once the worker exited: wakes the loop to reap it
    forked: tuple[int, float] | None = None
    token: str = ""  # the worker's: where its wake-ups go (``wakeups.Relay``)
    # (pid, create time) of the process ``proc`` or ``pidfd`` holds on to: a record naming
    # exactly these names that very process (``Node._held``)
    identity: tuple[int, float] | None = None

    def alive(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None
        if self.pidfd is not None:
            # Readable once that very process exited (≈ 1 µs, where psutil reads /proc: a
            # node running 1,000 attempts asks this of each on every tick). poll, not select:
            # a node's descriptors pass 1024 with 1,000 attempts (select refuses those).
            poller = select.poll()
            poller.register(self.pidfd, select.POLLIN)
            return not poller.poll(0)
        if self.forked is not None:
            return same_pid(*self.forked)
        return self.record is not None and same_process(self.record)


class Node:
    """One node's scheduler over one journal; ``tick()`` does one round of work."""

    def __init__(
        self,
        journal_path: Location,
        node_id: str,
        capacity: int = 4,
        *,
        grace_s: float = STOP_GRACE_S,
        heartbeat_s: float | None = None,
        connections: int | None = None,
    ) -> None:
        """``connections``: the most journal connections this node and its workers hold at
        once (else ``$REFINE_MAX_CONNECTIONS``, else 5; PostgreSQL only)."""
        self.node_id = check_name(node_id, "node_id")
        if type(capacity) is not int or capacity < 1:
            raise InvalidInputError("capacity must be a positive integer")
        self.capacity = capacity
        self.heartbeat_s = heartbeat_interval(heartbeat_s)  # node presence (store.journal.presence)
        self.max_connections = max_connections(connections)
        self.grace_s = grace_s
        self.journal_path = JournalLocation.of(journal_path)  # once: folders derive from it
        self._handle = JournalHandle(self.journal_path)
        self.journal = self._handle.get()
        self.goals = Goals(self.journal)
        self.runs = Execution(self.journal)
        self.registry = ProcessRegistry.for_journal(self.journal, node_id)
        try:  # this node's folder (records, logs): refused now in one line, not while serving
            _reserve_state_dir(self.registry)
        except RefineError:
            self._handle.close()
            raise
        self.confirmed_by = f"scheduler@{node_id}"
        self.relay = Relay()
        self.launched: dict[str, _Launch] = {}
        self._refused: dict[str, int] = {}  # goal → version whose start was refused
        self.backoff = LaunchBackoff()
        self.trouble = Trouble(self._say)  # the journal out of reach: said once, not each round
        self._relayed = True  # the last relay of wake-ups read the journal
        self._gone_since: dict[tuple[str, int], float] = {}
        self._log: IO[bytes] | None = None
        self._forkserver: Forkserver | None = None
        self._changes: tuple[Journal, ChangeSource] | None = None  # see _committed_meanwhile
        self._exited = False  # a worker's pidfd fired since the last tick (see serve)
        # What shows this node reads only when it should (on its own commits, its workers'
        # exits and its safety poll): its rounds, and its wake-ups while it serves.
        self.rounds = 0
        self.wakeups: WakeUps | None = None
        # serve() points these at its event loop, so a worker's exit wakes the node at once.
        self.watch_fd: Callable[[int], object] = lambda fd: None
        self.unwatch_fd: Callable[[int], object] = lambda fd: None
        # Housekeeping reads an attempt's Run again only once its Goal changed (``TouchedGoals``):
        # these records' Runs had no pending cancellation at the last look.
        self._touched = TouchedGoals()
        # Every launch's pidfd: those of workers that exited are ready (epoll keeps them in a
        # list of their own: asking costs the same with 1 or 1,000 workers running).
        self._pidfds = select.epoll()
        self._no_cancel: dict[tuple[str, int], str] = {}  # (run, epoch) → its goal
        self._full_look_at = 0.0  # when every Run is read again (monotonic)
        for rec in self.registry.all():  # workers of a previous run of this node
            goal_id = goal_id_of_run(rec.run_id)
            if goal_id and same_process(rec):
                self._hold(goal_id, _recorded(goal_id, rec))

    def close(self) -> None:
        """Close the journal, the forkserver and the node log; running workers run on."""
        if self._forkserver is not None:
            self._forkserver.close()
        self.relay.close()
        for launch in self.launched.values():
            if launch.pidfd is not None:
                os.close(launch.pidfd)
                launch.pidfd = None
        self._pidfds.close()
        self._handle.close()
        if self._log is not None:
            self._log.close()

    def __enter__(self) -> Node:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- one round -----------------------------------------------------------------------------

    def tick(self, *, housekeeping: bool = True) -> list[str]:
        """Reap, launch, then (``housekeeping``) reconcile and clean up cancellations; returns
        the goals launched.

        Launching comes before the rounds over every process record (their cost grows with
        the attempts running): a queued Goal does not wait for them (issue 14). A Goal that
        reconciling requeues is launched on the next tick, which its commit wakes at once.
        """
        self.rounds += 1
        self.follow_replaced_file()
        self.reap()
        self.relay_wakeups()
        started = self.schedule()
        if housekeeping:
            self.reconcile(settle_s=GONE_GRACE_S)
            self.cleanup_cancelled()
        return started

    def follow_replaced_file(self) -> None:
        """Reopen when the journal's location names another journal (a file restored or
        replaced): the old handle would read a deleted file forever and never see new work.
        StorageError while it is missing (the next tick tries again)."""
        journal = self._handle.get()
        if journal is not self.journal:
            # Another file may be another journal: only its own records are acted on, and a
            # state dir of the journal before is not its (refused on every tick until the node
            # is started with one of its own).
            registry = ProcessRegistry.for_journal(journal, self.node_id)
            _reserve_state_dir(registry)
            self.journal, self.goals, self.runs = journal, Goals(journal), Execution(journal)
            self.registry = registry

    def reap(self) -> None:
        """Forget workers that exited (remembering a refused start until the Goal changes)."""
        alive = self._alive_now()
        for goal_id, launch in list(self.launched.items()):
            if alive(launch):
                continue
            del self.launched[goal_id]
            self._release(launch)
            code = self._exit_code(launch)
            if code == EXIT_REFUSED:
                self._refused[goal_id] = launch.goal_version
            if (words := self.backoff.exited(code, time.monotonic(), self.log_path)) is not None:
                self._say(words)

    def relay_wakeups(self) -> None:
        """Wake each worker whose Goal changed since the last round (it then rereads)."""
        tokens = {g: launch.token for g, launch in self.launched.items() if launch.token}
        try:
            self.relay.relay(self.journal, tokens)
        except RefineError as exc:  # unreadable for now: the next round reads from there
            self._relayed = False  # (the round's own reads then fail alike: said once)
            self.trouble.failed(str(exc))
        else:
            self._relayed = True

    def reconcile(self, *, settle_s: float = 0.0) -> list[GoalResult]:
        """Interrupt running attempts whose recorded process is gone; drop stale records.

        At startup ``settle_s`` is 0. While the node runs, a process must have been seen gone
        for ``settle_s`` first, so that an operator's Stop, which kills and then records, is
        not raced by this node recording ``process-exited`` in between.
        """
        now = time.monotonic()
        ended = []
        held, alive = self._held(), self._alive_now()
        for rec in self.registry.all():
            key = (rec.run_id, rec.epoch)
            launch = held.get((rec.pid, rec.create_time))
            # A worker held here with that pid and create time is the recorded process: alive
            # is then a poll of its pidfd, where same_process reads /proc.
            if launch is not None and alive(launch):
                self._gone_since.pop(key, None)  # (held: counted and woken already)
                continue
            if same_process(rec):
                self._gone_since.pop(key, None)
                self._adopt(rec)
                continue
            if self.registry.stopping(rec.run_id, rec.epoch):
                continue  # an operator's Stop owns this ending (until its deadline)
            if now - self._gone_since.setdefault(key, now) < settle_s:
                continue
            result = self._end_gone(rec)
            if result is not None:
                ended.append(result)
        return ended

    def _end_gone(self, rec: ProcessRecord) -> GoalResult | None:
        goal, run = self._read(rec.run_id)
        if goal is None or run is None or not run.runs_attempt(rec.epoch):
            stop_process(rec, self.grace_s)  # ended otherwise (e.g. cleanup confirmed elsewhere):
            self._forget(rec)  # nothing it left in its group runs on; the record is stale
            return None
        if goal.node_id != self.node_id:
            return None
        stop_process(rec, self.grace_s)  # what the gone worker left in its group (grandchildren)
        try:
            result = self._interrupt(goal, run, rec.epoch, PROCESS_GONE_METHOD, "reconcile")
        except VersionConflictError:
            return None  # it changed meanwhile: look again next time
        self._forget(rec)
        return result

    def cleanup_cancelled(self) -> list[GoalResult]:
        """Stop this node's processes whose attempt has a pending cancellation; record it.

        A record's Run is read (all in one read) when it is new here or its Goal changed since
        it was last found with no cancellation pending (``_due``): a round with nothing new
        reads the journal's new events and nothing else, whatever the attempts running.
        """
        ended = []
        for rec in self._cancel_pending(self._due(self.registry.all())):
            goal, run = self._read(rec.run_id)
            if goal is None or run is None or run.cancel_requested is None:
                continue
            if not run.runs_attempt(rec.epoch) or goal.node_id != self.node_id:
                continue
            stopped = self._stop_claimed(rec)
            if stopped is None:
                continue  # whoever is stopping it (a Stop, its worker) records the cancellation
            if same_process(rec):
                continue  # still alive after SIGKILL: the cancellation stays pending
            method = f"{NODE_CANCEL_CLEANUP} {self.node_id}: {stopped.detail}"
            try:
                ended.append(self._interrupt(goal, run, rec.epoch, method[:500], "node-cancel"))
            except RefineError as exc:
                if not self._ended_meanwhile(rec):  # e.g. its worker recorded it first: fine
                    self._say(f"{rec.run_id}/{rec.epoch}: cancel cleanup not recorded: {exc}")
                continue
            self._forget(rec)
        return ended

    def schedule(self) -> list[str]:
        """Launch workers for queued Goals of this node, while capacity allows (and no wait
        after workers that could not reach the journal: ``LaunchBackoff``)."""
        if self.backoff.waits(time.monotonic()):
            return []
        alive = self._alive_now()
        room = self.capacity - sum(1 for launch in self.launched.values() if alive(launch))
        if room <= 0:
            return []
        limit = room + len(self.launched) + len(self._refused)
        chosen: list[Goal] = []
        for goal in self.goals.list(status="queued", node_id=self.node_id, limit=limit):
            if len(chosen) >= room:
                break
            if goal.goal_id in self.launched:
                continue
            if self._refused.get(goal.goal_id) == goal.version:
                continue
            self._refused.pop(goal.goal_id, None)
            chosen.append(goal)
        self._launch_all(chosen)
        return [goal.goal_id for goal in chosen]

    # --- plumbing ------------------------------------------------------------------------------

    def _launch_all(self, goals: list[Goal]) -> None:
        if not goals:
            return
        env = self._worker_env()
        tokens = [uuid.uuid4().hex for _ in goals]
        argvs = [
            self._worker_argv(g.goal_id, token, g.round)
            for g, token in zip(goals, tokens, strict=True)
        ]
        log = self._node_log()
        if _forking():
            forks = self._forkserver_for(env, log).launch_all(argvs)
        else:
            forks = [None] * len(goals)
        for goal, argv, forked, token in zip(goals, argvs, forks, tokens, strict=True):
            if forked is not None:
                launch = _Launch(goal.goal_id, goal.version, forked=forked, pidfd=_pidfd(forked[0]))
                launch.identity = forked
            else:  # no forkserver for now: a fresh process (the same worker, only slower)
                proc = subprocess.Popen(
                    argv,
                    start_new_session=True,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    env=env,
                )
                launch = _Launch(goal.goal_id, goal.version, proc=proc, pidfd=_pidfd(proc.pid))
                created = create_time(proc.pid)  # our unreaped child: the pid is still its own
                launch.identity = None if created is None else (proc.pid, created)
            launch.token = token
            self._hold(goal.goal_id, launch)

    def _worker_argv(self, goal_id: str, token: str, round: int) -> list[str]:
        # A server URL may hold a password: the environment carries it, never the argv.
        where = [] if self.journal_path.is_server else ["--journal", self.journal_path.text]
        return [
            sys.executable,
            "-m",
            "store.worker",
            *where,
            "--node",
            self.node_id,
            "--goal",
            goal_id,
            "--token",
            token,
            "--round",
            str(round),
        ]

    def _worker_env(self) -> dict[str, str]:
        # A URL goes by the environment, never argv: it may hold a password (ps shows argv).
        env = {**os.environ, JOURNAL_ENV: self.journal_path.text}
        env.pop(SLOTS_ENV, None)
        if self.journal_path.is_server:  # the workers share what the node does not keep
            folder = self.registry.root / "connections"
            env[SLOTS_ENV] = ConnectionSlots(folder, self.max_connections - KEPT).to_env()
        return env

    def _forkserver_for(self, env: dict[str, str], log: IO[bytes]) -> Forkserver:
        if self._forkserver is None:
            longest = self._worker_argv("g" * MAX_NAME, "t" * 32, 10**18)
            self._forkserver = Forkserver(env, log, len(cmdline(longest)))
        return self._forkserver

    def _exit_code(self, launch: _Launch) -> int | None:
        """An exited worker's code, if known (a forked one's comes from the forkserver)."""
        if launch.proc is not None:
            return launch.proc.returncode
        if launch.forked is not None and self._forkserver is not None:
            return self._forkserver.exit_code(launch.forked[0], EXIT_REPORT_S)
        return None

    @property
    def log_path(self) -> Path:
        """Where its workers' words go (their stderr)."""
        return self.registry.root / "node.log"

    def _node_log(self) -> IO[bytes]:
        if self._log is None:
            self.registry.root.mkdir(parents=True, exist_ok=True)
            self._log = open(self.log_path, "ab")  # noqa: SIM115
        return self._log

    def _read(self, run_id: str) -> tuple[Goal | None, Run | None]:
        goal_id = goal_id_of_run(run_id)
        if goal_id is None:
            return None, None
        with self.journal.snapshot():
            return self.goals.read(goal_id), self.runs.read(run_id)

    def _due(self, records: list[ProcessRecord]) -> list[ProcessRecord]:
        """The records whose Run's cancellation ``cleanup_cancelled`` must look at now."""
        touched = self._touched.since(self.journal)  # first: what changes after, it sees next
        if touched is None or time.monotonic() >= self._full_look_at:
            self._no_cancel.clear()  # another journal, the first look, or time: every Run read
            self._full_look_at = time.monotonic() + FULL_LOOK_S
        elif touched:
            self._no_cancel = {k: g for k, g in self._no_cancel.items() if g not in touched}
        if len(self._no_cancel) > len(records):  # some records are gone: forget them
            keep = {(rec.run_id, rec.epoch) for rec in records}
            self._no_cancel = {k: g for k, g in self._no_cancel.items() if k in keep}
        return [
            rec
            for rec in records
            if (rec.run_id, rec.epoch) not in self._no_cancel and goal_id_of_run(rec.run_id)
        ]

    def _cancel_pending(self, records: list[ProcessRecord]) -> list[ProcessRecord]:
        """Those of ``records`` whose Run has a cancellation pending, on one read; the others
        are not read again until their Goal changes (Execution-only Runs are not this node's)."""
        if not records:
            return []
        found = self.journal.load_many([run_aggregate_id(rec.run_id) for rec in records])
        pending = []
        for rec in records:
            stored = found.get(run_aggregate_id(rec.run_id))
            if stored is not None and run_from_stored(stored).cancel_requested is not None:
                pending.append(rec)
            else:  # ``_due`` gave only records of a Goal's Run
                self._no_cancel[rec.run_id, rec.epoch] = goal_id_of_run(rec.run_id) or ""
        return pending

    def _held(self) -> dict[tuple[int, float], _Launch]:
        """The workers this node holds (its unreaped child, or a pidfd), by (pid, create
        time): a record naming one of these names that very process."""
        return {
            launch.identity: launch
            for launch in self.launched.values()
            if launch.identity is not None and (launch.proc is not None or launch.pidfd is not None)
        }

    def _ended_meanwhile(self, rec: ProcessRecord) -> bool:
        """Someone else (its worker, an operator) recorded this attempt's end meanwhile."""
        try:
            _, run = self._read(rec.run_id)
        except RefineError:
            return False
        return run is not None and not run.runs_attempt(rec.epoch)

    def _interrupt(self, goal: Goal, run: Run, epoch: int, method: str, kind: str) -> GoalResult:
        """End the attempt at the versions read (cancel instead when a cancel is pending)."""
        return self.goals.interrupt(
            goal_id=goal.goal_id,
            run_id=run.run_id,
            epoch=epoch,
            goal_version=goal.version,
            run_version=run.version,
            confirmed_by=self.confirmed_by,
            method=method,
            command_id=f"op:{kind}:{uuid.uuid4()}",
        )

    def _adopt(self, rec: ProcessRecord) -> None:
        """A live worker of this node not launched by this run (its launcher died before it
        recorded itself): counted, and woken, as the ones found at startup."""
        goal_id = goal_id_of_run(rec.run_id)
        if goal_id is not None and goal_id not in self.launched:
            self._hold(goal_id, _recorded(goal_id, rec))

    def _hold(self, goal_id: str, launch: _Launch) -> None:
        """Count ``launch`` as this node's worker of ``goal_id``; its pidfd polled and watched."""
        replaced = self.launched.get(goal_id)
        if replaced is not None:
            self._release(replaced)
        self.launched[goal_id] = launch
        if launch.pidfd is not None:
            self._pidfds.register(launch.pidfd, select.EPOLLIN)
            self.watch_fd(launch.pidfd)

    def _release(self, launch: _Launch) -> None:
        """Let go of a launch's pidfd (its worker exited, or another took its place)."""
        if launch.pidfd is not None:
            self._pidfds.unregister(launch.pidfd)
            self.unwatch_fd(launch.pidfd)
            os.close(launch.pidfd)
            launch.pidfd = None

    def _alive_now(self) -> Callable[[_Launch], bool]:
        """``_Launch.alive`` for every launch at once: the pidfds polled together (one system
        call, not one a worker: 1,000 attempts)."""
        exited = {fd for fd, _ in self._pidfds.poll(0, maxevents=len(self.launched) + 1)}

        def alive(launch: _Launch) -> bool:
            if launch.proc is None and launch.pidfd is not None:
                return launch.pidfd not in exited
            return launch.alive()

        return alive

    def _stop_claimed(self, rec: ProcessRecord) -> StopOutcome | None:
        """``stop_process``, claimed as this node's stopping (as an operator's Stop marks it):
        the worker, signalled with its recipe, then leaves the recipe its grace and the end to
        us. None: another (the worker itself) claimed it first."""
        until = time.time() + self.grace_s + STOP_MARGIN_S
        marker = self.registry.claim_stopping(
            rec.run_id, rec.epoch, by=f"node {self.node_id}", until=until
        )
        if marker is None:
            return None
        try:
            return stop_process(rec, self.grace_s)
        finally:
            self.registry.clear_stopping(marker)

    def _forget(self, rec: ProcessRecord) -> None:
        self.registry.remove(rec.run_id, rec.epoch)
        self._gone_since.pop((rec.run_id, rec.epoch), None)

    def _say(self, message: str) -> None:
        print(f"node {self.node_id}: {message}", file=sys.stderr, flush=True)

    # --- foreground loop -----------------------------------------------------------------------

    async def serve(self, stop: asyncio.Event | None = None) -> int:
        """Reconcile, then tick on every journal change (and every SAFETY_POLL_S) until stopped.

        SIGINT/SIGTERM, SIGHUP unless ignored (or ``stop``) end the loop; workers keep running
        and keep their records.
        """
        loop = asyncio.get_running_loop()
        stop = stop or asyncio.Event()
        wake = asyncio.Event()

        def quit_() -> None:
            stop.set()
            wake.set()

        stop_signals = _stop_signals()
        for sig in stop_signals:
            loop.add_signal_handler(sig, quit_)

        def exited() -> None:
            self._exited = True
            wake.set()

        self.watch_fd = lambda fd: loop.add_reader(fd, exited)
        self.unwatch_fd = loop.remove_reader
        for launch in self.launched.values():
            if launch.pidfd is not None:
                self.watch_fd(launch.pidfd)
        # Our workers follow this process (wakeups.Inbox): it relays their wake-ups.
        with contextlib.suppress(OSError):
            write_node_file(self.registry.root)
        # Warm the forkserver now, so the first Goal does not wait for it.
        if _forking():
            self._forkserver_for(self._worker_env(), self._node_log()).start()
        watcher = Journal.watch(self.journal_path, self.node_id)  # not other nodes' commits
        self.wakeups = watcher
        files = False  # a file watcher (SQLite); PostgreSQL notifies after the commit
        if isinstance(watcher, JournalWatcher):
            # Its stat poll (a folder replaced under the inotify watch) as seldom as our own.
            files, watcher.step_ms, watcher.poll_interval_s = True, WAKE_STEP_MS, SAFETY_POLL_S
        pump = asyncio.create_task(relay(watcher, wake))
        ending = asyncio.create_task(_set_on(stop, wake))  # a caller's stop ends the wait at once
        heartbeat = Heartbeat(
            lambda: self.journal, self.node_id, capacity=self.capacity, interval_s=self.heartbeat_s
        )
        beating = asyncio.create_task(heartbeat.run(stop))
        try:
            self._guarded(self.reconcile)
            # Housekeeping (its rounds over every record) takes at most about half the loop's
            # time: while commits keep waking us (1,000 claims), launches do not queue behind
            # one round after another.
            due = 0.0  # when housekeeping may run again
            ticked = 0.0  # when the last tick ended: the safety poll ticks SAFETY_POLL_S after
            keep = True
            settling = False  # after a file wake-up: commits may still become readable
            force = True  # tick whatever the journal says (first, safety poll, a commit seen)
            while not stop.is_set():
                wake.clear()
                # A file wake-up that shows no commit (yet: see _committed_meanwhile) needs no
                # tick: a commit's writes, journal opens, checkpoints and this node's own beats
                # wake us. The safety poll's tick is due all the same.
                force = force or time.monotonic() >= ticked + SAFETY_POLL_S
                if force or not settling or not self._nothing_new():
                    began = time.monotonic()
                    keep = began >= due
                    self._guarded(functools.partial(self.tick, housekeeping=keep))
                    ticked = time.monotonic()
                    if keep:
                        due = ticked + (ticked - began)
                force = False
                if settling and (seen := await self._committed_meanwhile(wake)):
                    force = seen == "commit"
                    continue
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), self._next_look(ticked, keep, due))
                settling = files and wake.is_set()
                force = not settling
        finally:
            await heartbeat.end(beating, clean=stop.is_set())  # the clean-exit mark, if clean
            watcher.stop()
            for task in (pump, ending):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            for sig in stop_signals:
                loop.remove_signal_handler(sig)
            for launch in self.launched.values():
                if launch.pidfd is not None:
                    self.unwatch_fd(launch.pidfd)
            self.watch_fd = self.unwatch_fd = lambda fd: None
        return 0

    def _next_look(self, ticked: float, keep: bool, due: float) -> float:
        """Seconds until a tick is due with no wake-up: the safety poll's, housekeeping's when
        the last tick skipped it, the end of a gone worker's grace (reconciled then, not at
        the next poll), the end of the launches' wait."""
        now = time.monotonic()
        at = ticked + SAFETY_POLL_S
        if not keep:
            at = min(at, due)
        graces = (since + GONE_GRACE_S for since in self._gone_since.values())
        at = min([at, *(grace for grace in graces if grace > now)])  # past ones: the poll's
        if self.backoff.waits(now):  # launches may go again then
            at = min(at, self.backoff.until)
        return max(0.0, at - now)

    def _nothing_new(self) -> bool:
        """Since the last look: no other connection committed, no worker exited, the journal's
        file is the same (reset to now; False when unsure)."""
        if self._exited:
            self._exited = False
            return False
        if self._changes is None or self._changes[0] is not self.journal:
            self._changes = (self.journal, self.journal.changes())
        try:
            return not self._changes[1].changed() and not self.journal.replaced()
        except RefineError:
            return False

    async def _committed_meanwhile(self, wake: asyncio.Event) -> str | None:
        """Look for up to ``SETTLE_S``: "commit" once another connection committed since the
        last look, "wake" on a wake-up, None when neither came (or the journal is unreadable:
        the safety poll ticks)."""
        if self._changes is None or self._changes[0] is not self.journal:
            # Reopened by the tick that just ran: look from now on (a new source's first
            # answer is always "changed").
            self._changes = (self.journal, self.journal.changes())
            with contextlib.suppress(RefineError):
                self._changes[1].changed()
        changes = self._changes[1]
        for delay in SETTLE_S:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), delay)
            try:
                if changes.changed():
                    return "commit"
            except RefineError:
                return None
            if wake.is_set():
                return "wake"
        return None

    def _guarded(self, step: Callable[[], object]) -> None:
        try:
            step()
        except RefineError as exc:  # e.g. the journal is locked for a while: try again later
            self.trouble.failed(str(exc))
        else:
            if self._relayed:
                self.trouble.passed("the journal answers")


def _stop_signals() -> tuple[signal.Signals, ...]:
    """What ends a node cleanly (its exit mark: `stopped`): SIGINT, SIGTERM, and SIGHUP, its
    terminal closed (it died by it, and showed `silent` as a dead machine does), unless SIGHUP
    is ignored: under `nohup` the node goes on."""
    hangup = () if signal.getsignal(signal.SIGHUP) == signal.SIG_IGN else (signal.SIGHUP,)
    return (signal.SIGINT, signal.SIGTERM, *hangup)


async def _set_on(stop: asyncio.Event, wake: asyncio.Event) -> None:
    await stop.wait()
    wake.set()


def _reserve_state_dir(registry: ProcessRegistry) -> None:
    """Make the node's folder and reserve it for its journal (ProcessRegistry.reserve)."""
    try:
        registry.root.mkdir(parents=True, exist_ok=True)
        registry.reserve()
    except OSError as exc:
        raise StorageError(
            f"cannot create this node's folder {registry.root}: {exc.strerror or exc}"
        ) from None


def _recorded(goal_id: str, rec: ProcessRecord) -> _Launch:
    """A worker known by its process record (a previous run of this node launched it), held
    by a pidfd when one opens on the recorded process: then it is watched as those launched."""
    token = rec.worker.rpartition("/")[2]  # worker_name: "<node>/<token>"
    launch = _Launch(goal_id, 0, record=rec, token=token)
    pidfd = _pidfd(rec.pid)
    if pidfd is None:
        return launch
    # Opened first, then checked: the recorded process held this pid from before its record
    # until the check, so across the open too, and the pidfd is that process's.
    if same_process(rec):
        launch.pidfd, launch.identity = pidfd, (rec.pid, rec.create_time)
    else:
        os.close(pidfd)
    return launch


def _forking() -> bool:
    return os.environ.get(FORKSERVER_ENV) != "0"


def _pidfd(pid: int) -> int | None:
    """A descriptor that becomes readable when ``pid`` exits (Linux ≥ 5.3), else None."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def run_node(
    journal_path: Location,
    node_id: str,
    *,
    capacity: int = 4,
    heartbeat_s: float | None = None,
    connections: int | None = None,
) -> int:
    """Run this node's scheduler in the foreground until SIGINT/SIGTERM; the exit code. It
    holds the node's lock as `refine node` does (``claim_node_name``): a dashboard judges this
    node's attempts by its records only where that lock is held (the demo's node runs so)."""
    from store.ops.node_start import claim_node_name

    with named(f"refine node {node_id}"):
        try:
            node = Node(
                journal_path, node_id, capacity, heartbeat_s=heartbeat_s, connections=connections
            )
        except RefineError as exc:
            print(f"refine node: {exc}", file=sys.stderr)
            return 2 if isinstance(exc, InvalidInputError) else 3
        with node:
            try:
                lock = claim_node_name(node.journal, node.node_id)
            except NodeLiveError as exc:
                print(f"refine node: {exc}", file=sys.stderr)
                return 1
            try:
                return asyncio.run(node.serve())
            finally:
                lock.release()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m store.node.scheduler")
    parser.add_argument("--journal", required=True)
    parser.add_argument("--node", required=True)
    parser.add_argument("--capacity", type=int, default=4)
    parser.add_argument("--heartbeat", type=float, default=None)  # seconds (store.journal.presence)
    parser.add_argument("--max-connections", type=int, default=None)
    args = parser.parse_args(argv)
    return run_node(
        args.journal,
        args.node,
        capacity=args.capacity,
        heartbeat_s=args.heartbeat,
        connections=args.max_connections,
    )


if __name__ == "__main__":
    sys.exit(main())
