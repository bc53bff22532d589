"""The worker: one process that owns one attempt of one Goal on its node.

``python -m store.worker --journal P --node N --goal G --token T [--round R]``

It claims the Goal's Run with a fresh token (Goals.start), records itself in the node's
process registry, runs the recipe (an argv list, no shell) into its log file and, while the
recipe runs, rereads the Goal and Run whenever its node says they changed (``wakeups``: the
node relays its one LISTEN or file watcher; without a node, the worker looks by itself). On
PostgreSQL it holds no connection while it waits: it connects to claim, to reread and to
report, each through a slot of its node's connection limit (``store.journal.slots``).

Whoever owns the attempt reports its end, and only the owner: exit 0 → completed, else
failed; a pending cancellation → cancelled with its own cleanup confirmation; a Goal that moved
on (settled, reassigned, its attempt ended by Stop or cleanup) → the recipe is stopped and
nothing is reported.

The recipe runs in the worker's process group (the node starts the worker as a session
leader), so stopping the group stops both. Time never ends an attempt in the journal by itself;
the worker, as the owner, may stop a recipe that outlived ``attempt_timeout_ms`` and report it
failed. At-least-once: a replacement worker simply runs the recipe again.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import IO

from store.errors import (
    JournalNotPermittedError,
    NotAJournalError,
    RefineError,
    StorageError,
    StorageUnreachableError,
)
from store.host.processes import (
    ProcessRecord,
    ProcessRegistry,
    create_time,
    same_process,
    stop_group_members,
)
from store.journal.api import ChangeSource, Journal
from store.journal.slots import keeping_connections, share_from_env
from store.journal.url import is_postgres_url
from store.model.execution import Execution
from store.model.goals import GoalResult, Goals
from store.node.wakeups import Inbox

POLL_S = 0.25  # without a node, how often the worker looks whether a SQLite journal changed
# ... and a PostgreSQL one, each look a connection of its own (its node died: a rare case)
ORPHAN_POLL_S = 5.0
STOP_GRACE_S = 5.0  # SIGTERM → SIGKILL for its own recipe

EXIT_SETTLED = 0  # the attempt was reported (completed, failed or cancelled)
EXIT_REFUSED = 3  # the start was refused: nothing was claimed
EXIT_SUPERSEDED = 4  # the Goal moved on or the report was refused: nothing reported
EXIT_UNAVAILABLE = 5  # the journal could not be opened
EXIT_CRASHED = 70  # the worker (or its claim helper) raised: its traceback is in the node log

JOURNAL_ENV = "REFINE_JOURNAL"
# While the journal is unreachable (a server restart), the owner keeps trying to learn its
# verdict and to report, with the same command id: the report applies or replays exactly once.
REPORT_PATIENCE_S = 3600.0
REHEARSALS = int(os.environ.get("REFINE_REHEARSALS", "8"))  # see rehearse
RETRY_MAX_S = 5.0
NOT_LAUNCHED = "not launched: the claim's answer was lost (a repeat of it replayed)"


@dataclass(frozen=True)
class Claim:
    goal_id: str
    node_id: str
    run_id: str
    round: int
    epoch: int
    worker: str


def worker_name(node_id: str, token: str) -> str:
    return f"{node_id}/{token}"


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m store.worker")
    # A postgresql:// URL comes by $REFINE_JOURNAL, not argv: it may hold a password (ps).
    parser.add_argument("--journal", default=os.environ.get(JOURNAL_ENV))
    parser.add_argument("--node", required=True)
    parser.add_argument("--goal", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--round", type=int, default=None)
    return parser


def main(argv: Sequence[str] | None = None, parser_: argparse.ArgumentParser | None = None) -> int:
    """``parser_``: one built before (the forkserver's, shared by its children)."""
    parser_ = parser_ or parser()
    args = parser_.parse_args(argv)
    if not args.journal:
        parser_.error(f"--journal or ${JOURNAL_ENV} is required")
    # Connect only when needed, through the node's slots (which its node names in our env).
    share_from_env(application=f"refine worker {args.node}")
    return run_attempt(
        args.journal, node_id=args.node, goal_id=args.goal, token=args.token, round=args.round
    )


@dataclass(frozen=True)
class Ready:
    """A claimed attempt, recorded and reread right before launch: run its recipe now."""

    claim: Claim
    argv: tuple[str, ...]
    cwd: str
    timeout_s: float
    log_path: str
    location: str  # the journal's, and its id: where its process record is (ProcessRegistry)
    journal_id: str | None
    helper: int | None = None  # the claim helper that sent it, to reap once the recipe runs

    def registry(self) -> ProcessRegistry:
        return ProcessRegistry(self.location, self.claim.node_id, self.journal_id)

    def sync_record(self) -> None:
        """Make the process record durable (after the hand-over: off the launch path)."""
        with contextlib.suppress(OSError):  # e.g. an I/O error: it stays what readers see
            self.registry().sync(self.claim.run_id, self.claim.epoch)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str, helper: int | None = None) -> Ready:
        data = {**json.loads(text), "helper": helper}
        return cls(**{**data, "claim": Claim(**data["claim"]), "argv": tuple(data["argv"])})


def run_attempt(
    location: str, *, node_id: str, goal_id: str, token: str, round: int | None = None
) -> int:
    """The worker process's way: claim in a short-lived helper process, then run the recipe.

    Claiming (the command, the process record, the reread before launch) writes to many pages
    this process shares with the forkserver; done in a helper that exits, they are returned,
    and the worker that waits out the recipe stays a few MB (issue 14). The helper is this
    worker's agent: it records this worker's pid, and any failure of it ends this attempt only.
    """
    owner = os.getpid()  # here, not in the helper
    # Bound before the claim: a change committed after the claim's reread wakes us.
    with Inbox(token, poll_s=_poll_s(location)) as inbox:
        ready = _in_helper(
            lambda send: _claim_in_helper(location, node_id, goal_id, token, round, owner, send)
        )
        if isinstance(ready, int):
            return ready
        inbox.follow(ready.registry().root)
        try:
            return _run_claimed(location, ready, inbox)
        finally:
            ready.registry().remove(ready.claim.run_id, ready.claim.epoch)


def run_worker(
    journal: Journal, *, node_id: str, goal_id: str, token: str, round: int | None = None
) -> int:
    """Claim, run, report in this process, on ``journal``; returns the exit code (EXIT_*)."""
    with Inbox(token, poll_s=_poll_s(journal.location)) as inbox:
        with journal.held():
            ready = _claim(journal, node_id, goal_id, token, round, owner=os.getpid())
        if isinstance(ready, int):
            return ready
        inbox.follow(ready.registry().root)
        try:
            with open(ready.log_path, "ab") as log:
                try:
                    recipe = _launch(ready, log)
                except OSError as exc:
                    return _unlaunched(Goals(journal), ready, log, exc)
                ready.sync_record()
                return _own(Goals(journal), ready, recipe, log, inbox)
        finally:
            ready.registry().remove(ready.claim.run_id, ready.claim.epoch)


def _poll_s(location: str) -> float:
    """How often a worker without a node looks by itself (see ``Inbox``)."""
    return ORPHAN_POLL_S if is_postgres_url(location) else POLL_S


def rehearse(rounds: int = REHEARSALS) -> None:
    """Whole attempts on a scratch journal, in the forkserver before it forks.

    What a worker runs writes to the pages it shares with the forkserver: the objects' reference
    counts, and in the first runs its bytecode too (specialised, counters) and lazy state
    (caches). Rehearsed here, those first-run writes happen once, in the forkserver, not in
    every worker (issue 14: ≈ 0.5 MB less per running attempt). Any failure is ignored.
    """
    import tempfile

    with contextlib.suppress(Exception), tempfile.TemporaryDirectory() as scratch:
        location = os.path.join(scratch, "rehearsal.db")
        Journal.open(location).close()
        for n in range(rounds):
            with Journal.open(location, create=False) as journal:
                goals = Goals(journal)
                goals.create(goal_id=f"r{n}", title="rehearsal", node_id="z", argv=["true"])
                ready = _claim(journal, "z", f"r{n}", "t", None, owner=os.getpid())
                assert isinstance(ready, Ready)
                ready = Ready.from_json(ready.to_json())
                with Inbox(f"rehearsal-{os.getpid()}-{n}", poll_s=POLL_S) as inbox:
                    with open(ready.log_path, "ab") as log:
                        _own(goals, ready, _launch(ready, log), log, inbox)
                    changes = journal.changes()
                    for _ in range(8):  # the waiting worker's loop, specialised
                        inbox.wait([], 0.0)
                        _look(goals, ready.claim, changes, True)
                ready.registry().remove(ready.claim.run_id, ready.claim.epoch)


def _claim_in_helper(
    location: str,
    node_id: str,
    goal_id: str,
    token: str,
    round: int | None,
    owner: int,
    send: Callable[[int | Ready], None],
) -> None:
    # One connection for the open, the claim, its record and its reread, closed (and its slot
    # given back) once the answer is sent.
    with keeping_connections():
        try:
            journal = Journal.open(location, create=False)
        except RefineError as exc:
            _say(f"journal unavailable: {exc}")
            send(EXIT_UNAVAILABLE)
            return
    with journal:  # closed after sending: the worker launches meanwhile
        result = _claim(journal, node_id, goal_id, token, round, owner=owner)
        send(result)
    if isinstance(result, Ready):
        result.sync_record()


def _claim(
    journal: Journal, node_id: str, goal_id: str, token: str, round: int | None, *, owner: int
) -> int | Ready:
    """Claim the Goal's Run, record process ``owner`` (the worker) and reread right before
    launch: Ready to launch, or the exit code (the end was reported when it had to be)."""
    goals = Goals(journal)
    worker = worker_name(node_id, token)
    try:
        started = _start_patiently(goals, goal_id, node_id, worker, token, round)
    except StorageError as exc:  # not a refusal of the start: the node may try again
        why = "" if isinstance(exc, JournalNotPermittedError) else ", journal unavailable"
        _say(f"{goal_id}: not started{why}: {exc}")
        return EXIT_UNAVAILABLE
    except RefineError as exc:
        _say(f"{goal_id}: not started: {exc}")
        return EXIT_REFUSED
    assert started.run is not None and started.attempt is not None
    claim = Claim(
        goal_id, node_id, started.run.run_id, started.goal.round, started.attempt.epoch, worker
    )
    if started.replayed:  # seed: never launch work from a replayed claim; re-read ownership
        now = _reread(goals, claim)
        _say(
            f"{claim.run_id}/{claim.epoch}: this claim was replayed (token {token} was used"
            f" before; the attempt is {_ownership(now)}): not launching the recipe again"
        )
        if now in ("ours", "cancel"):  # our own claim, its first answer lost: nothing runs it
            return _end_unlaunched(goals, claim)
        return EXIT_REFUSED
    registry = ProcessRegistry.for_journal(journal, node_id)
    log_path = registry.log_path(claim.run_id, claim.epoch)
    try:
        # Synced after the hand-over, while the worker launches (``Ready.sync_record``): see
        # ProcessRegistry.record.
        registry.record(_record_of(owner, claim, log_path, journal.journal_id), sync=False)
    except OSError as exc:  # e.g. disk full: as the owner, say so rather than vanish
        _say(f"{claim.run_id}/{claim.epoch}: cannot record this process: {exc}")
        why = f"cannot record the worker process: {exc}"[:400]
        return _report(goals, claim, exit_code=None, reason=why, log=log_path)
    goal = started.goal
    ready = Ready(
        claim,
        tuple(goal.recipe["argv"]),
        goal.recipe["cwd"],
        goal.budget["attempt_timeout_ms"] / 1000,
        str(log_path),
        journal.location,
        journal.journal_id,
    )
    # Reread right before launching: a cancellation (or any change) that committed between the
    # claim and now must stop the recipe from ever starting.
    verdict = _reread(goals, claim)
    if verdict == "ours":
        return ready
    try:
        if verdict == "cancel":
            return _report_cancel(goals, claim)
        _say(f"{claim.run_id}/{claim.epoch}: not launching: the attempt is {_ownership(verdict)}")
        return EXIT_SUPERSEDED
    finally:
        registry.remove(claim.run_id, claim.epoch)


def _start_patiently(
    goals: Goals, goal_id: str, node_id: str, worker: str, token: str, round: int | None
) -> GoalResult:
    """Start, repeating the same claim (same token, so the same command id) while the journal
    is unreachable: a connection lost at the commit leaves the outcome unknown, and only the
    repeat tells (seed: a replay means it committed). Another token would be refused by a
    claim that did commit, and the attempt it made would wait for an operator. A refusal of the
    role (JournalNotPermittedError: no privilege) is not waited for: it raises at once."""
    deadline = time.monotonic() + REPORT_PATIENCE_S
    delay = POLL_S
    while True:
        try:
            return goals.start(
                goal_id=goal_id, node_id=node_id, worker=worker, token=token, round=round
            )
        except StorageUnreachableError as exc:
            if time.monotonic() >= deadline:
                raise
            _say(f"{goal_id}: the claim waits for the journal: {exc}")
        time.sleep(delay)
        delay = min(delay * 2, RETRY_MAX_S)


def _end_unlaunched(goals: Goals, claim: Claim) -> int:
    """Our claim committed but its answer was lost: nothing was launched for the attempt and
    nothing will be. As its owner, end it (interrupt, or the pending cancellation) so the Goal
    moves on rather than waiting for an operator's cleanup."""
    rec = ProcessRegistry.for_journal(goals.journal, claim.node_id).get(claim.run_id, claim.epoch)
    if rec is not None and same_process(rec):  # a process runs it after all: not ours to end
        return EXIT_REFUSED
    try:
        with goals.journal.snapshot():
            goal = goals.read(claim.goal_id)
            run = Execution(goals.journal).read(claim.run_id)
        if goal is None or run is None or not run.runs_attempt(claim.epoch):
            return EXIT_SUPERSEDED
        goals.interrupt(
            goal_id=claim.goal_id,
            run_id=claim.run_id,
            epoch=claim.epoch,
            goal_version=goal.version,
            run_version=run.version,
            confirmed_by=claim.worker,
            method=NOT_LAUNCHED,
            command_id=f"run:{claim.run_id}:unlaunched:{claim.epoch}",
        )
    except RefineError as exc:  # changed meanwhile, or unreachable: an operator can still end it
        _say(f"{claim.run_id}/{claim.epoch}: the unlaunched attempt was not ended: {exc}")
        return EXIT_SUPERSEDED
    return EXIT_SETTLED


def _record_of(owner: int, claim: Claim, log_path: Path, journal_id: str | None) -> ProcessRecord:
    """The process record of the worker ``owner``: this process, or the worker whose claim
    helper this is (a fork: same command line and group, its own pid and create time)."""
    rec = ProcessRecord.for_current_process(
        node_id=claim.node_id,
        run_id=claim.run_id,
        epoch=claim.epoch,
        worker=claim.worker,
        log_path=log_path,
        journal_id=journal_id,
    )
    if owner == rec.pid:
        return rec
    created = create_time(owner)
    if created is None:
        raise OSError(f"the worker {owner} is gone")
    return replace(rec, pid=owner, create_time=created)


def _in_helper(step: Callable[[Callable[[int | Ready], None]], None]) -> int | Ready:
    """``step(send)`` run in a forked child of ours; what it sends is our result."""
    read_end, write_end = os.pipe()
    try:
        pid = os.fork()
    except OSError as exc:  # e.g. EAGAIN: claim here instead (this worker just stays larger)
        _say(f"no claim helper ({exc}): claiming in the worker")
        os.close(read_end)
        os.close(write_end)
        got: list[int | Ready] = []
        step(got.append)
        return got[0] if got else EXIT_CRASHED
    if pid == 0:  # the helper: never returns
        _helper(step, read_end, write_end)
    os.close(write_end)
    with open(read_end) as pipe:
        text = pipe.read()  # until the helper sent (or died)
    if not text:
        os.waitpid(pid, 0)
        _say("the claim helper failed (see above): nothing launched")
        return EXIT_CRASHED
    if text.lstrip("-").isdigit():
        os.waitpid(pid, 0)
        return int(text)
    return Ready.from_json(text, helper=pid)


def _helper(
    step: Callable[[Callable[[int | Ready], None]], None], read_end: int, write_end: int
) -> None:
    code = EXIT_CRASHED
    try:
        os.close(read_end)

        def send(result: int | Ready) -> None:
            text = str(result) if isinstance(result, int) else result.to_json()
            with open(write_end, "w") as pipe:
                pipe.write(text)

        step(send)
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        os._exit(code)


def _run_claimed(location: str, ready: Ready, inbox: Inbox) -> int:
    """Launch at once (the helper has just reread), then open the journal to watch and report."""
    with open(ready.log_path, "ab") as log:
        try:
            recipe: subprocess.Popen[bytes] | OSError = _launch(ready, log)
        except OSError as exc:
            recipe = exc
        if ready.helper is not None:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(ready.helper, 0)  # it only closes its journal now
        journal = _open_patiently(location, ready.journal_id)
        if journal is None:
            if not isinstance(recipe, OSError):
                _stop(recipe)
            return EXIT_UNAVAILABLE
        with journal:
            goals = Goals(journal)
            if isinstance(recipe, OSError):
                return _unlaunched(goals, ready, log, recipe)
            return _own(goals, ready, recipe, log, inbox)


def _open_patiently(location: str, journal_id: str | None) -> Journal | None:
    """Our journal, waiting out a short unavailability (the attempt is claimed: ours to report).
    By the id the claim found there: on PostgreSQL this costs no connection now (the first
    reread or report checks it)."""
    deadline = time.monotonic() + REPORT_PATIENCE_S
    delay = POLL_S
    while True:
        try:
            return Journal.open(location, create=False, journal_id=journal_id)
        except RefineError as exc:
            # Waiting does not give back a role its rights, nor bring back our journal.
            if time.monotonic() >= deadline or isinstance(
                exc, JournalNotPermittedError | NotAJournalError
            ):
                _say(f"journal unavailable: {exc}")
                return None
            _say(f"journal unavailable for now: {exc}")
        time.sleep(delay)
        delay = min(delay * 2, RETRY_MAX_S)


def _unlaunched(goals: Goals, ready: Ready, log: IO[bytes], exc: OSError) -> int:
    log.write(f"cannot start the recipe: {exc}\n".encode())
    why = f"cannot start the recipe: {exc}"[:400]
    return _report(goals, ready.claim, exit_code=None, reason=why, log=Path(ready.log_path))


def _own(
    goals: Goals, ready: Ready, recipe: subprocess.Popen[bytes], log: IO[bytes], inbox: Inbox
) -> int:
    """Watch the running recipe while the attempt is ours, then report its end."""
    claim, timeout_s = ready.claim, ready.timeout_s
    verdict, timed_out = _supervise(goals, claim, recipe, time.monotonic() + timeout_s, inbox)
    _stop(recipe)  # whatever the recipe left running ends with the attempt
    if verdict == "superseded":
        return EXIT_SUPERSEDED
    if timed_out:
        log.write(f"\n[worker] stopped after the {timeout_s:g} s attempt timeout\n".encode())
    if verdict == "cancel":
        return _report_cancel(goals, claim)
    code = recipe.returncode
    reason = f"timeout: ran longer than {timeout_s:g} s" if timed_out else None
    return _report(goals, claim, exit_code=code, reason=reason, log=Path(ready.log_path))


def _launch(ready: Ready, log: IO[bytes]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        list(ready.argv),
        cwd=ready.cwd,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        preexec_fn=_die_with_parent,  # stays in our process group (no new session)
    )


def _die_with_parent() -> None:
    # Linux: if the worker itself is killed alone, the recipe does not run on unowned.
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _supervise(
    goals: Goals, claim: Claim, recipe: subprocess.Popen[bytes], deadline: float, inbox: Inbox
) -> tuple[str, bool]:
    """Wait for the recipe, rereading Goal and Run when woken (``inbox``).

    Returns (verdict, timed_out); verdict "ours" | "cancel" | "superseded" | "unknown". The
    recipe is stopped (and reaped) on "cancel" or "superseded" or when the deadline passed.
    Waiting, the worker holds no connection and takes no CPU: it sleeps until its recipe
    exits, its node relays a change, the deadline, or (no node) its safety poll.
    """
    changes = goals.journal.changes()
    retry_at: float | None = None  # after an "unknown" verdict: look again then
    delay = POLL_S
    with _ExitWatch(recipe) as exit_fds:
        while True:
            until = deadline if retry_at is None else min(deadline, retry_at)
            timeout = until - time.monotonic()
            why = inbox.wait(exit_fds, timeout if exit_fds else min(timeout, POLL_S))
            if recipe.poll() is not None:
                return _verdict(goals, claim), False
            due = retry_at is not None and time.monotonic() >= retry_at
            if why in ("wake", "poll") or due:
                # A safety poll asks the change gate first (on SQLite, ≈ 5 µs); a wake-up or a
                # retry rereads at once.
                with goals.journal.held():
                    verdict = _look(goals, claim, changes, why != "poll" or due)
                retry_at = time.monotonic() + delay if verdict == "unknown" else None
                delay = min(delay * 2, RETRY_MAX_S) if verdict == "unknown" else POLL_S
                if verdict not in ("ours", "unknown"):
                    _stop(recipe)
                    return verdict, False
            if time.monotonic() >= deadline:
                _stop(recipe)
                return _verdict(goals, claim), True


class _ExitWatch:
    """The recipe's exit as a descriptor to wait on beside the wake-ups: a pidfd (Linux ≥ 5.3),
    readable once it exited. Without one (an empty list) the worker looks every POLL_S."""

    def __init__(self, recipe: subprocess.Popen[bytes]) -> None:
        self._fds: list[int] = []
        with contextlib.suppress(AttributeError, OSError):
            self._fds.append(os.pidfd_open(recipe.pid))

    def __enter__(self) -> list[int]:
        return self._fds

    def __exit__(self, *exc: object) -> None:
        for fd in self._fds:
            os.close(fd)


def _look(goals: Goals, claim: Claim, changes: ChangeSource, look: bool) -> str:
    """The verdict when the journal changed (or ``look``), else "ours" unread."""
    try:
        changed = changes.changed()
    except RefineError:  # unreachable for now: look (the verdict says "unknown")
        changed = True
    return _verdict(goals, claim) if changed or look else "ours"


def _verdict(goals: Goals, claim: Claim) -> str:
    """Reread Goal and Run: is the attempt still ours to continue and report?"""
    try:
        with goals.journal.held():  # one connection for both reads
            goal = goals.read(claim.goal_id)
            run = Execution(goals.journal).read(claim.run_id)
    except RefineError as exc:  # e.g. locked for a while: keep going, look again
        _say(f"{claim.goal_id}: cannot reread the journal: {exc}")
        return "unknown"
    if goal is None or run is None or not run.runs_attempt(claim.epoch):
        return "superseded"
    if run.cancel_requested is not None:
        return "cancel"
    moved = goal.node_id != claim.node_id or goal.round != claim.round
    return "superseded" if moved or goal.status != "running" else "ours"


def _reread(goals: Goals, claim: Claim, tries: int = 20) -> str:
    for _ in range(tries):
        verdict = _verdict(goals, claim)
        if verdict != "unknown":
            return verdict
        time.sleep(POLL_S)
    return "unknown"


def _reread_patiently(goals: Goals, claim: Claim) -> str:
    """The verdict, waiting out an unreachable journal (up to ``REPORT_PATIENCE_S``)."""
    deadline = time.monotonic() + REPORT_PATIENCE_S
    delay = POLL_S
    while (verdict := _verdict(goals, claim)) == "unknown" and time.monotonic() < deadline:
        time.sleep(delay)
        delay = min(delay * 2, RETRY_MAX_S)
    return verdict


def _ownership(verdict: str) -> str:
    return {
        "ours": "still ours and running",
        "cancel": "being cancelled",
        "superseded": "no longer ours (ended, or the goal moved on)",
    }.get(verdict, "unreadable for now")


def _stop(recipe: subprocess.Popen[bytes]) -> None:
    """SIGTERM our recipe and all it started, wait the grace, SIGKILL; always reaped.

    Also called once the recipe exited by itself: children it left behind in our process
    group must not run on after the attempt ended.
    """
    stop_group_members(STOP_GRACE_S)  # our group but us (when the node started our session)
    if recipe.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        recipe.terminate()
    try:
        recipe.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            recipe.kill()
        recipe.wait()


def _report(
    goals: Goals, claim: Claim, *, exit_code: int | None, reason: str | None, log: Path
) -> int:
    # One connection for the reread and the report (it is let go while the journal is
    # unreachable: the patient loops below wait without one).
    with goals.journal.held():
        return _report_held(goals, claim, exit_code=exit_code, reason=reason, log=log)


def _report_held(
    goals: Goals, claim: Claim, *, exit_code: int | None, reason: str | None, log: Path
) -> int:
    verdict = _reread_patiently(goals, claim)  # right before the transition
    if verdict == "cancel":
        return _report_cancel(goals, claim)
    if verdict != "ours":
        return EXIT_SUPERSEDED
    evidence = [f"exit:{exit_code}" if exit_code is not None else "exit:none", _digest(log)]
    if exit_code == 0 and reason is None:
        outcome, why = "completed", None
    else:
        outcome, why = "failed", reason or f"exit code {exit_code}"
    return _settle(goals, claim, outcome=outcome, reason=why, evidence=evidence)


def _report_cancel(goals: Goals, claim: Claim) -> int:
    with goals.journal.held():
        _reread_patiently(goals, claim)  # wait until the journal can take the report
        return _settle(goals, claim, outcome="cancelled", reason=None, evidence=())


def _settle(
    goals: Goals, claim: Claim, *, outcome: str, reason: str | None, evidence: Sequence[str]
) -> int:
    deadline = time.monotonic() + REPORT_PATIENCE_S
    delay = POLL_S
    while True:
        try:
            goals.settle(
                goal_id=claim.goal_id,
                run_id=claim.run_id,
                epoch=claim.epoch,
                outcome=outcome,
                reason=reason,
                evidence=list(evidence),
            )
        except StorageError as exc:  # maybe committed, maybe not: the same report again
            # A role that may not write never will: waiting does not deliver the report.
            if time.monotonic() >= deadline or isinstance(exc, JournalNotPermittedError):
                _say(f"{claim.run_id}/{claim.epoch}: report not delivered: {exc}")
                return EXIT_UNAVAILABLE
            _say(f"{claim.run_id}/{claim.epoch}: report waits for the journal: {exc}")
            time.sleep(delay)
            delay = min(delay * 2, RETRY_MAX_S)
            continue
        except RefineError as exc:  # superseded meanwhile: the journal refused, nothing written
            _say(f"{claim.run_id}/{claim.epoch}: report refused: {exc}")
            return EXIT_SUPERSEDED
        return EXIT_SETTLED


def _digest(path: Path) -> str:
    sha = hashlib.sha256()
    with contextlib.suppress(OSError), open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 16), b""):
            sha.update(block)
    return "sha256:" + sha.hexdigest()


def _say(message: str) -> None:
    print(f"worker {os.getpid()}: {message}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
