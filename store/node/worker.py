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

The recipe is started by the claim helper, a child of the worker that claims, records the
worker, rereads Goal and Run and then becomes the recipe (``exec``): no cancellation committed
before that last reread lets the recipe start. All of that is one connection, given back right
before the exec. Its environment is the worker's without the journal's location and
credentials, nor its node's connection slots (``RECIPE_HIDDEN``): a recipe's output is shown in
the log pane and the browser, and it is the operator's code, not the journal's.

The recipe runs in the worker's process group (the node starts the worker as a session
leader), so stopping the group stops both. Time never ends an attempt in the journal by itself;
the worker, as the owner, may stop a recipe that outlived ``attempt_timeout_ms`` and report it
failed. At-least-once: a replacement worker simply runs the recipe again.

One module over 600 lines because the worker, its claim helper and its supervision are one
process's life, and their order (claim, record, reread, exec; report only as the owner) is the
safety argument: it reads top to bottom here.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import hashlib
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
import traceback
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import IO, Any

from store.errors import (
    CancelPendingError,
    JournalLockedError,
    JournalNotPermittedError,
    NotAJournalError,
    RefineError,
    StorageError,
    StorageUnreachableError,
)
from store.host.processes import (
    STOP_MARGIN_S,
    ProcessRecord,
    ProcessRegistry,
    create_time,
    same_process,
    stop_group_members,
)
from store.journal import session_end
from store.journal.api import ChangeSource, Journal
from store.journal.locations import STATE_DIR_ENV, JournalLocation
from store.journal.slots import SLOTS_ENV, WAKE_FILE_ENV, keeping_connections, share_from_env
from store.model.execution import Execution
from store.model.goals import GoalResult, Goals
from store.model.run import run_aggregate_id
from store.node.trouble import Trouble
from store.node.wakeups import Inbox

POLL_S = 0.25  # without a node, how often the worker looks whether a SQLite journal changed
# ... and a PostgreSQL one, each look a connection of its own (its node died: a rare case)
ORPHAN_POLL_S = 5.0
STOP_GRACE_S = 5.0  # SIGTERM → SIGKILL for its own recipe

EXIT_SETTLED = 0  # the attempt was reported (completed, failed or cancelled)
EXIT_REFUSED = 3  # the start was refused: nothing was claimed
EXIT_SUPERSEDED = 4  # the Goal moved on or the report was refused: nothing reported
EXIT_UNAVAILABLE = 5  # the journal could not be opened
EXIT_NO_HELPER = 6  # no claim helper could be forked: nothing was claimed
EXIT_NO_RECORD = 7  # claimed, but this machine could not record it (its state dir): reported
EXIT_STOPPED = 8  # SIGTERM from outside: the recipe had its grace; whoever stopped it records
EXIT_CRASHED = 70  # the worker (or its claim helper) raised: its traceback is in the node log

JOURNAL_ENV = "REFINE_JOURNAL"
# Never handed to a recipe: the journal's location (a URL may hold its password) and libpq's
# credentials (the worker needs them to report; the recipe's output goes to logs people see),
# nor the node's connection slots (a `refine` the recipe runs would take its workers' share).
RECIPE_HIDDEN = frozenset(
    {
        JOURNAL_ENV,
        "PGPASSWORD",
        "PGPASSFILE",
        "PGSERVICEFILE",
        "PGSSLKEY",
        "PGSSLCERT",
        SLOTS_ENV,
        WAKE_FILE_ENV,
    }
)
WAIT_POLL_S = 0.02  # how often Recipe.wait looks whether the recipe exited
STOPPING_LOOK_S = 0.1  # after a SIGTERM: how often to look whether its sender still stops us
NODE_FIRST_S = 2.0  # a cancelled attempt's recipe is left this long to the node relaying to us
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
    """A claimed, recorded attempt whose recipe is to be launched (if the reread allows)."""

    claim: Claim
    argv: tuple[str, ...]
    cwd: str | None
    timeout_s: float
    log_path: str
    location: str  # the journal's, and its id: where its process record is (ProcessRegistry)
    journal_id: str | None

    def registry(self) -> ProcessRegistry:
        return ProcessRegistry(self.location, self.claim.node_id, self.journal_id)

    def sync_record(self) -> None:
        """Make the process record durable (once the recipe runs: off the launch path)."""
        with contextlib.suppress(OSError):  # e.g. an I/O error: it stays what readers see
            self.registry().sync(self.claim.run_id, self.claim.epoch)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Ready:
        data = json.loads(text)
        return cls(**{**data, "claim": Claim(**data["claim"]), "argv": tuple(data["argv"])})


class Recipe:
    """The running recipe: our child (the claim helper, which became it by exec). The part of
    ``subprocess.Popen``'s interface the worker uses, for a process Popen did not start."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is not None:
            return self.returncode
        try:
            done, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:  # reaped by someone else: its code is lost (a failure)
            self.returncode = -1
            return self.returncode
        if done:
            self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Its exit code, once it exited; ``subprocess.TimeoutExpired`` after ``timeout``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0.0)
            time.sleep(WAIT_POLL_S)
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:  # unreaped, so the pid is still our child's
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


@dataclass(frozen=True)
class Launched:
    """What the claim helper did with a claimed attempt: ``recipe`` runs, or it could not be
    started (``failure`` says why: the recipe's command or folder is missing, say)."""

    ready: Ready
    recipe: Recipe | None
    failure: str = ""


def run_attempt(
    location: str, *, node_id: str, goal_id: str, token: str, round: int | None = None
) -> int:
    """The worker process's way: claim and launch in a helper process, then supervise.

    The helper claims, records this worker, rereads Goal and Run and, when the attempt is still
    ours, becomes the recipe (``exec``) at once: the launching process's last act before exec is
    that reread, so a cancellation committed before it is never missed (issue 21.15). Claiming
    writes to many pages this process shares with the forkserver; in the helper, they go with
    its exec, and the worker that waits out the recipe stays a few MB (issue 14). The helper is
    this worker's agent: it records this worker's pid, and any failure of it ends this attempt
    only.

    On PostgreSQL the helper does all that on one connection (a slot of the node's limit),
    handed to this worker right before its exec, which ends it and gives the slot back once the
    server let go of it; the worker then opens the journal by the id the claim found, which
    costs no connection until it rereads (woken by its node) or reports.
    """
    # Bound before the claim: a change committed after the helper's reread wakes us.
    with Inbox(token, poll_s=_poll_s(location)) as inbox:
        launched = _launch_in_helper(location, node_id, goal_id, token, round)
        if isinstance(launched, int):
            return launched
        ready = launched.ready
        inbox.follow(ready.registry().root)
        code = EXIT_CRASHED
        try:
            with open(ready.log_path, "ab") as log:
                journal = _open_patiently(location, ready.journal_id)
                if journal is None:
                    if launched.recipe is not None:
                        _stop(launched.recipe)
                    code = EXIT_UNAVAILABLE
                    return code
                with journal:
                    code = _supervised(Goals(journal), launched, log, inbox)
                    return code
        finally:
            _forget_record(ready, code)


def run_worker(
    journal: Journal, *, node_id: str, goal_id: str, token: str, round: int | None = None
) -> int:
    """``run_attempt`` with ``journal``, open here, to supervise and report on (the claim helper
    opens its own: no connection is used across a fork); returns the exit code (EXIT_*)."""
    with Inbox(token, poll_s=_poll_s(journal.location)) as inbox:
        launched = _launch_in_helper(journal.location, node_id, goal_id, token, round)
        if isinstance(launched, int):
            return launched
        ready = launched.ready
        inbox.follow(ready.registry().root)
        code = EXIT_CRASHED
        try:
            with open(ready.log_path, "ab") as log:
                code = _supervised(Goals(journal), launched, log, inbox)
                return code
        finally:
            _forget_record(ready, code)


def _forget_record(ready: Ready, code: int) -> None:
    """Remove our process record once we are done, unless we were stopped from outside: the
    end is recorded by the stopper, else by the node, which finds it by this record (gone, the
    attempt would stay running for an operator's cleanup)."""
    if code != EXIT_STOPPED:
        ready.registry().remove(ready.claim.run_id, ready.claim.epoch)


def _poll_s(location: str) -> float:
    """How often a worker without a node looks by itself (see ``Inbox``)."""
    return ORPHAN_POLL_S if JournalLocation(location).is_server else POLL_S


def rehearse(rounds: int = REHEARSALS) -> None:
    """Whole attempts on a scratch journal, in the forkserver before it forks.

    What a worker runs writes to the pages it shares with the forkserver: the objects' reference
    counts, and in the first runs its bytecode too (specialised, counters) and lazy state
    (caches). Rehearsed here, those first-run writes happen once, in the forkserver, not in
    every worker (issue 14: ≈ 0.5 MB less per running attempt). Any failure is ignored.
    """
    import tempfile

    with (
        contextlib.suppress(Exception),
        tempfile.TemporaryDirectory() as scratch,
        _state_dir(os.path.join(scratch, "state")),
    ):
        location = os.path.join(scratch, "rehearsal.db")
        Journal.open(location).close()
        for n in range(rounds):
            # A token of this process's own: its wake-up socket's name is free (another
            # node's forkserver may rehearse meanwhile).
            token = f"rehearsal-{os.getpid()}-{n}"
            with Journal.open(location, create=False) as journal:
                goals = Goals(journal)
                goals.create(goal_id=f"r{n}", title="rehearsal", node_id="z", argv=["true"])
                run_worker(journal, node_id="z", goal_id=f"r{n}", token=token)
                claim = Claim(f"r{n}", "z", f"r{n}.r1", 1, 1, worker_name("z", token))
                changes = journal.changes()
                with Inbox(token, poll_s=POLL_S) as inbox:
                    for _ in range(8):  # the waiting worker's loop, specialised
                        inbox.wait([], 0.0)
                        _look(goals, claim, changes, True)


@contextlib.contextmanager
def _state_dir(path: str) -> Iterator[None]:
    """``$REFINE_STATE_DIR`` set to ``path`` meanwhile. The rehearsal's records and logs must
    never reach the node's own state dir: its goals r0, r1... would overwrite, then remove, the
    records of real goals of those names (issue 21)."""
    before = os.environ.get(STATE_DIR_ENV)
    os.environ[STATE_DIR_ENV] = path
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(STATE_DIR_ENV, None)
        else:
            os.environ[STATE_DIR_ENV] = before


# --- the claim helper ------------------------------------------------------------------------
#
# It tells the worker what it did on a Unix socket that closes by itself when the helper execs
# (non-inheritable), one line each: the Ready it claimed (JSON), then nothing more once it
# became the recipe; or an exit code (nothing launched: the end was reported when it had to be);
# or "failed WHY" (the recipe could not be started). Nothing at all: the helper crashed. On
# PostgreSQL, right before the exec, it hands over its session's socket and slot with them
# (``session_end``): the worker ends that session, and gives the slot back once it is gone.


def _launch_in_helper(
    location: str, node_id: str, goal_id: str, token: str, round: int | None
) -> int | Launched:
    """Fork the claim helper, and learn from it what became of the attempt."""
    owner = os.getpid()  # here, not in the helper
    ours, theirs = socket.socketpair()  # both close-on-exec
    try:
        pid = os.fork()
    except OSError as exc:  # e.g. EAGAIN: nothing is claimed; the node tries again later
        ours.close()
        theirs.close()
        _say(f"{goal_id}: not started: no claim helper ({exc})")
        return EXIT_NO_HELPER
    if pid == 0:  # the helper: never returns
        _helper(location, node_id, goal_id, token, round, owner, theirs.detach(), ours.detach())
    theirs.close()
    with ours:
        lines, handed = session_end.receive(ours)  # until the helper exec'd or exited
    session_end.end_handed(handed)  # its session, ended before its slot is given back
    head, last = (lines[0], lines[-1]) if lines else ("", "")
    if not head.startswith("{"):
        os.waitpid(pid, 0)
        if last.lstrip("-").isdigit():
            return int(last)
        _say("the claim helper failed (see above): nothing launched")
        return EXIT_CRASHED
    ready = Ready.from_json(head)
    if len(lines) == 1:  # the pipe closed at its exec: the helper is the recipe now
        ready.sync_record()
        return Launched(ready, Recipe(pid))
    os.waitpid(pid, 0)
    if last.startswith("failed "):
        return Launched(ready, None, last.removeprefix("failed "))
    return int(last) if last.lstrip("-").isdigit() else EXIT_CRASHED


def _helper(
    location: str,
    node_id: str,
    goal_id: str,
    token: str,
    round: int | None,
    owner: int,
    write_end: int,
    read_end: int,
) -> None:
    """The claim helper's life: claim, record, reread, exec the recipe; or tell why not."""
    code = EXIT_CRASHED
    pipe: IO[str] | None = None
    try:
        os.close(read_end)
        pipe = open(write_end, "w")  # noqa: SIM115  (closed by exec, or by our exit)
        result = _claim_and_launch(location, node_id, goal_id, token, round, owner, pipe)
        if isinstance(result, str):  # the recipe could not be started: the worker reports it
            pipe.write(f"failed {' '.join(result.splitlines())}\n")
            code = 0
        else:
            pipe.write(f"{result}\n")
            code = result
    except BaseException:
        traceback.print_exc()
        with contextlib.suppress(Exception):
            if pipe is not None:
                pipe.write(f"\n{EXIT_CRASHED}\n")
    finally:
        with contextlib.suppress(Exception):
            if pipe is not None:
                pipe.flush()
            sys.stderr.flush()
        os._exit(code)


def _claim_and_launch(
    location: str,
    node_id: str,
    goal_id: str,
    token: str,
    round: int | None,
    owner: int,
    pipe: IO[str],
) -> int | str:
    """Claim, record ``owner``, tell it the Ready, then reread and exec the recipe. Returns
    only when the recipe was not launched: an exit code, or why it could not be started.

    One connection for it all (the open, the claim, its record, the reread, a report when not
    launching), kept from the open on although this process's connections are otherwise
    transient (``keeping_connections``), and handed to the worker by ``_exec_if_ours`` right
    before the exec (or given back when the journal closes)."""
    try:
        with keeping_connections():
            journal = Journal.open(location, create=False)
    except RefineError as exc:
        _say(f"journal unavailable: {exc}")
        return EXIT_UNAVAILABLE
    with journal:
        ready = _claim(journal, node_id, goal_id, token, round, owner=owner)
        if isinstance(ready, int):
            return ready
        pipe.write(ready.to_json() + "\n")
        pipe.flush()
        return _exec_if_ours(Goals(journal), ready, owner, pipe.fileno())


def _exec_if_ours(goals: Goals, ready: Ready, owner: int, channel: int) -> int | str:
    """Reread Goal and Run and, while the attempt is ours, become the recipe at once.

    What can be made ready for the exec is made before the reread, and only the exec's own
    steps follow it: a cancellation committed before the reread stops the recipe from ever
    starting, one committed after it finds the recipe started (issue 21.15: the reread was in
    this helper, the launch in the worker a few ms later, and a cancellation in between went
    unseen). Nothing that concerns the Run commits in between: the last look and the exec run
    with the journal held still (``Journal.commits_held``), which the exec itself releases. On
    SQLite that is the write lock, and the last look ``PRAGMA data_version`` (a few µs, and a
    reread if anything committed since the first); on PostgreSQL a lock this session holds on
    the Run, which every command on the Run waits for, and the last look a reread.
    Returns only when it did not exec: an exit code (the attempt is not ours, its end reported
    when it had to be), or why the recipe could not be started (reported by the worker, as its
    owner).
    """
    claim = ready.claim
    env = recipe_environment(os.environ)
    try:
        log = os.open(ready.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        devnull = os.open(os.devnull, os.O_RDONLY)
    except OSError as exc:
        return str(exc)
    server = JournalLocation(ready.location).is_server
    changes = None if server else _primed(goals.journal.changes())
    verdict = _reread(goals, claim)
    if verdict != "ours":
        os.close(log)
        os.close(devnull)
        return _not_launching(goals, claim, verdict)
    try:
        if ready.cwd is not None:
            os.chdir(ready.cwd)
        for sig in (signal.SIGPIPE, signal.SIGXFSZ):  # as Popen does: Python ignores them
            signal.signal(sig, signal.SIG_DFL)
        _die_with_parent()
        _warm_executable(ready.argv[0], env)
        with _held_still(goals.journal, claim):
            # The last look: a server's commits cannot be counted cheaply (its hold is only on
            # this Run's commands), so it rereads; SQLite rereads only if anything committed.
            if changes is None or _committed_since(changes):
                verdict = _reread(goals, claim)
            if verdict == "ours":
                os.dup2(devnull, 0)
                os.dup2(log, 1)
                os.dup2(log, 2)
                if os.getppid() != owner:  # the worker died meanwhile: nobody would own it
                    return EXIT_SUPERSEDED
                # The exec ends the session with no one to wait for its end: the worker does.
                session_end.hand_over(channel, goals.journal.session_fds())
                os.execvpe(ready.argv[0], list(ready.argv), env)
    except OSError as exc:
        return str(exc)
    except StorageError as exc:  # not held still within the patience: not started
        return f"the journal could not be held still before the launch: {exc}"
    os.close(log)
    os.close(devnull)
    return _not_launching(goals, claim, verdict)


@contextlib.contextmanager
def _held_still(journal: Journal, claim: Claim) -> Iterator[None]:
    """``journal.commits_held()``, waiting out other writers: a burst of claims may keep the
    lock past one busy timeout, and the claimed attempt is ours to launch (a cancellation
    committed meanwhile is seen by the last look). Any other storage error, or no lock within
    ``REPORT_PATIENCE_S``, raises."""
    deadline = time.monotonic() + REPORT_PATIENCE_S
    with contextlib.ExitStack() as held:
        while True:
            try:
                held.enter_context(journal.commits_held(run_aggregate_id(claim.run_id)))
                break
            except JournalLockedError as exc:  # each try waited a busy timeout already
                if time.monotonic() >= deadline:
                    raise
                attempt = f"{claim.run_id}/{claim.epoch}"
                _waits.failed(f"{attempt}: the launch waits for the journal: {exc}")
        yield


def _warm_executable(name: str, env: Mapping[str, str]) -> None:
    """Open and read the first page of the file the exec will run (found as ``execvpe`` finds
    it) before the journal is held still: a path or file that hangs (a hung network file
    system) then hangs here, not with every writer of the journal waiting. Best effort: the
    exec says what is wrong with it."""
    folders = [""] if "/" in name else env.get("PATH", os.defpath).split(os.pathsep)
    for folder in folders:
        path = os.path.join(folder, name)
        try:  # a regular file only: opening a FIFO or a device may block or act
            if not stat.S_ISREG(os.stat(path).st_mode):
                continue
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            continue
        with contextlib.suppress(OSError):
            os.read(fd, 4096)
        os.close(fd)
        return


def _primed(changes: ChangeSource) -> ChangeSource:
    """``changes``, its first answer (always "changed") taken: it reports commits from now."""
    _committed_since(changes)
    return changes


def _committed_since(changes: ChangeSource) -> bool:
    try:
        return changes.changed()
    except RefineError:  # unreadable for now: look (the reread says "unknown" if it stays so)
        return True


def recipe_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The worker's environment without the journal's location and credentials (RECIPE_HIDDEN)."""
    return {name: value for name, value in environ.items() if name not in RECIPE_HIDDEN}


def _not_launching(goals: Goals, claim: Claim, verdict: str) -> int:
    """The reread before launch found the attempt no longer ours: report a pending
    cancellation (as its owner), else say why; either way the process record goes."""
    try:
        if verdict == "cancel":
            return _report_cancel(goals, claim)
        _say(f"{claim.run_id}/{claim.epoch}: not launching: the attempt is {_ownership(verdict)}")
        return EXIT_SUPERSEDED
    finally:
        ProcessRegistry.for_journal(goals.journal, claim.node_id).remove(claim.run_id, claim.epoch)


def _claim(
    journal: Journal, node_id: str, goal_id: str, token: str, round: int | None, *, owner: int
) -> int | Ready:
    """Claim the Goal's Run and record process ``owner`` (the worker): Ready to launch once
    reread, or the exit code (the end was reported when it had to be)."""
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
        now = _reread_patiently(goals, claim)  # ours to end: nobody else will
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
        # Synced once the recipe runs (``Ready.sync_record``): see ProcessRegistry.record.
        registry.record(_record_of(owner, claim, log_path, journal.journal_id), sync=False)
    except OSError as exc:  # e.g. disk full: as the owner, say so rather than vanish
        _say(f"{claim.run_id}/{claim.epoch}: cannot record this process: {exc}")
        why = f"cannot record the worker process: {exc}"[:400]
        code = _report(goals, claim, exit_code=None, reason=why, log=log_path)
        return EXIT_NO_RECORD if code == EXIT_SETTLED else code  # the node's launches wait
    goal = started.goal
    return Ready(
        claim,
        tuple(goal.recipe["argv"]),
        goal.recipe["cwd"],
        goal.budget["attempt_timeout_ms"] / 1000,
        str(log_path),
        journal.location,
        journal.journal_id,
    )


def _start_patiently(
    goals: Goals, goal_id: str, node_id: str, worker: str, token: str, round: int | None
) -> GoalResult:
    """Start, repeating the same claim (same token, so the same command id) while the journal
    is unreachable: a connection lost at the commit leaves the outcome unknown, and only the
    repeat tells (seed: a replay means it committed). Another token would be refused by a
    claim that did commit, and the attempt it made would wait for an operator. Once a try was
    lost so, every later storage failure is waited out too: a repeat refused for a lock (a
    session of this machine's, cut off mid-command, holds it until the server ends it) says
    nothing about the first. A refusal of the role (JournalNotPermittedError: no privilege) is
    not waited for: it raises at once."""
    deadline = time.monotonic() + REPORT_PATIENCE_S
    delay = POLL_S
    unknown = False  # an earlier try may have committed: only the same claim can tell
    while True:
        try:
            return goals.start(
                goal_id=goal_id, node_id=node_id, worker=worker, token=token, round=round
            )
        except StorageError as exc:
            unknown = unknown or isinstance(exc, StorageUnreachableError)
            if not _waited_out(exc, unknown, deadline):
                raise
            _waits.failed(f"{goal_id}: the claim waits for the journal: {exc}")
        time.sleep(delay)
        delay = min(delay * 2, RETRY_MAX_S)


def _waited_out(exc: StorageError, unknown: bool, deadline: float) -> bool:
    """Whether a failed journal write is tried again: its outcome may be unknown, the role
    may write, and there is patience left."""
    permitted = not isinstance(exc, JournalNotPermittedError)
    return unknown and permitted and time.monotonic() < deadline


def _end_unlaunched(goals: Goals, claim: Claim) -> int:
    """Our claim committed but its answer was lost: nothing was launched for the attempt and
    nothing will be. As its owner, end it (interrupt, or the pending cancellation) so the Goal
    moves on rather than waiting for an operator's cleanup. A journal that is locked or out of
    reach for now is waited out (the attempt is ours: nobody else ends it)."""
    rec = ProcessRegistry.for_journal(goals.journal, claim.node_id).get(claim.run_id, claim.epoch)
    if rec is not None and same_process(rec):  # a process runs it after all: not ours to end
        return EXIT_REFUSED
    deadline = time.monotonic() + REPORT_PATIENCE_S
    delay = POLL_S
    while True:
        try:
            return _interrupt_unlaunched(goals, claim)
        except StorageError as exc:
            if not _waited_out(exc, True, deadline):
                _say(f"{claim.run_id}/{claim.epoch}: the unlaunched attempt was not ended: {exc}")
                return EXIT_SUPERSEDED
            attempt = f"{claim.run_id}/{claim.epoch}"
            _waits.failed(f"{attempt}: ending the unlaunched attempt waits: {exc}")
        except RefineError as exc:  # changed meanwhile: an operator can still end it
            _say(f"{claim.run_id}/{claim.epoch}: the unlaunched attempt was not ended: {exc}")
            return EXIT_SUPERSEDED
        time.sleep(delay)
        delay = min(delay * 2, RETRY_MAX_S)


def _interrupt_unlaunched(goals: Goals, claim: Claim) -> int:
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


def _supervised(goals: Goals, launched: Launched, log: IO[bytes], inbox: Inbox) -> int:
    """Watch the launched recipe and report its end, or report that it could not start."""
    if launched.recipe is None:
        return _unlaunched(goals, launched.ready, log, launched.failure)
    return _own(goals, launched.ready, launched.recipe, log, inbox)


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
            _waits.failed(f"journal unavailable for now: {exc}")
        time.sleep(delay)
        delay = min(delay * 2, RETRY_MAX_S)


def _unlaunched(goals: Goals, ready: Ready, log: IO[bytes], failure: str) -> int:
    log.write(f"cannot start the recipe: {failure}\n".encode())
    why = f"cannot start the recipe: {failure}"[:400]
    return _report(goals, ready.claim, exit_code=None, reason=why, log=Path(ready.log_path))


def _own(goals: Goals, ready: Ready, recipe: Recipe, log: IO[bytes], inbox: Inbox) -> int:
    """Watch the running recipe while the attempt is ours, then report its end."""
    claim, timeout_s = ready.claim, ready.timeout_s
    with _Terminated() as term:
        deadline = time.monotonic() + timeout_s
        verdict, timed_out = _supervise(goals, claim, recipe, deadline, inbox, term)
        stopper = _other_stopper(ready, recipe, verdict, inbox, term)
        if verdict == "stopped" or stopper is not None:
            return _stopped_from_outside(ready, recipe, stopper or "a SIGTERM")
        with _claimed_stopping(ready, recipe) as another:
            if another is not None:
                return _stopped_from_outside(ready, recipe, another)
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


def _die_with_parent() -> None:
    # Linux: if the worker itself is killed alone, the recipe does not run on unowned.
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _supervise(
    goals: Goals, claim: Claim, recipe: Recipe, deadline: float, inbox: Inbox, term: _Terminated
) -> tuple[str, bool]:
    """Wait for the recipe, rereading Goal and Run when woken (``inbox``).

    Returns (verdict, timed_out); verdict "ours" | "cancel" | "superseded" | "unknown", or
    "stopped" once ``term`` saw a SIGTERM (the recipe is left to whoever sent it). The caller
    stops a recipe still running (a cancellation, a Goal moved on, the deadline passed).
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
            why = inbox.wait([*exit_fds, term.fd], timeout if exit_fds else min(timeout, POLL_S))
            if term.received:
                return "stopped", False
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
                    return verdict, False
            if time.monotonic() >= deadline:
                return _verdict(goals, claim), True


class _Terminated:
    """SIGTERM to this worker, as a descriptor to wait on beside the recipe's exit.

    An operator's Stop or Cancel, and its node's cleanup of a cancelled attempt, send SIGTERM to
    our whole process group, the recipe's grace, then SIGKILL; a machine going down sends it to
    every process. Dying of it (the default) SIGKILLed the recipe at once, by its parent-death
    signal: a recipe that cleans up on SIGTERM never had its grace. So the signal only wakes us.
    """

    def __init__(self) -> None:
        self.received = False
        self.fd = -1
        self._write = -1
        self._before: Any = None

    def _on_term(self, signum: int, frame: object) -> None:
        self.received = True
        with contextlib.suppress(OSError):
            os.write(self._write, b"t")

    def __enter__(self) -> _Terminated:
        self.fd, self._write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._before = signal.signal(signal.SIGTERM, self._on_term)
        return self

    def __exit__(self, *exc: object) -> None:
        signal.signal(signal.SIGTERM, self._before)
        os.close(self.fd)
        os.close(self._write)


def _stopped_from_outside(ready: Ready, recipe: Recipe, by: str) -> int:
    """Stopped by ``by`` (after a SIGTERM, or its marker): the end is not ours to report (the
    Stop or Cancel records it; else, the machine going down, the node finds the process gone).
    While a stopper's marker says it is stopping the attempt, it signalled the recipe too and
    SIGKILLs our group after its grace: wait. Otherwise (a SIGTERM to us alone) stop the recipe
    as for a cancel."""
    claim, registry = ready.claim, ready.registry()
    _say(f"{claim.run_id}/{claim.epoch}: stopped by {by}: the recipe has its grace, not our report")
    while recipe.poll() is None and registry.stopping(claim.run_id, claim.epoch):
        with contextlib.suppress(subprocess.TimeoutExpired):
            recipe.wait(timeout=STOPPING_LOOK_S)
    _stop(recipe)  # the recipe, or what it left in our group, ends with the attempt
    return EXIT_STOPPED


def _other_stopper(
    ready: Ready, recipe: Recipe, verdict: str, inbox: Inbox, term: _Terminated
) -> str | None:
    """Who else stops our running recipe (a Stop, a Cancel, the node's cleanup of a cancelled
    attempt), if anyone: it signalled the recipe already, and a second SIGTERM would cut its
    grace short. A cancellation is left to a node that relays to us for ``NODE_FIRST_S``: it
    acts on the same commit in the same moment (before, both did: two SIGTERMs)."""
    claim, registry = ready.claim, ready.registry()
    if term.received:  # maybe while we reread, the recipe dead of it by now: not ours to report
        return registry.stopping(claim.run_id, claim.epoch) or "a SIGTERM"
    if recipe.poll() is not None:
        return None
    waited = time.monotonic() + (NODE_FIRST_S if verdict == "cancel" and inbox.relayed else 0)
    while (by := registry.stopping(claim.run_id, claim.epoch)) is None and not term.received:
        if recipe.poll() is not None or time.monotonic() >= waited:
            return None
        with contextlib.suppress(subprocess.TimeoutExpired):
            recipe.wait(timeout=STOPPING_LOOK_S)
    return by or "a SIGTERM"


@contextlib.contextmanager
def _claimed_stopping(ready: Ready, recipe: Recipe) -> Iterator[str | None]:
    """While we stop our still-running recipe (a cancellation, the Goal moved on, its time
    limit), claim it as a Stop marks it: the node's cleanup of a cancelled attempt then leaves
    it to us rather than SIGTERM it a second time. Yields who else claimed it first (then it is
    theirs), else None. Nothing is written for a recipe that ended."""
    if recipe.poll() is not None:
        yield None
        return
    claim, registry = ready.claim, ready.registry()
    until = time.time() + 2 * STOP_GRACE_S + STOP_MARGIN_S  # _stop's two graces, at most
    marker = registry.claim_stopping(claim.run_id, claim.epoch, by=claim.worker, until=until)
    if marker is None:
        yield registry.stopping(claim.run_id, claim.epoch) or "another stopper"
        return
    try:
        yield None
    finally:
        registry.clear_stopping(marker)


class _ExitWatch:
    """The recipe's exit as a descriptor to wait on beside the wake-ups: a pidfd (Linux ≥ 5.3),
    readable once it exited. Without one (an empty list) the worker looks every POLL_S."""

    def __init__(self, recipe: Recipe) -> None:
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
        _waits.failed(f"{claim.goal_id}: cannot reread the journal: {exc}")
        return "unknown"
    _waits.passed(f"{claim.goal_id}: the journal answers")
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


def _stop(recipe: Recipe) -> None:
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
            _waits.failed(f"{claim.run_id}/{claim.epoch}: report waits for the journal: {exc}")
            time.sleep(delay)
            delay = min(delay * 2, RETRY_MAX_S)
            continue
        except CancelPendingError:
            if outcome == "cancelled":  # never: a cancelled end is what a pending one awaits
                raise
            # Committed since the reread (a recipe that started before its cancellation and
            # ended after it): the attempt is still ours, and ends cancelled.
            _say(f"{claim.run_id}/{claim.epoch}: cancelled before the {outcome} end was reported")
            return _report_cancel(goals, claim)
        except RefineError as exc:  # superseded meanwhile: the journal refused, nothing written
            _say(f"{claim.run_id}/{claim.epoch}: report refused: {exc}")
            return EXIT_SUPERSEDED
        _waits.passed(f"{claim.run_id}/{claim.epoch}: report delivered: the journal answers")
        return EXIT_SETTLED


def _digest(path: Path) -> str:
    sha = hashlib.sha256()
    with contextlib.suppress(OSError), open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 16), b""):
            sha.update(block)
    return "sha256:" + sha.hexdigest()


def _say(message: str) -> None:
    # Its stderr is the node log: on a full disk the words are lost, never the report they
    # precede (raised here, they turned a claimed attempt into one nobody reports).
    with contextlib.suppress(OSError):
        print(f"worker {os.getpid()}: {message}", file=sys.stderr, flush=True)


# Waits for the journal (an outage: the worker tries again every few seconds for up to an
# hour) are said once, and once more when it answers again, not at every try.
_waits = Trouble(_say)


if __name__ == "__main__":
    sys.exit(main())
