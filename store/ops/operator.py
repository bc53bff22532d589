"""Operator commands (DESIGN §5): Stop, Cancel, Confirm cleanup, Release. What is shown before
them (modal sentences, cleanup evidence) and the checks they share: store.ops.evidence.

The order is always: read, check (every refusal is typed and writes and signals nothing), act
on the local process, then record in one journal transaction at the versions read. Process
records are node-local observations, never authority: they only say which process to stop, and
a pid counts as the recorded process only with the same create time.

One module over 600 lines because the four actions share one order (read, check, act on the
process, record) and the helpers that keep it; what is shown before them is
``store.ops.evidence``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from store.errors import (
    JournalNotPermittedError,
    ProcessAliveError,
    StorageError,
    VersionConflictError,
)
from store.host.observe import live_workers
from store.host.processes import (
    STOP_MARGIN_S,
    ProcessRecord,
    ProcessRegistry,
    StopOutcome,
    same_process,
    stop_process,
)
from store.journal.api import Journal
from store.model.execution import Run
from store.model.goal import PROCESS_GONE_METHOD, check_reason
from store.model.goals import (
    OPERATOR_CONFIRMED,
    Goal,
    GoalResult,
    Goals,
    check_name,
    ended_by_words,
)
from store.ops.evidence import (
    CleanupEvidence,
    Target,
    alive_words,
    another_users,
    check_cleanup_inputs,
    check_expected_version,
    check_grace,
    check_version,
    check_writable,
    cleanup_evidence,
    cleanup_target,
    default_node,
    default_operator,
    describe_cancel,
    describe_stop,
    foreign_words,
    needs_cleanup,
    record_of,
    refuse_cancel,
    registry_of,
    require_goal,
    stop_target,
    worker_alive_words,
)
from store.ops.reads import claimed_at
from store.records import dataclass, replace

# Shown before a command (the modals, the CLI) and imported from here by callers since it began.
__all__ = [
    "ActionReport",
    "CancelIntent",
    "CleanupEvidence",
    "StopIntent",
    "begin_stop",
    "cancel_goal",
    "claimed_at",
    "cleanup_evidence",
    "commit_cancel",
    "confirm_cleanup",
    "default_node",
    "default_operator",
    "describe_cancel",
    "describe_stop",
    "finish_cancel",
    "finish_stop",
    "needs_cleanup",
    "release_goal",
    "renewed",
    "stop_goal",
]

# How long the end of an attempt whose process was signalled is tried again while the journal
# is out of reach (a server restart): within STOP_MARGIN_S, so the node still leaves it to us.
RECORD_PATIENCE_S = 10.0
# A cancel's marker older than this when its process is stopped (a batch committed other intents
# meanwhile) is renewed, so its deadline still covers the whole grace.
MARKER_RENEW_AFTER_S = 1.0


def _command_id(action: str) -> str:
    """A fresh command id: an operator's action is never a replay of an earlier one."""
    return f"op:{action}:{uuid4_text()}"


def uuid4_text() -> str:
    """``str(uuid.uuid4())``, made as uuid4 makes it (16 random bytes, version and variant bits
    set) without importing uuid, which loads ``platform`` (≈ 1.5 ms of a quick `refine cancel`)."""
    raw = bytearray(os.urandom(16))
    raw[6] = raw[6] & 0x0F | 0x40  # version 4
    raw[8] = raw[8] & 0x3F | 0x80  # RFC 4122 variant
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


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
        data = dict(vars(self))  # its fields, in order: what asdict gives for flat values
        data["signals"] = list(self.signals)
        return data

    def text(self) -> str:
        """What the command did, in one line: the CLI prints it, the dashboard notifies it.

        ``why`` says each fact once (the signals sent, the attempt's end, the goal's fate);
        ``outcome`` and ``signals`` are the same facts as fields, for scripts."""
        return f"{self.action} {self.goal_id or self.run_id}: {self.why or self.outcome}"


def _mark_stopping(
    journal: Journal, node: str, rec: ProcessRecord, by: str, grace_s: float
) -> Path:
    until = time.time() + grace_s + STOP_MARGIN_S
    return registry_of(journal, node).mark_stopping(rec.run_id, rec.epoch, by=by, until=until)


def _report(
    action: str,
    target: Target,
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


# --- Stop ------------------------------------------------------------------------------------


def stop_goal(
    journal: Journal,
    goal_id: str,
    *,
    node: str,
    operator: str | None = None,
    grace_s: float = 5.0,
    expected_version: int | None = None,
) -> ActionReport:
    """Stop this node's running attempt of a Goal, then interrupt it at the versions read.

    The Goal is requeued (``safe``), held (``operator``) or exhausted; with a pending
    cancellation the ending is cancel with cleanup. If the Goal or Run changed while stopping,
    nothing is requeued and the report says why. ``expected_version``: the Goal's version as
    the caller read it; VersionConflictError, with nothing signalled, when it changed since.
    """
    intent = begin_stop(
        journal,
        goal_id,
        node=node,
        operator=operator,
        grace_s=grace_s,
        expected_version=expected_version,
    )
    try:
        stopped = stop_process(intent.record, grace_s)
    except BaseException:
        ProcessRegistry.clear_stopping(intent.marker)
        raise
    return finish_stop(journal, intent, stopped)


@dataclass(frozen=True)
class StopIntent:
    """A Stop checked and marked (``marker``: its end is ours), its process yet to stop."""

    target: Target
    record: ProcessRecord
    marker: Path
    operator: str
    node: str


def begin_stop(
    journal: Journal,
    goal_id: str,
    *,
    node: str,
    operator: str | None = None,
    grace_s: float = 5.0,
    expected_version: int | None = None,
) -> StopIntent:
    """``stop_goal``'s checks and its stop marker, nothing signalled: a batch stops the
    processes of all its Goals side by side (``stop_processes``), then ``finish_stop``s each."""
    operator = check_name(operator or default_operator(), "operator")
    check_name(goal_id, "goal_id")
    check_name(node, "node")
    check_grace(grace_s)
    check_expected_version(expected_version)
    check_writable(journal)
    target = stop_target(journal, goal_id, node, expected_version)
    assert target.record is not None
    marker = _mark_stopping(journal, node, target.record, f"{operator}@{node}", grace_s)
    return StopIntent(target, target.record, marker, operator, node)


def finish_stop(journal: Journal, intent: StopIntent, stopped: StopOutcome) -> ActionReport:
    """Interrupt the stopped attempt at the versions read (``stop_goal``); clears the marker."""
    try:
        if same_process(intent.record):
            why = "the process still runs after SIGKILL: nothing recorded"
            return _report(
                "stop",
                intent.target,
                process=stopped.outcome,
                outcome="not-stopped",
                why=why,
                stopped=stopped,
            )
        return _record_ending(
            "stop",
            journal,
            intent.target,
            intent.operator,
            intent.node,
            _command_id("stop"),
            stopped=stopped,
        )
    finally:
        ProcessRegistry.clear_stopping(intent.marker)


def _method(stopped: StopOutcome) -> str:
    return {"exited": "sigterm", "killed": "sigkill"}.get(stopped.outcome, PROCESS_GONE_METHOD)


def _record_ending(
    action: str,
    journal: Journal,
    target: Target,
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
    epoch = target.epoch
    assert epoch is not None

    def interrupt(t: Target, suffix: str = "") -> GoalResult:
        return goals.interrupt(
            goal_id=t.goal.goal_id,
            run_id=t.run.run_id,
            epoch=epoch,
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
        result = _recorded_after(stopped, node, lambda: interrupt(target))
        return done(*_ended(result, epoch, ended_by_words(method, by)))
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
    ended = _ended_by(fresh.run, epoch) if fresh.run.run_id == target.run.run_id else None
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


def _recorded_after(
    stopped: StopOutcome | None, node: str, record: Callable[[], GoalResult]
) -> GoalResult:
    """``record()``, the end of an attempt whose process ``stopped`` says was signalled. A
    signal cannot be taken back: a journal out of reach for a moment is waited out with the same
    command (a replay, should a lost try have committed); after ``RECORD_PATIENCE_S`` the error
    says what was done (a bare STORAGE read as "nothing happened": the process was dead)."""
    if stopped is None or not stopped.signals:
        return record()
    deadline = time.monotonic() + RECORD_PATIENCE_S
    delay = 0.25
    while True:
        try:
            return record()
        except JournalNotPermittedError:  # waiting does not give the role its rights
            raise
        except StorageError as exc:
            if time.monotonic() >= deadline:
                raise type(exc)(
                    f"the process was stopped ({stopped.detail}) but its end is not recorded:"
                    f" {exc.message}; node {node} records it once the journal answers",
                    goal_id=exc.goal_id,
                    run_id=exc.run_id,
                ) from exc
        time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
        delay = min(delay * 2, 2.0)


def _ended_by(run: Run, epoch: int) -> tuple[str, str] | None:
    """Who recorded the end of attempt ``epoch``, and how (None while it runs)."""
    attempt = next((a for a in run.attempts if a.epoch == epoch), None)
    if attempt is None or attempt.state == "running":
        return None
    if attempt.cleanup:
        return str(attempt.cleanup.get("confirmed_by")), str(attempt.cleanup.get("method"))
    return attempt.worker, f"its own report: {attempt.state}"


def _reread(goals: Goals, target: Target) -> Target:
    goal = require_goal(goals, target.goal.goal_id)
    run = goals.current_run(goal) or target.run
    attempt = run.running_attempt if run.run_id == target.run.run_id else None
    return Target(goal, run, attempt.epoch if attempt else None, target.record)


def _ended(result: GoalResult, epoch: int, how: str) -> tuple[str, str, Goal]:
    goal, run = result.goal, result.run
    if goal.status == "cancelled":
        return "cancelled", f"the cancellation is recorded ({how})", goal
    ended = f"attempt {epoch} interrupted ({how})"
    if goal.status == "queued":
        nxt = f" ({_next_attempt(run)})" if run is not None else ""
        return "requeued", f"{ended}; the goal is requeued{nxt}", goal
    if goal.status == "held":
        return "held", f"{ended}; the goal is held until released", goal
    return goal.status, f"{ended}; the goal is {goal.status}", goal


def _next_attempt(run: Run) -> str:
    return f"attempt {len(run.attempts) + 1} of {run.budget['max_attempts']} next"


# --- Cancel ----------------------------------------------------------------------------------


def cancel_goal(
    journal: Journal,
    goal_id: str,
    *,
    reason: str,
    node: str,
    operator: str | None = None,
    grace_s: float = 5.0,
    expected_version: int | None = None,
) -> ActionReport:
    """Cancel from any node: the terminal intent first, then this node's cleanup if it runs here.

    ``expected_version``: the Goal's version as the caller read it; VersionConflictError, with
    nothing written or signalled, when it changed since."""
    # The seed's refusal order: the input, then the journal, then the Goal's state.
    operator = check_name(operator or default_operator(), "operator")
    check_name(node, "node")
    check_name(goal_id, "goal_id")
    check_reason(reason)
    check_grace(grace_s)
    check_expected_version(expected_version)
    check_writable(journal)
    goals = Goals(journal)
    goal = goals.read(goal_id)
    if goal is not None:
        check_version(goal, expected_version)
        refuse_cancel(goals, goal)  # the transaction decides; this only words the refusal
    local = _local_record(journal, goals, goal, node) if goal is not None else None
    intent = commit_cancel(
        goals,
        goal_id,
        reason=reason,
        operator=operator,
        node=node,
        grace_s=grace_s,
        local=local,
        expected_version=expected_version,
    )
    return finish_cancel(journal, intent, operator=operator, node=node, grace_s=grace_s)


@dataclass(frozen=True)
class CancelIntent:
    """A committed cancellation whose cleanup ``finish_cancel`` still has to do."""

    result: GoalResult
    command_id: str
    record: ProcessRecord | None  # this node's record of the running attempt: stopped here
    marker: Path | None  # this canceller owns that attempt's end until finish_cancel
    marked_at: float  # time.monotonic() when the marker was made


def commit_cancel(
    goals: Goals,
    goal_id: str,
    *,
    reason: str,
    operator: str,
    node: str,
    grace_s: float,
    local: ProcessRecord | None,
    expected_version: int | None = None,
    run_id: str | None = None,
) -> CancelIntent:
    """The first half of ``cancel_goal``: the terminal intent, in its own command. The inputs
    are checked by the caller. ``local``: this node's record of the Goal's running attempt;
    ``expected_version`` and ``run_id``: the Goal as the caller read it (``Goals.cancel``)."""
    by = f"{operator}@{node}"
    # Its process runs here: this canceller cleans up, and says so before the intent commits,
    # so the node (which sees the pending cancel) stands down instead of racing.
    journal = goals.journal
    marker = _mark_stopping(journal, node, local, by, grace_s) if local is not None else None
    command_id = _command_id("cancel")
    try:
        result = goals.cancel(
            goal_id=goal_id,
            reason=reason,
            command_id=command_id,
            by=by,
            expected_version=expected_version,
            run_id=run_id,
        )
    except BaseException:
        if marker is not None:
            ProcessRegistry.clear_stopping(marker)
        raise
    return CancelIntent(result, command_id, local, marker, time.monotonic())


def finish_cancel(
    journal: Journal,
    intent: CancelIntent,
    *,
    operator: str,
    node: str,
    grace_s: float,
    stopped: StopOutcome | None = None,
) -> ActionReport:
    """The second half of ``cancel_goal``: stop this node's process of the cancelled attempt
    (if it runs here) and record the cancel with its cleanup; the report of the whole cancel.
    ``stopped``: how ``intent.record``'s process was stopped already (a batch stops its
    processes side by side first)."""
    try:
        intent = renewed(journal, intent, operator=operator, node=node, grace_s=grace_s)
        already = (intent.record, stopped) if intent.record and stopped else None
        return _clean_up_cancelled(
            journal, intent.result, operator, node, intent.command_id, grace_s, already
        )
    finally:
        if intent.marker is not None:
            ProcessRegistry.clear_stopping(intent.marker)


def renewed(
    journal: Journal, intent: CancelIntent, *, operator: str, node: str, grace_s: float
) -> CancelIntent:
    """``intent`` with a fresh stop marker when its own was made long ago (a batch committed
    other intents since), so its deadline still covers the whole grace."""
    if intent.marker is None or intent.record is None or not _stale(intent):
        return intent
    fresh = _mark_stopping(journal, node, intent.record, f"{operator}@{node}", grace_s)
    ProcessRegistry.clear_stopping(intent.marker)
    return replace(intent, marker=fresh, marked_at=time.monotonic())


def _stale(intent: CancelIntent) -> bool:
    return time.monotonic() - intent.marked_at > MARKER_RENEW_AFTER_S


def _local_record(journal: Journal, goals: Goals, goal: Goal, node: str) -> ProcessRecord | None:
    """This node's record of the Goal's running attempt, to stop here (None: not running here,
    or its process is another user's, whom this user may not signal: its node stops it)."""
    run = goals.current_run(goal) if goal.node_id == node else None
    attempt = run.running_attempt if run is not None else None
    record = record_of(journal, node, run.run_id, attempt.epoch) if run and attempt else None
    return None if record is not None and another_users(record) else record


def _clean_up_cancelled(
    journal: Journal,
    result: GoalResult,
    operator: str,
    node: str,
    command_id: str,
    grace_s: float,
    already: tuple[ProcessRecord, StopOutcome] | None = None,
) -> ActionReport:
    """After the intent: stop this node's process of the attempt and record the cancel.
    ``already``: a record whose process the caller stopped, and how."""
    goal, run = result.goal, result.run
    assert run is not None
    attempt = run.running_attempt
    target = Target(goal, run, attempt.epoch if attempt else None)
    if attempt is None:
        why = f"run {run.run_id} is cancelled; nothing was running"
        return _report("cancel", target, process="none", outcome="cancelled", why=why)
    if goal.node_id != node:
        why = (
            f"the goal is cancelled; attempt {attempt.epoch} runs on node {goal.node_id}: its"
            " scheduler stops the process and records the cancellation"
        )
        return _report("cancel", target, process="other-node", outcome="cancel-requested", why=why)
    registry = registry_of(journal, node)
    record = registry.get(run.run_id, attempt.epoch)
    if foreign := foreign_words(registry, run.run_id, attempt.epoch, record):
        why = f"the goal is cancelled; {foreign}: its node stops the process"
        process = "no-record" if record is None else "other-user"
        return _report("cancel", target, process=process, outcome="cancel-requested", why=why)
    if record is None:
        why = (
            f"the goal is cancelled; no process record for attempt {attempt.epoch} on node"
            f" {node}: confirm cleanup once its work has ended"
        )
        return _report("cancel", target, process="no-record", outcome="cancel-requested", why=why)
    ours = already is not None and (already[0].pid, already[0].create_time) == (
        record.pid,
        record.create_time,
    )
    stopped = already[1] if already and ours else stop_process(record, grace_s)
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
    target = Target(goal, run, attempt.epoch, record)
    return _record_ending(
        "cancel", journal, target, operator, node, command_id + ":cleanup", stopped=stopped
    )


def confirm_cleanup(
    journal: Journal,
    run_id: str,
    *,
    epoch: int,
    node: str,
    operator: str | None = None,
    method: str = OPERATOR_CONFIRMED,
    workers: Mapping[str, int] | None = None,
) -> ActionReport:
    """The operator states that attempt ``epoch``'s work has ended: record interrupt (or
    cancel, when a cancellation is pending) with the operator's cleanup confirmation.

    Refused (ProcessAliveError) while this node's record proves the process alive, or the
    attempt's worker runs on this machine: Stop it. ``workers``: this machine's live workers
    (``store.host.observe.live_workers``), looked up once by a caller confirming many
    attempts (a node's cleanup); None: looked for now.
    """
    # The seed's refusal order: the input, then the journal, then the attempt's state.
    operator = check_name(operator or default_operator(), "operator")
    check_cleanup_inputs(run_id, epoch, node)
    check_reason(method, "method")
    check_writable(journal)
    target = cleanup_target(journal, run_id, epoch, node)
    record = target.record
    if (alive := alive_words(record, epoch)) is not None:
        raise ProcessAliveError(alive, goal_id=target.goal.goal_id, run_id=run_id)
    # A missing record is no proof: the worker may be starting, or recorded elsewhere.
    worker = target.run.running_attempt.worker  # type: ignore[union-attr]
    pid = (live_workers() if workers is None else workers).get(worker)
    if pid is not None:
        raise ProcessAliveError(
            worker_alive_words(pid, epoch), goal_id=target.goal.goal_id, run_id=run_id
        )
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


def _observed(target: Target, node: str) -> str:
    """What this node can say about the attempt's process (it is not the recorded one)."""
    if target.goal.node_id != node:
        return "other-node"
    if target.record is None:
        return "no-record"
    import psutil  # here, not at the top: most commands never look at a process

    try:
        other = psutil.Process(target.record.pid).create_time() != target.record.create_time
    except psutil.Error:
        other = False
    return "mismatch" if other else "not-running"


# --- Release ---------------------------------------------------------------------------------


def release_goal(
    journal: Journal,
    goal_id: str,
    *,
    operator: str | None = None,
    expected_version: int | None = None,
    run_id: str | None = None,
) -> ActionReport:
    """held → queued: the operator has checked the external state the recipe touches.

    ``expected_version`` and ``run_id``: the Goal as the caller read it (``Goals.release``)."""
    operator = check_name(operator or default_operator(), "operator")
    result = Goals(journal).release(
        goal_id=goal_id,
        command_id=_command_id("release"),
        by=operator,
        expected_version=expected_version,
        run_id=run_id,
    )
    run = result.run
    assert run is not None
    why = f"released by {operator}: the goal is queued ({_next_attempt(run)})"
    target = Target(result.goal, run, None)
    return _report("release", target, process="none", outcome="released", why=why)
