"""Operator commands (DESIGN §5): Stop, Cancel, Confirm cleanup, Release, and what the dashboard
shows before them (the modal sentences, the cleanup evidence, the ``needs cleanup`` marker).

The order is always: read, check (every refusal is typed and writes and signals nothing), act
on the local process, then record in one journal transaction at the versions read. Process
records are node-local observations, never authority: they only say which process to stop, and
a pid counts as the recorded process only with the same create time.
"""

from __future__ import annotations

import getpass
import os
import re
import socket
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

from store.errors import (
    GoalNotFoundError,
    GoalStateError,
    GoalTerminalError,
    InvalidInputError,
    JournalClosedError,
    JournalReadOnlyError,
    NoActiveAttemptError,
    NoProcessRecordError,
    NotThisNodeError,
    ProcessAliveError,
    RunNotFoundError,
    StaleAttemptError,
    VersionConflictError,
)
from store.execution import Attempt, Run
from store.goals import (
    OPERATOR_CONFIRMED,
    Goal,
    GoalResult,
    Goals,
    check_epoch,
    check_name,
    ended_by_words,
    goal_id_of_run,
)
from store.journal_api import Journal
from store.processes import (
    ProcessRecord,
    ProcessRegistry,
    StopOutcome,
    live_worker,
    log_tail,
    same_process,
    stop_process,
)

PROCESS_GONE_METHOD = "process-exited"
LOG_TAIL_LINES = 20
# A worker records its process right after its claim commits; a claim younger than this with
# no record yet is taken to be starting (the advice differs, nothing else does).
LAUNCH_WINDOW_S = 10.0
# How long after its grace a stopper may still take to SIGKILL, wait and record: the node
# leaves a stopping attempt alone until then (and reconciles it after, should the stopper die).
STOP_MARGIN_S = 15.0


@dataclass(frozen=True)
class ActionReport:
    """What an operator command did, in words and in fields (the CLI prints it as JSON)."""

    action: str  # stop | cancel | cleanup | release
    goal_id: str
    run_id: str | None
    epoch: int | None
    node_id: str  # the Goal's node: where its attempt runs
    signals: tuple[str, ...]
    process: str  # exited | killed | not-running | mismatch | no-record | other-node | none
    requeued: bool
    held: bool
    outcome: str  # requeued | held | exhausted | cancelled | cancel-requested | released | ...
    why: str
    # Who recorded the attempt's end (this operator, the node's scheduler, the worker itself);
    # None when no attempt ended (yet).
    recorded_by: str | None = None

    def to_json(self) -> dict[str, object]:
        data = asdict(self)
        data["signals"] = list(self.signals)
        return data


@dataclass(frozen=True)
class CleanupEvidence:
    """What the Confirm cleanup modal shows before the operator states the work has ended."""

    run_id: str
    epoch: int
    worker: str
    record: ProcessRecord | None
    same_process_alive: bool
    log_tail: list[str]
    attempt_started_at: float | None  # the claim's commit time (wall clock, informational)
    last_output_age_s: float | None
    sentence: str
    ending: str  # what confirming does to the Goal: requeued, held, exhausted or cancelled


def default_node() -> str:
    """$REFINE_NODE, else the short host name: the CLI and the dashboard agree on it."""
    return os.environ.get("REFINE_NODE") or socket.gethostname().split(".")[0]


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
    return re.sub(r"[^A-Za-z0-9._-]", "-", name).strip("-._")[:64] or "operator"


# --- what a command acts on ------------------------------------------------------------------


@dataclass(frozen=True)
class _Target:
    """A Goal and its current Run as read (the versions an ending is recorded at)."""

    goal: Goal
    run: Run
    epoch: int | None  # the running attempt's epoch, if any
    record: ProcessRecord | None = None  # this node's record of that attempt


def _goal(goals: Goals, goal_id: str) -> Goal:
    goal = goals.read(goal_id)
    if goal is None:
        raise GoalNotFoundError(f"no goal {goal_id}", goal_id=goal_id)
    return goal


def _running(goals: Goals, goal: Goal) -> tuple[Run, Attempt]:
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


def _registry(journal: Journal, node: str) -> ProcessRegistry:
    return ProcessRegistry.for_journal(journal, node)


def _record(journal: Journal, node: str, run_id: str, epoch: int) -> ProcessRecord | None:
    return _registry(journal, node).get(run_id, epoch)


@contextmanager
def _owning_the_end(
    journal: Journal, node: str, rec: ProcessRecord, by: str, grace_s: float
) -> Iterator[None]:
    """Mark the attempt as being stopped by ``by`` while it signals and records its end, so
    the node's reconciliation does not record ``process-exited`` in between."""
    registry = _registry(journal, node)
    until = time.time() + grace_s + STOP_MARGIN_S
    registry.mark_stopping(rec.run_id, rec.epoch, by=by, until=until)
    try:
        yield
    finally:
        registry.clear_stopping(rec.run_id, rec.epoch)


def _writable(journal: Journal) -> None:
    """Refuse before any signal: a Stop we could not record must not kill anything."""
    if journal.closed:
        raise JournalClosedError("journal is closed")
    if journal.read_only:
        raise JournalReadOnlyError("journal is open read-only: no operator actions")


def _stop_target(journal: Journal, goal_id: str, node: str) -> _Target:
    """Stop applies to a running attempt of this node's Goal with a local process record."""
    check_name(goal_id, "goal_id")
    check_name(node, "node")
    goals = Goals(journal)
    goal = _goal(goals, goal_id)
    if goal.node_id != node:
        raise NotThisNodeError(
            f"goal {goal_id} runs on node {goal.node_id}: stop it from that node",
            goal_id=goal_id,
        )
    run, attempt = _running(goals, goal)
    record = _record(journal, node, run.run_id, attempt.epoch)
    if record is None:
        which = f"attempt {attempt.epoch} of run {run.run_id}"
        if _starting(journal, run.run_id, attempt):
            advice = f"{which} is starting (no process record yet); try again in a moment"
        else:
            advice = (
                f"no process record for {which} on node {node}: if its work has ended,"
                " confirm cleanup instead"
            )
        raise NoProcessRecordError(advice, goal_id=goal_id, run_id=run.run_id)
    return _Target(goal, run, attempt.epoch, record)


def _starting(journal: Journal, run_id: str, attempt: Attempt) -> bool:
    """Inside the claim → record window: its worker runs here, or the claim is that young."""
    if live_worker(attempt.worker) is not None:
        return True
    claimed = claimed_at(journal, run_id, attempt.epoch)
    return claimed is not None and time.time() - claimed < LAUNCH_WINDOW_S


def _report(
    action: str,
    target: _Target,
    *,
    process: str,
    outcome: str,
    why: str,
    stopped: StopOutcome | None = None,
    goal: Goal | None = None,
    recorded_by: str | None = None,
) -> ActionReport:
    goal = goal or target.goal
    return ActionReport(
        recorded_by=recorded_by,
        action=action,
        goal_id=goal.goal_id,
        run_id=target.run.run_id,
        epoch=target.epoch,
        node_id=goal.node_id,
        signals=stopped.signals if stopped else (),
        process=process,
        requeued=outcome in ("requeued", "released"),
        held=outcome == "held",
        outcome=outcome,
        why=f"{stopped.detail}; {why}" if stopped else why,
    )


# --- sentences -------------------------------------------------------------------------------


def _ending(goal: Goal, run: Run, epoch: int) -> str:
    """What recording the end of attempt ``epoch`` will do to the Goal."""
    total = run.budget["max_attempts"]
    if run.cancel_requested:
        return "the pending cancellation will be recorded; nothing is requeued"
    if epoch >= total:
        return f"the goal will be exhausted (all {total} attempts used)"
    if goal.redelivery == "operator":
        return (
            "the goal will be held until an operator releases it (redelivery: operator;"
            f" attempt {epoch + 1} of {total} next)"
        )
    return f"the goal will be requeued (attempt {epoch + 1} of {total})"


def describe_stop(journal: Journal, goal_id: str, *, node: str, grace_s: float = 5.0) -> str:
    """The Stop modal's sentence; raises the typed refusal when Stop does not apply."""
    _check_grace(grace_s)
    _writable(journal)
    target = _stop_target(journal, goal_id, node)
    run, epoch, rec = target.run, target.epoch, target.record
    assert rec is not None and epoch is not None
    if same_process(rec):
        how = f"SIGTERM to process group {rec.pgid}, SIGKILL after {grace_s:g} s"
    else:
        how = f"process {rec.pid} is no longer running (nothing to signal)"
    head = f"Stop attempt {epoch} of run {run.run_id} on node {node}"
    return f"{head}: {how}; {_ending(target.goal, run, epoch)}"


def describe_cancel(journal: Journal, goal_id: str, *, node: str, grace_s: float = 5.0) -> str:
    """The Cancel modal's sentence; raises the typed refusal when Cancel does not apply."""
    _check_grace(grace_s)
    _writable(journal)
    check_name(goal_id, "goal_id")
    check_name(node, "node")
    goals = Goals(journal)
    goal = _goal(goals, goal_id)
    _refuse_cancel(goals, goal)
    head = f"Cancel goal {goal_id} ({goal.status}): it becomes cancelled at once, never to restart"
    run = goals.current_run(goal)
    attempt = run.running_attempt if run is not None else None
    if attempt is None:
        return f"{head}; run {goal.run_id} is cancelled now (nothing is running)"
    which = f"attempt {attempt.epoch} of run {goal.run_id}"
    if goal.node_id != node:
        return f"{head}; {which} runs on node {goal.node_id}, whose scheduler stops it"
    rec = _record(journal, node, goal.run_id, attempt.epoch)
    if rec is None:
        return f"{head}; no process record for {which} here: confirm cleanup once it has ended"
    if not same_process(rec):
        return f"{head}; the process of {which} (pid {rec.pid}) is gone: its cleanup is recorded"
    return f"{head}; {which}: SIGTERM to process group {rec.pgid}, SIGKILL after {grace_s:g} s"


def _refuse_cancel(goals: Goals, goal: Goal) -> None:
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


# --- Stop ------------------------------------------------------------------------------------


def stop_goal(
    journal: Journal,
    goal_id: str,
    *,
    node: str,
    operator: str | None = None,
    grace_s: float = 5.0,
) -> ActionReport:
    """Stop this node's running attempt of a Goal, then interrupt it at the versions read.

    The Goal is requeued (``safe``), held (``operator``) or exhausted; with a pending
    cancellation the ending is cancel with cleanup. If the Goal or Run changed while stopping,
    nothing is requeued and the report says why.
    """
    operator = check_name(operator or default_operator(), "operator")
    _check_grace(grace_s)
    _writable(journal)
    target = _stop_target(journal, goal_id, node)
    assert target.record is not None
    with _owning_the_end(journal, node, target.record, f"{operator}@{node}", grace_s):
        stopped = stop_process(target.record, grace_s)
        if same_process(target.record):
            why = "the process still runs after SIGKILL: nothing recorded"
            return _report(
                "stop",
                target,
                process=stopped.outcome,
                outcome="not-stopped",
                why=why,
                stopped=stopped,
            )
        command_id = f"op:stop:{uuid.uuid4()}"
        return _record_ending("stop", journal, target, operator, node, command_id, stopped=stopped)


def _method(stopped: StopOutcome) -> str:
    return {"exited": "sigterm", "killed": "sigkill"}.get(stopped.outcome, PROCESS_GONE_METHOD)


def _record_ending(
    action: str,
    journal: Journal,
    target: _Target,
    operator: str,
    node: str,
    command_id: str,
    *,
    stopped: StopOutcome | None = None,
    method: str | None = None,
    process: str | None = None,
) -> ActionReport:
    """Interrupt (or cancel, when pending) the attempt at the versions read, and report.

    If the Goal or Run changed meanwhile, requeue nothing; a cancellation that arrived meanwhile
    is still ended with this cleanup (the work has ended, and a pending cancellation never
    becomes a requeue).
    """
    method = method or (_method(stopped) if stopped else PROCESS_GONE_METHOD)
    process = process or (stopped.outcome if stopped else "none")
    by = f"{operator}@{node}"
    goals = Goals(journal)
    assert target.epoch is not None

    def interrupt(t: _Target, suffix: str = "") -> GoalResult:
        return goals.interrupt(
            goal_id=t.goal.goal_id,
            run_id=t.run.run_id,
            epoch=target.epoch,
            goal_version=t.goal.version,
            run_version=t.run.version,
            confirmed_by=by,
            method=method,
            command_id=command_id + suffix,
        )

    def done(
        outcome: str, why: str, goal: Goal | None = None, recorded_by: str | None = by
    ) -> ActionReport:
        return _report(
            action,
            target,
            process=process,
            outcome=outcome,
            why=why,
            stopped=stopped,
            goal=goal,
            recorded_by=recorded_by,
        )

    try:
        return done(*_ended(interrupt(target), ended_by_words(method, by)))
    except VersionConflictError:
        pass
    fresh = _reread(goals, target)
    if fresh.epoch == target.epoch and fresh.run.cancel_requested:
        try:
            result = interrupt(fresh, ":cancelled")
        except VersionConflictError:
            fresh = _reread(goals, target)
        else:
            why = "the goal was cancelled meanwhile: the cancellation is recorded"
            return done("cancelled", f"{why} ({ended_by_words(method, by)})", result.goal)
    now = f"the goal is now {fresh.goal.status}"
    if fresh.epoch is not None:
        now += f" with attempt {fresh.epoch} running"
    ended = _ended_by(fresh.run, target.epoch) if fresh.run.run_id == target.run.run_id else None
    if ended is not None:  # say who recorded the end, and record nothing more
        who, how = ended
        if fresh.run.status == "cancelled":
            why = f"the cancellation is recorded: attempt {target.epoch}'s end by {who} ({how})"
            return done("cancelled", why, fresh.goal, who)
        why = (
            f"the goal changed meanwhile: attempt {target.epoch} was ended by {who} ({how}),"
            f" {now}; nothing was requeued or recorded by this {action}"
        )
        return done("conflict", why, fresh.goal, who)
    why = f"the goal changed meanwhile ({now}): nothing was requeued"
    return done("conflict", why, fresh.goal, None)


def _ended_by(run: Run, epoch: int) -> tuple[str, str] | None:
    """Who recorded the end of attempt ``epoch``, and how (None while it runs)."""
    attempt = next((a for a in run.attempts if a.epoch == epoch), None)
    if attempt is None or attempt.state == "running":
        return None
    if attempt.cleanup:
        return str(attempt.cleanup.get("confirmed_by")), str(attempt.cleanup.get("method"))
    return attempt.worker, f"its own report: {attempt.state}"


def _reread(goals: Goals, target: _Target) -> _Target:
    goal = _goal(goals, target.goal.goal_id)
    run = goals.current_run(goal) or target.run
    attempt = run.running_attempt if run.run_id == target.run.run_id else None
    return _Target(goal, run, attempt.epoch if attempt else None, target.record)


def _ended(result: GoalResult, how: str) -> tuple[str, str, Goal]:
    goal = result.goal
    if goal.status == "queued":
        return "requeued", f"attempt interrupted ({how}); the goal is queued again", goal
    if goal.status == "held":
        return "held", f"attempt interrupted ({how}); the goal is held until released", goal
    if goal.status == "cancelled":
        return "cancelled", f"the cancellation is recorded ({how})", goal
    return goal.status, f"attempt interrupted ({how}); the goal is {goal.status}", goal


# --- Cancel ----------------------------------------------------------------------------------


def cancel_goal(
    journal: Journal,
    goal_id: str,
    *,
    reason: str,
    node: str,
    operator: str | None = None,
    grace_s: float = 5.0,
) -> ActionReport:
    """Cancel from any node: the terminal intent first, then this node's cleanup if it runs here."""
    operator = check_name(operator or default_operator(), "operator")
    check_name(node, "node")
    _check_grace(grace_s)
    command_id = f"op:cancel:{uuid.uuid4()}"
    goals = Goals(journal)
    goal = goals.read(check_name(goal_id, "goal_id"))
    if goal is not None:
        _refuse_cancel(goals, goal)  # the transaction decides; this only words the refusal
    by = f"{operator}@{node}"
    with ExitStack() as owning:
        # Its process runs here: this canceller cleans up, and says so before the intent
        # commits, so the node (which sees the pending cancel) stands down instead of racing.
        local = _local_record(journal, goals, goal, node) if goal is not None else None
        if local is not None:
            owning.enter_context(_owning_the_end(journal, node, local, by, grace_s))
        result = goals.cancel(goal_id=goal_id, reason=reason, command_id=command_id, by=by)
        return _clean_up_cancelled(journal, result, operator, node, command_id, grace_s)


def _local_record(journal: Journal, goals: Goals, goal: Goal, node: str) -> ProcessRecord | None:
    """This node's record of the Goal's running attempt (None: not running here)."""
    run = goals.current_run(goal) if goal.node_id == node else None
    attempt = run.running_attempt if run is not None else None
    return _record(journal, node, run.run_id, attempt.epoch) if run and attempt else None


def _clean_up_cancelled(
    journal: Journal,
    result: GoalResult,
    operator: str,
    node: str,
    command_id: str,
    grace_s: float,
) -> ActionReport:
    """After the intent: stop this node's process of the attempt and record the cancel."""
    goal, run = result.goal, result.run
    assert run is not None
    attempt = run.running_attempt
    target = _Target(goal, run, attempt.epoch if attempt else None)
    if attempt is None:
        why = f"run {run.run_id} is cancelled; nothing was running"
        return _report("cancel", target, process="none", outcome="cancelled", why=why)
    if goal.node_id != node:
        why = (
            f"attempt {attempt.epoch} runs on node {goal.node_id}: its scheduler stops the"
            " process and records the cancellation"
        )
        return _report("cancel", target, process="other-node", outcome="cancel-requested", why=why)
    record = _record(journal, node, run.run_id, attempt.epoch)
    if record is None:
        why = (
            f"no process record for attempt {attempt.epoch} on node {node}: confirm cleanup"
            " once its work has ended"
        )
        return _report("cancel", target, process="no-record", outcome="cancel-requested", why=why)
    stopped = stop_process(record, grace_s)
    if same_process(record):
        why = "the process still runs after SIGKILL: the cancellation stays pending"
        return _report(
            "cancel",
            target,
            process=stopped.outcome,
            outcome="cancel-requested",
            why=why,
            stopped=stopped,
        )
    target = _Target(goal, run, attempt.epoch, record)
    return _record_ending(
        "cancel", journal, target, operator, node, command_id + ":cleanup", stopped=stopped
    )


# --- Confirm cleanup -------------------------------------------------------------------------


def _cleanup_target(journal: Journal, run_id: str, epoch: int, node: str) -> _Target:
    """The running attempt ``epoch`` of ``run_id`` (the Goal's current Run)."""
    goal_id = goal_id_of_run(run_id) if isinstance(run_id, str) else None
    if goal_id is None:
        raise InvalidInputError("run_id must be <goal_id>.r<round>")
    check_epoch(epoch)
    check_name(node, "node")
    goals = Goals(journal)
    goal = _goal(goals, goal_id)
    if goal.run_id != run_id:
        raise GoalStateError(
            f"goal {goal_id} is at run {goal.run_id}, not {run_id}", goal_id=goal_id, run_id=run_id
        )
    run, attempt = _running(goals, goal)
    if attempt.epoch != epoch:
        raise StaleAttemptError(
            f"attempt {epoch} of run {run_id} is not running (attempt {attempt.epoch} is)",
            goal_id=goal_id,
            run_id=run_id,
        )
    record = _record(journal, goal.node_id, run_id, epoch) if goal.node_id == node else None
    return _Target(goal, run, epoch, record)


def confirm_cleanup(
    journal: Journal,
    run_id: str,
    *,
    epoch: int,
    node: str,
    operator: str | None = None,
    method: str = OPERATOR_CONFIRMED,
) -> ActionReport:
    """The operator states that attempt ``epoch``'s work has ended: record interrupt (or
    cancel, when a cancellation is pending) with the operator's cleanup confirmation.

    Refused (ProcessAliveError) while this node's record proves the process alive: Stop it.
    """
    operator = check_name(operator or default_operator(), "operator")
    target = _cleanup_target(journal, run_id, epoch, node)
    record = target.record
    if record is not None and same_process(record):
        raise ProcessAliveError(
            f"process {record.pid} of attempt {epoch} is alive (same pid and start time):"
            " stop the goal instead of confirming cleanup",
            goal_id=target.goal.goal_id,
            run_id=run_id,
        )
    # A missing record is no proof: the worker may be starting, or recorded elsewhere.
    worker = live_worker(target.run.running_attempt.worker)  # type: ignore[union-attr]
    if worker is not None:
        raise ProcessAliveError(
            f"the worker of attempt {epoch} (pid {worker.pid}) is alive on this machine:"
            " stop the goal (or wait for it to start) instead of confirming cleanup",
            goal_id=target.goal.goal_id,
            run_id=run_id,
        )
    _writable(journal)
    # The recorded process is gone, but what it started may live on in its group (a crashed
    # worker's grandchildren): they end with the attempt.
    stopped = stop_process(record) if record is not None else None
    command_id = f"op:cleanup:{run_id}:{epoch}"
    return _record_ending(
        "cleanup",
        journal,
        target,
        operator,
        node,
        command_id,
        stopped=stopped if stopped is not None and stopped.signals else None,
        method=method,
        process=_observed(target, node),
    )


def _observed(target: _Target, node: str) -> str:
    """What this node can say about the attempt's process (it is not the recorded one)."""
    if target.goal.node_id != node:
        return "other-node"
    if target.record is None:
        return "no-record"
    try:
        other = psutil.Process(target.record.pid).create_time() != target.record.create_time
    except psutil.Error:
        other = False
    return "mismatch" if other else "not-running"


# --- Release ---------------------------------------------------------------------------------


def release_goal(journal: Journal, goal_id: str, *, operator: str | None = None) -> ActionReport:
    """held → queued: the operator has checked the external state the recipe touches."""
    operator = check_name(operator or default_operator(), "operator")
    result = Goals(journal).release(
        goal_id=goal_id, command_id=f"op:release:{uuid.uuid4()}", by=operator
    )
    run = result.run
    assert run is not None
    nxt = f"attempt {len(run.attempts) + 1} of {run.budget['max_attempts']} next"
    why = f"released by {operator}: the goal is queued ({nxt})"
    target = _Target(result.goal, run, None)
    return _report("release", target, process="none", outcome="released", why=why)


# --- evidence and markers for the dashboard --------------------------------------------------


def cleanup_evidence(journal: Journal, run_id: str, *, epoch: int, node: str) -> CleanupEvidence:
    """What the operator should see before confirming cleanup of attempt ``epoch``."""
    target = _cleanup_target(journal, run_id, epoch, node)
    goal, record = target.goal, target.record
    if goal.node_id != node:
        record = _record(journal, goal.node_id, run_id, epoch)  # readable, not checkable here
    alive = goal.node_id == node and record is not None and same_process(record)
    worker = target.run.running_attempt.worker  # type: ignore[union-attr]
    found = live_worker(worker) if not alive else None
    alive = alive or found is not None
    log = (
        Path(record.log_path)
        if record
        else ProcessRegistry.for_journal(journal, goal.node_id).log_path(run_id, epoch)
    )
    tail = log_tail(log, LOG_TAIL_LINES)
    now = time.time()
    claimed = claimed_at(journal, run_id, epoch)
    started = claimed if claimed is not None else (record.started_at if record else None)
    try:
        output_age: float | None = max(0.0, now - log.stat().st_mtime)
    except OSError:
        output_age = None
    sentence = _evidence_sentence(goal, node, record, alive, output_age)
    if found is not None:
        sentence = f"its worker (pid {found.pid}) is alive here: stop it instead; {sentence}"
    return CleanupEvidence(
        run_id=run_id,
        epoch=epoch,
        worker=worker,
        record=record,
        same_process_alive=alive,
        log_tail=tail,
        attempt_started_at=started,
        last_output_age_s=output_age,
        sentence=sentence,
        ending=_ending(goal, target.run, epoch),
    )


def claimed_at(journal: Journal, run_id: str, epoch: int) -> float | None:
    """When attempt ``epoch`` was claimed: its commit time (wall clock, informational)."""
    for event in journal.history("run:" + run_id, 0, 1000):  # a Run has at most 20 attempts
        if event.type == "attempt.claimed" and event.data.get("epoch") == epoch:
            return float(event.committed_at)
    return None


def _evidence_sentence(
    goal: Goal, node: str, record: ProcessRecord | None, alive: bool, output_age: float | None
) -> str:
    parts: list[str] = []
    if record is None:
        parts.append(f"no process record on node {goal.node_id}")
    else:
        started = time.strftime("%H:%M", time.localtime(record.started_at))
        parts.append(f"process record: pid {record.pid}, started {started}")
        if goal.node_id != node:
            parts.append(f"it runs on node {goal.node_id}: its process cannot be checked from here")
        elif alive:
            parts.append("that process is alive with the same start time: stop it instead")
        else:
            parts.append("no process with that pid and start time")
    if output_age is None:
        parts.append("no log output")
    else:
        parts.append(f"last output {_age(output_age)} ago")
    return "; ".join(parts)


def _age(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def needs_cleanup(journal: Journal, run: Run, *, node: str) -> bool:
    """A running attempt of this node's Goal that no live recorded process proves.

    Other nodes' attempts are theirs to reconcile (False here).
    """
    attempt = run.running_attempt
    goal_id = goal_id_of_run(run.run_id)
    if attempt is None or goal_id is None:
        return False
    goal = Goals(journal).read(goal_id)
    if goal is None or goal.node_id != node or goal.run_id != run.run_id:
        return False
    record = _record(journal, node, run.run_id, attempt.epoch)
    return record is None or not same_process(record)


def _check_grace(grace_s: float) -> None:
    if (
        isinstance(grace_s, bool)
        or not isinstance(grace_s, int | float)
        or not 0 <= grace_s <= 3600
    ):
        raise InvalidInputError("grace_s must be a number of seconds from 0 to 3600")
