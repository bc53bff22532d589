"""What the dashboard and the CLI say before an operator command: the modal sentences, the
cleanup evidence, and the checks every command makes first (DESIGN §5).

The commands themselves (store.ops.operator) act on what ``stop_target`` / ``cleanup_target``
resolve here, so a sentence and its command never disagree about the attempt they mean. Reads
only: nothing here signals a process or writes the journal.
"""

from __future__ import annotations

import getpass
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from store.errors import (
    GoalNotFoundError,
    GoalStateError,
    GoalTerminalError,
    InvalidInputError,
    JournalClosedError,
    JournalReadOnlyError,
    NoActiveAttemptError,
    NoProcessRecordError,
    NotPermittedError,
    NotThisNodeError,
    RunNotFoundError,
    StaleAttemptError,
    VersionConflictError,
)
from store.host.logs import log_tail
from store.host.node_lock import NodeLock
from store.host.processes import ProcessRecord, ProcessRegistry, live_worker, same_process
from store.host.stopping import may_signal
from store.journal.api import Journal
from store.journal.locations import STATE_DIR_ENV
from store.model.execution import Attempt, Run
from store.model.goal import check_integer
from store.model.goals import (
    Goal,
    Goals,
    check_epoch,
    check_name,
    goal_id_of_run,
)
from store.names import NAME_CHARS
from store.ops.reads import claimed_at, launching
from store.records import dataclass

if TYPE_CHECKING:
    import psutil

LOG_TAIL_LINES = 20


@dataclass(frozen=True)
class CleanupEvidence:
    """What the Confirm cleanup modal shows before the operator states the work has ended."""

    run_id: str
    epoch: int
    node_id: str  # the Goal's node: where its attempt runs, and where it can be stopped
    worker: str
    record: ProcessRecord | None
    same_process_alive: bool
    log_tail: list[str]
    attempt_started_at: float | None  # the claim's commit time (wall clock, informational)
    last_output_age_s: float | None  # None: no log output
    last_output_at: float | None  # the log's last write (wall clock), for the modal's clock
    sentence: str  # what the process records prove
    ending: str  # what confirming does to the Goal: requeued, held, exhausted or cancelled
    runs_as_another_user: bool = False  # its process is a user's this one may not signal


def default_node() -> str:
    """$REFINE_NODE, else the short host name: the CLI and the dashboard agree on it."""
    if os.environ.get("REFINE_NODE"):
        return os.environ["REFINE_NODE"]
    # socket.gethostname() is uname(2)'s node name: read here without importing socket (≈ 2 ms
    # of every stop and cancel).
    return os.uname().nodename.split(".")[0]


def default_operator() -> str:
    """$REFINE_OPERATOR, else the login name made a valid operator name (``<operator>@<node>``).

    The CLI and the dashboard both ask here, so a script and the screen record the same name.
    """
    if os.environ.get("REFINE_OPERATOR"):
        return os.environ["REFINE_OPERATOR"]
    try:
        name = getpass.getuser()
    except (KeyError, OSError):
        name = ""
    name = "".join(c if c in NAME_CHARS else "-" for c in name)
    return name.strip("-._")[:64] or "operator"


# --- what a command acts on ------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """A Goal and its current Run as read (the versions an ending is recorded at)."""

    goal: Goal
    run: Run
    epoch: int | None  # the running attempt's epoch, if any
    record: ProcessRecord | None = None  # this node's record of that attempt


def require_goal(goals: Goals, goal_id: str) -> Goal:
    goal = goals.read(goal_id)
    if goal is None:
        raise GoalNotFoundError(f"no goal {goal_id}", goal_id=goal_id)
    return goal


def check_expected_version(expected_version: int | None) -> None:
    """An expected Goal version is a positive integer (None: no check asked)."""
    if expected_version is not None:
        check_integer(expected_version, "expected_version", 1, 2**53 - 1)


def check_version(goal: Goal, expected_version: int | None) -> None:
    """The Goal is still at the version the caller read (None: no check)."""
    if expected_version is not None and goal.version != expected_version:
        raise VersionConflictError(
            f"goal {goal.goal_id} is at version {goal.version}, not {expected_version}",
            goal_id=goal.goal_id,
        )


def running_attempt_of(goals: Goals, goal: Goal) -> tuple[Run, Attempt]:
    run = goals.current_run(goal)
    if run is None:
        raise RunNotFoundError(f"run {goal.run_id} was never submitted", run_id=goal.run_id)
    attempt = run.running_attempt
    if attempt is None:
        if goal.terminal:
            raise GoalTerminalError(f"goal {goal.goal_id} is {goal.status}", goal_id=goal.goal_id)
        raise NoActiveAttemptError(
            f"goal {goal.goal_id} is {goal.status}: no attempt is running",
            goal_id=goal.goal_id,
            run_id=run.run_id,
        )
    return run, attempt


def registry_of(journal: Journal, node: str) -> ProcessRegistry:
    return ProcessRegistry.for_journal(journal, node)


def record_of(journal: Journal, node: str, run_id: str, epoch: int) -> ProcessRecord | None:
    return registry_of(journal, node).get(run_id, epoch)


def alive_words(record: ProcessRecord | None, epoch: int) -> str | None:
    """Why a cleanup of attempt ``epoch`` is refused while ``record`` proves its process alive
    (the same pid and start time); None when it does not."""
    if record is None or not same_process(record):
        return None
    return (
        f"process {record.pid} of attempt {epoch} is alive (same pid and start time):"
        " stop the goal instead of confirming cleanup"
    )


def worker_alive_words(pid: int, epoch: int) -> str:
    """Why a cleanup of attempt ``epoch`` is refused while its worker (``pid``, found by its
    token) is alive on this machine, recorded or not."""
    return (
        f"the worker of attempt {epoch} (pid {pid}) is alive on this machine:"
        " stop the goal (or wait for it to start) instead of confirming cleanup"
    )


def records_here(journal: Journal, node: str) -> bool:
    """Whether this machine's state dir keeps ``node``'s process records, so that a missing
    or dead one means its process is gone: its node runs from this state dir now (its lock is
    held), or no node of that name is live anywhere. A live node whose lock is not held here
    keeps them elsewhere (the state dir of the user it runs as, another machine): a dashboard
    opened there saw every attempt of it as gone and alerted so, about live work."""
    if NodeLock(registry_of(journal, node).root).held_now():
        return True
    now, rows = journal.presence()
    row = next((r for r in rows if r.node_id == node), None)
    return row is None or row.state(now) != "live"


def another_users(record: ProcessRecord) -> bool:
    """The recorded process is alive (a pid taken since by another process is not it) and runs
    as another user, whom this user may not signal."""
    return same_process(record) and not may_signal(record.pid)


def foreign_words(
    registry: ProcessRegistry, run_id: str, epoch: int, record: ProcessRecord | None
) -> str | None:
    """What to say of this node's attempt ``epoch`` when this user cannot act on its process:
    its record is here but unreadable, or its process is another user's (``another_users``: a
    node that runs as another user); None when it can, or there is no record. Never "its
    process is gone", never "confirm cleanup": the node's own user stops it."""
    if record is None and not registry.readable(run_id, epoch):
        return (
            f"the process record of attempt {epoch} of run {run_id} cannot be read by this user"
            f" (node {registry.node_id} runs as another user)"
        )
    if record is not None and another_users(record):
        return (
            f"the process of attempt {epoch} of run {run_id} (pid {record.pid}) runs as another"
            f" user (node {registry.node_id}'s), whom this user may not signal"
        )
    return None


def check_writable(journal: Journal) -> None:
    """Refuse before any signal: a Stop we could not record must not kill anything."""
    if journal.closed:
        raise JournalClosedError("journal is closed")
    if journal.read_only:
        raise JournalReadOnlyError("journal is open read-only: no operator actions")


def stop_target(
    journal: Journal, goal_id: str, node: str, expected_version: int | None = None
) -> Target:
    """Stop applies to a running attempt of this node's Goal with a local process record.

    ``expected_version``: the Goal's version as the caller read it; VersionConflictError (before
    any other refusal of the Goal's state) when it changed since."""
    check_name(goal_id, "goal_id")
    check_name(node, "node")
    goals = Goals(journal)
    goal = require_goal(goals, goal_id)
    check_version(goal, expected_version)
    if goal.node_id != node:
        raise NotThisNodeError(
            f"goal {goal_id} runs on node {goal.node_id}: stop it from that node",
            goal_id=goal_id,
        )
    run, attempt = running_attempt_of(goals, goal)
    registry = registry_of(journal, node)
    record = registry.get(run.run_id, attempt.epoch)
    if record is None:
        advice = no_record_advice(registry, journal, run.run_id, attempt)
        raise NoProcessRecordError(advice, goal_id=goal_id, run_id=run.run_id)
    if foreign := foreign_words(registry, run.run_id, attempt.epoch, record):
        raise NotPermittedError(
            f"{foreign}: stop it as that user", goal_id=goal_id, run_id=run.run_id
        )
    return Target(goal, run, attempt.epoch, record)


def no_record_advice(
    registry: ProcessRegistry,
    journal: Journal,
    run_id: str,
    attempt: Attempt,
    workers: Mapping[str, int] | None = None,
) -> str:
    """Why Stop finds no record of a running attempt, where it looked, and what to do.
    ``workers``: this machine's live workers (``live_workers``), looked up once by a caller
    advising on many attempts; None: looked for now.

    "Starting" only while the claim is young (``reads.launching``; its worker may be alive
    then): a worker records itself a few ms after its claim. An older attempt whose worker runs
    here has its record in another state dir (a wrong ``--state-dir``), or lost it: waiting
    would not help, and saying "try again" sent operators round forever (issue 21.13).
    """
    which = f"attempt {attempt.epoch} of run {run_id}"
    elsewhere = registry.recorded_elsewhere(run_id, attempt.epoch)
    if elsewhere is not None:  # a state dir shared by machines, a node id used twice
        return f"{which} was recorded on machine {elsewhere}: stop it there"
    where = f"{registry.processes_dir}{_reserved_for_another(registry)}"
    if unread := foreign_words(registry, run_id, attempt.epoch, None):
        return f"{unread}: stop it as that user"
    claimed = claimed_at(journal, run_id, attempt.epoch)
    has_log = registry.find_log(run_id, attempt.epoch).exists()
    worker = None if launching(claimed, has_log=has_log) else _live(attempt.worker, workers)
    if claimed is not None and launching(claimed, has_log=has_log and worker is None):
        age = f"{max(0.0, time.time() - claimed):.0f} s"
        return (
            f"{which} is starting (claimed {age} ago, no process record in {where} yet);"
            " try again in a moment"
        )
    if worker is not None:
        return (
            f"no process record for {which} in {where}, yet its worker (pid {worker.pid}) runs"
            f" on this machine: {_records_of(worker, registry)}"
        )
    if not records_here(journal, registry.node_id):
        return (
            f"no process record for {which} in {where}, and node {registry.node_id} is live"
            " from another state dir (another user's, or another machine's): stop it there"
        )
    return (
        f"no process record for {which} in {where}: if its work has ended, confirm cleanup instead"
    )


def _live(worker: str, workers: Mapping[str, int] | None) -> psutil.Process | None:
    """The live worker process of ``worker``: from ``workers`` when given, else looked for."""
    if workers is None:
        return live_worker(worker)
    import psutil

    pid = workers.get(worker)
    try:
        return None if pid is None else psutil.Process(pid)
    except psutil.Error:  # ended since the look
        return None


def _reserved_for_another(registry: ProcessRegistry) -> str:
    owner = registry.state_dir_journal()
    if owner is None or registry.journal_id is None or owner == registry.journal_id:
        return ""
    return f" (a state dir of journal {owner}, not of this one)"


def _records_of(worker: psutil.Process, registry: ProcessRegistry) -> str:
    """Where that worker keeps its records, as far as its environment tells."""
    import psutil

    try:
        chosen = worker.environ().get(STATE_DIR_ENV)
    except psutil.Error:
        chosen = None
    if chosen and Path(chosen) != registry.root:
        return f"it keeps its records in {chosen}: give this command --state-dir {chosen}"
    return (
        "this command's state dir (--state-dir, $REFINE_STATE_DIR) is not its node's, or its"
        " record was lost: stop it with its node's state dir, or end that process and confirm"
        " cleanup"
    )


# --- sentences -------------------------------------------------------------------------------


def count(n: int, noun: str) -> str:
    """``1 attempt``, ``2 attempts``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def ending_of(goal: Goal, run: Run, epoch: int) -> str:
    """What recording the end of attempt ``epoch`` does to the Goal, in a word: ``cancelled``
    (its pending cancellation recorded), ``exhausted``, ``held`` or ``requeued``."""
    if run.cancel_requested:
        return "cancelled"
    if epoch >= run.budget["max_attempts"]:
        return "exhausted"
    return "held" if goal.redelivery == "operator" else "requeued"


def ending_words(goal: Goal, run: Run, epoch: int) -> str:
    """What recording the end of attempt ``epoch`` will do to the Goal."""
    total = run.budget["max_attempts"]
    ending = ending_of(goal, run, epoch)
    if ending == "cancelled":
        return "the pending cancellation will be recorded; nothing is requeued"
    if ending == "exhausted":
        return f"the goal will be exhausted (all {total} attempts used)"
    if ending == "held":
        return (
            "the goal will be held until an operator releases it (redelivery: operator;"
            f" attempt {epoch + 1} of {total} next)"
        )
    return f"the goal will be requeued (attempt {epoch + 1} of {total})"


def describe_stop(journal: Journal, goal_id: str, *, node: str, grace_s: float = 5.0) -> str:
    """The Stop modal's sentence; raises the typed refusal when Stop does not apply."""
    check_grace(grace_s)
    check_writable(journal)
    target = stop_target(journal, goal_id, node)
    run, epoch, rec = target.run, target.epoch, target.record
    assert rec is not None and epoch is not None
    if same_process(rec):
        how = f"SIGTERM to process group {rec.pgid}, SIGKILL after {grace_s:g} s"
    else:
        how = f"process {rec.pid} is no longer running (nothing to signal)"
    head = f"Stop attempt {epoch} of run {run.run_id} on node {node}"
    return f"{head}: {how}; {ending_words(target.goal, run, epoch)}"


def describe_cancel(journal: Journal, goal_id: str, *, node: str, grace_s: float = 5.0) -> str:
    """The Cancel modal's sentence; raises the typed refusal when Cancel does not apply."""
    check_grace(grace_s)
    check_writable(journal)
    check_name(goal_id, "goal_id")
    check_name(node, "node")
    goals = Goals(journal)
    goal = require_goal(goals, goal_id)
    refuse_cancel(goals, goal)
    head = f"Cancel goal {goal_id} ({goal.status}): it becomes cancelled at once, never to restart"
    run = goals.current_run(goal)
    attempt = run.running_attempt if run is not None else None
    if attempt is None:
        return f"{head}; run {goal.run_id} is cancelled now (nothing is running)"
    which = f"attempt {attempt.epoch} of run {goal.run_id}"
    if goal.node_id != node:
        return f"{head}; {which} runs on node {goal.node_id}, whose scheduler stops it"
    registry = registry_of(journal, node)
    rec = registry.get(goal.run_id, attempt.epoch)
    if foreign := foreign_words(registry, goal.run_id, attempt.epoch, rec):
        return f"{head}; {foreign}: its node stops it"
    if rec is None:
        return f"{head}; no process record for {which} here: confirm cleanup once it has ended"
    if not same_process(rec):
        return f"{head}; the process of {which} (pid {rec.pid}) is gone: its cleanup is recorded"
    return f"{head}; {which}: SIGTERM to process group {rec.pgid}, SIGKILL after {grace_s:g} s"


def refuse_cancel(goals: Goals, goal: Goal) -> None:
    """A terminal Goal cannot be cancelled; one still cancelling says how to finish it."""
    if not goal.terminal:
        return
    run = goals.current_run(goal)
    attempt = run.running_attempt if run is not None else None
    if goal.status == "cancelled" and attempt is not None:
        raise GoalTerminalError(
            f"goal {goal.goal_id} is already cancelled; attempt {attempt.epoch} still runs:"
            f" stop it on node {goal.node_id}, or confirm cleanup once it has ended",
            goal_id=goal.goal_id,
        )
    raise GoalTerminalError(f"goal {goal.goal_id} is {goal.status}", goal_id=goal.goal_id)


# --- Confirm cleanup -------------------------------------------------------------------------


def check_cleanup_inputs(run_id: str, epoch: int, node: str) -> str:
    """A cleanup's run id, epoch and node, checked before anything is read: the run's Goal."""
    goal_id = goal_id_of_run(run_id) if isinstance(run_id, str) else None
    if goal_id is None:
        raise InvalidInputError("run_id must be <goal_id>.r<round>")
    check_epoch(epoch)
    check_name(node, "node")
    return goal_id


def cleanup_target(journal: Journal, run_id: str, epoch: int, node: str) -> Target:
    """The running attempt ``epoch`` of ``run_id`` (the Goal's current Run)."""
    goal_id = check_cleanup_inputs(run_id, epoch, node)
    goals = Goals(journal)
    goal = require_goal(goals, goal_id)
    if goal.run_id != run_id:
        raise GoalStateError(
            f"goal {goal_id} is at run {goal.run_id}, not {run_id}", goal_id=goal_id, run_id=run_id
        )
    run, attempt = running_attempt_of(goals, goal)
    if attempt.epoch != epoch:
        raise StaleAttemptError(
            f"attempt {epoch} of run {run_id} is not running (attempt {attempt.epoch} is)",
            goal_id=goal_id,
            run_id=run_id,
        )
    record = record_of(journal, goal.node_id, run_id, epoch) if goal.node_id == node else None
    return Target(goal, run, epoch, record)


# --- evidence and markers for the dashboard --------------------------------------------------


def cleanup_evidence(journal: Journal, run_id: str, *, epoch: int, node: str) -> CleanupEvidence:
    """What the operator should see before confirming cleanup of attempt ``epoch``."""
    target = cleanup_target(journal, run_id, epoch, node)
    goal, record = target.goal, target.record
    if goal.node_id != node:
        record = record_of(journal, goal.node_id, run_id, epoch)  # readable, not checkable here
    alive = goal.node_id == node and record is not None and same_process(record)
    worker = target.run.running_attempt.worker  # type: ignore[union-attr]
    found = live_worker(worker) if not alive else None
    alive = alive or found is not None
    log = (
        Path(record.log_path)
        if record
        else ProcessRegistry.for_journal(journal, goal.node_id).find_log(run_id, epoch)
    )
    tail = log_tail(log, LOG_TAIL_LINES)
    now = time.time()
    claimed = claimed_at(journal, run_id, epoch)
    started = claimed if claimed is not None else (record.started_at if record else None)
    try:
        output_at: float | None = log.stat().st_mtime
    except OSError:
        output_at = None
    output_age = None if output_at is None else max(0.0, now - output_at)
    unread = None
    if goal.node_id == node and record is None:
        unread = foreign_words(registry_of(journal, node), run_id, epoch, None)
    here = goal.node_id != node or alive or records_here(journal, node)
    sentence = _evidence_sentence(goal, node, record, alive, here, unread)
    if found is not None:
        sentence = f"its worker (pid {found.pid}) is alive on this machine; {sentence}"
    return CleanupEvidence(
        run_id=run_id,
        epoch=epoch,
        node_id=goal.node_id,
        worker=worker,
        record=record,
        same_process_alive=alive,
        log_tail=tail,
        attempt_started_at=started,
        last_output_age_s=output_age,
        last_output_at=output_at,
        sentence=sentence,
        ending=ending_words(goal, target.run, epoch),
        runs_as_another_user=alive and record is not None and another_users(record),
    )


def _evidence_sentence(
    goal: Goal,
    node: str,
    record: ProcessRecord | None,
    alive: bool,
    here: bool = True,
    unread: str | None = None,
) -> str:
    """``here``: another node's attempt, one proven alive, or this machine keeps the node's
    records (``records_here``); else nothing here can be checked. ``unread``: the words for
    a record here that this user cannot read (``foreign_words``)."""
    parts: list[str] = []
    if unread:
        parts.append(unread if alive else f"{unread}: its process cannot be checked from here")
    elif not here:
        parts.append(
            f"node {node} is live and its records are not in this state dir (another user's,"
            " or another machine's): its process cannot be checked from here"
        )
    elif record is None and goal.node_id != node:
        # Its records live on its own machine: their absence here proves nothing.
        parts.append(f"it runs on node {goal.node_id}: no process record can be checked from here")
    elif record is None:
        parts.append(f"no process record on node {goal.node_id}")
    else:
        started = time.strftime("%H:%M", time.localtime(record.started_at))
        parts.append(f"process record: pid {record.pid}, started {started}")
        if goal.node_id != node:
            parts.append(f"it runs on node {goal.node_id}: its process cannot be checked from here")
        elif alive:
            parts.append("that process is alive with the same start time")
        else:
            parts.append("no process with that pid and start time")
    return "; ".join(parts)


def needs_cleanup(journal: Journal, run: Run, *, node: str) -> bool:
    """A running attempt of this node's Goal that no live recorded process proves.

    Other nodes' attempts are theirs to reconcile (False here).
    """
    attempt = run.running_attempt
    goal_id = goal_id_of_run(run.run_id)
    if attempt is None or goal_id is None:
        return False
    goal = Goals(journal).read(goal_id)
    return goal is not None and unproven(journal, goal, run, node=node)


def unproven(journal: Journal, goal: Goal, run: Run, *, node: str) -> bool:
    """``needs_cleanup`` for a Goal and its current Run the caller already holds."""
    attempt = run.running_attempt
    if attempt is None or goal.node_id != node or goal.run_id != run.run_id:
        return False
    registry = registry_of(journal, node)
    record = registry.get(run.run_id, attempt.epoch)
    if record is None:
        gone_here = registry.readable(run.run_id, attempt.epoch)
    else:
        gone_here = not same_process(record)
    return gone_here and records_here(journal, node)  # else nothing here proves it gone


def check_grace(grace_s: float) -> None:
    if (
        isinstance(grace_s, bool)
        or not isinstance(grace_s, int | float)
        or not 0 <= grace_s <= 3600
    ):
        raise InvalidInputError("grace_s must be a number of seconds from 0 to 3600")
