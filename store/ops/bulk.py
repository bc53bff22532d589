"""Cancel, Stop, Release or Reassign many Goals at once (DESIGN §15): the plan's frozen set,
then one single-goal command per Goal, each with its own command id.

``plan_bulk`` (store.ops.bulk_plan) reads every Goal of the batch once; ``run_bulk`` then takes
the Goals in turn and does to each what ``cancel_goal`` / ``stop_goal`` / ``release_goal`` /
``Goals.reassign`` do, at the version the plan read: a Goal that changed since is ``skipped``
(reported with what it is now), never acted on blindly. Nothing is merged: each Goal's command
commits alone, so a batch interrupted anywhere leaves whole commands behind, and the same batch
run again (planned again) does only what is left — the Goals already done read ``already
terminal`` (cancel), ``not running`` (stop), ``not held`` (release) or ``already there``
(reassign) and are left alone.

Cancel commits every Goal's intent first and stops this node's processes after (the intents
of a thousand Goals are in within a second or two; stopping takes a grace period each). The
intents are committed inside ``Journal.durable_at_end``: each its own transaction, made durable
together before the first process is signalled.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from store.errors import (
    InvalidInputError,
    JournalClosedError,
    JournalReadOnlyError,
    RefineError,
    StorageError,
    VersionConflictError,
)
from store.host.processes import ProcessRegistry
from store.host.stopping import StopOutcome, stop_processes
from store.journal.api import Journal
from store.model.goal import check_reason
from store.model.goals import Goals, check_name
from store.ops.bulk_plan import (
    BULK_ACTIONS,
    DONE,
    NOTHING_TO_DO,
    REFUSED,
    SKIPPED,
    BulkPlan,
    PlannedGoal,
    Selection,
    plan_bulk,
)
from store.ops.evidence import check_grace, check_writable, default_operator
from store.ops.operator import (
    ActionReport,
    CancelIntent,
    StopIntent,
    begin_stop,
    commit_cancel,
    finish_cancel,
    finish_stop,
    release_goal,
    renewed,
)
from store.records import dataclass

__all__ = [
    "BULK_ACTIONS",
    "BulkPlan",
    "BulkReport",
    "GoalReport",
    "PlannedGoal",
    "Selection",
    "plan_bulk",
    "run_bulk",
]

# Errors that end the whole batch (the journal cannot be written): the Goals done so far stay
# done, and running the batch again does the rest. Any other refusal concerns one Goal.
FATAL = (StorageError, JournalClosedError, JournalReadOnlyError)


@dataclass(frozen=True)
class GoalReport:
    """What the batch did to one Goal (or, in a dry run, what it would do)."""

    planned: PlannedGoal
    action: str
    outcome: str  # DONE[action], one of NOTHING_TO_DO, "skipped", "refused", or the single
    # command's own word when it did not end as planned ("conflict", "not-stopped")
    why: str
    code: str | None = None  # the error code of a refusal or skip
    report: ActionReport | None = None  # the single-goal command's report, when one ran
    dry_run: bool = False

    @property
    def goal_id(self) -> str:
        return self.planned.goal_id

    @property
    def ok(self) -> bool:
        """Done, or nothing was left to do: the action's end holds for this Goal."""
        return self.outcome == DONE[self.action] or self.outcome in NOTHING_TO_DO

    def text(self) -> str:
        return f"{self.action} {self.goal_id}: {self.outcome}: {self.why}"

    def to_json(self) -> dict[str, Any]:
        return {
            "goal_id": self.goal_id,
            "action": self.action,
            "outcome": self.outcome,
            "ok": self.ok,
            "why": self.why,
            "code": self.code,
            "dry_run": self.dry_run,
            "planned": self.planned.to_json(),
            "report": self.report.to_json() if self.report is not None else None,
        }


def dry_run(plan: BulkPlan) -> list[GoalReport]:
    """The plan as reports: what each Goal's turn would do (nothing is written)."""
    return [
        GoalReport(p, plan.action, p.expect, p.why, p.code, None, dry_run=True) for p in plan.goals
    ]


@dataclass(frozen=True)
class BulkReport:
    """Every Goal's report, in the plan's order."""

    plan: BulkPlan
    goals: tuple[GoalReport, ...]

    @property
    def ok(self) -> bool:
        return all(g.ok for g in self.goals)

    @property
    def failed(self) -> tuple[GoalReport, ...]:
        """The Goals that were refused, skipped or did not end as planned."""
        return tuple(g for g in self.goals if not g.ok)

    def summary(self) -> str:
        """One line for a notification: "cancel: 3 of 4 goals done (2 cancelled, 1 already
        terminal); 1 skipped"."""
        done = Counter(g.outcome for g in self.goals if g.ok)
        left = Counter(g.outcome for g in self.goals if not g.ok)
        head = f"{self.plan.action}: {sum(done.values())} of {len(self.goals)} goals done"
        if done:
            head += (
                " (" + ", ".join(f"{n} {what}" for what, n in done.items()) + self._where() + ")"
            )
        if left:
            head += "; " + ", ".join(f"{n} {what}" for what, n in left.items())
        return head

    def _where(self) -> str:
        """Where a reassign moved its Goals, when it spread them: ": 3 to b, 1 to a"."""
        moved = Counter(g.planned.to for g in self.goals if g.outcome == DONE["reassign"])
        if len(moved) < 2:
            return ""
        return ": " + ", ".join(f"{n} to {node}" for node, n in moved.most_common())


Turn = Callable[[PlannedGoal], None]
Reported = Callable[[GoalReport], None]


def run_bulk(
    journal: Journal,
    plan: BulkPlan,
    *,
    reason: str | None = None,
    operator: str | None = None,
    grace_s: float = 5.0,
    before_turn: Turn | None = None,
    on_report: Reported | None = None,
) -> BulkReport:
    """Carry out ``plan``: each Goal's own command, at the version the plan read.

    ``reason``: cancel's, one for all (required for cancel, refused for the others).
    ``before_turn(planned)`` is called right before a Goal's turn (tests change a Goal there;
    a caller can show progress); ``on_report(report)`` once a Goal's report is final. A
    StorageError (the journal went away) ends the batch: what was done stays done.
    """
    operator = check_name(operator or default_operator(), "operator")
    if plan.action == "cancel":
        check_reason(reason)
    elif reason is not None:
        raise InvalidInputError(f"{plan.action} takes no reason")
    check_grace(grace_s)
    check_writable(journal)
    batch = _Batch(journal, plan, reason or "", operator, grace_s, on_report)
    try:
        # Each command commits alone; all are durable at the block's end, before cancel signals.
        with journal.durable_at_end():
            for planned in plan.goals:
                if before_turn is not None:
                    before_turn(planned)
                batch.turn(planned)
        batch.stop_processes()
    finally:
        batch.let_go()
    return BulkReport(plan, tuple(batch.reports[p.goal_id] for p in plan.goals))


class _Batch:
    """One batch's progress: the reports so far, the cancels whose processes are yet to stop."""

    def __init__(
        self,
        journal: Journal,
        plan: BulkPlan,
        reason: str,
        operator: str,
        grace_s: float,
        on_report: Reported | None,
    ) -> None:
        self.journal, self.plan, self.reason = journal, plan, reason
        self.operator, self.grace_s = operator, grace_s
        self.on_report = on_report
        self.goals = Goals(journal)  # one for the batch: every command through the same handle
        self.reports: dict[str, GoalReport] = {}
        self.later: list[tuple[PlannedGoal, CancelIntent | None]] = []
        self.stops: list[tuple[PlannedGoal, StopIntent]] = []  # checked and marked, to stop
        self.left_over: dict[str, StopIntent] = {}  # earlier cancels' cleanups, begun as Stops

    def report(self, planned: PlannedGoal, outcome: str, why: str, **more: Any) -> None:
        done = GoalReport(planned, self.plan.action, outcome, why, **more)
        self.reports[planned.goal_id] = done
        if self.on_report is not None:
            self.on_report(done)

    # --- each Goal's turn -----------------------------------------------------------------------

    def turn(self, p: PlannedGoal) -> None:
        action = self.plan.action
        if p.expect != DONE[action]:
            if p.stop_after:  # an earlier cancel's cleanup, left undone: done after the intents
                self.later.append((p, None))
            else:  # refused, or nothing to do: as planned, with nothing written
                self.report(p, p.expect, p.why, code=p.code)
            return
        try:
            if action == "cancel":
                intent = self.cancel_intent(p)
                if intent.record is None:  # nothing to stop here: its report is complete now
                    self.finish(p, intent, None)
                else:
                    self.later.append((p, intent))
            elif action == "stop":
                self.stops.append((p, self.begin_stop(p)))
            elif action == "reassign":
                self.reassigned(p)
            else:
                self.released(p)
        except VersionConflictError:
            self.skipped(p)
        except FATAL:
            raise
        except RefineError as exc:
            self.report(p, REFUSED, exc.message, code=exc.code)

    def cancel_intent(self, p: PlannedGoal) -> CancelIntent:
        return commit_cancel(
            self.goals,
            p.goal_id,
            reason=self.reason,
            operator=self.operator,
            node=self.plan.node,
            grace_s=self.grace_s,
            local=p.record if p.stop_after else None,
            expected_version=p.version,
            run_id=p.run_id,
        )

    def begin_stop(self, p: PlannedGoal) -> StopIntent:
        return begin_stop(
            self.journal,
            p.goal_id,
            node=self.plan.node,
            operator=self.operator,
            grace_s=self.grace_s,
            expected_version=p.version,
        )

    def stopped(self, p: PlannedGoal, done: ActionReport) -> None:
        # The interruption is recorded (requeued, held, exhausted or the pending cancellation);
        # otherwise the single command's own word (the Goal changed while it was being stopped,
        # or the process outlived SIGKILL).
        ended = done.outcome in ("requeued", "held", "exhausted", "cancelled")
        self.report(p, "stopped" if ended else done.outcome, done.why, report=done)

    def released(self, p: PlannedGoal) -> None:
        done = release_goal(
            self.journal,
            p.goal_id,
            operator=self.operator,
            expected_version=p.version,
            run_id=p.run_id,
        )
        self.report(p, "released", done.why, report=done)

    def reassigned(self, p: PlannedGoal) -> None:
        done = self.goals.reassign(
            goal_id=p.goal_id, node_id=p.to, expected_version=p.version, by=self.operator
        )
        goal = done.goal
        why = f"moved from node {p.node_id} to node {p.to}: round {goal.round}, {goal.status}"
        self.report(p, "reassigned", why)

    def skipped(self, p: PlannedGoal) -> None:
        """The Goal is no longer as planned: say what it is now; nothing was done to it."""
        try:
            now = self.goals.read(p.goal_id)
        except RefineError as exc:
            now_words = f"it cannot be read now ({exc.code})"
        else:
            now_words = f"now {now.status}, version {now.version}" if now else "now gone"
        why = (
            f"it changed since the plan ({p.status}, version {p.version} then; {now_words}):"
            " nothing was done"
        )
        self.report(p, SKIPPED, why, code=VersionConflictError.code)

    # --- after the intents ---------------------------------------------------------------------

    def stop_processes(self) -> None:
        """Stop's and Cancel's second half: stop this node's processes side by side (one grace
        for the batch: one after another, each recipe that used its grace added a grace), then
        record the ends Goal by Goal."""
        self.begin_left_overs()
        stopped = self.stop_side_by_side()
        while self.stops:
            p, stop = self.stops.pop(0)
            self.finish_stop(p, stop, stopped[p.goal_id])  # clears its marker
        while self.later:
            p, cancel = self.later.pop(0)
            if cancel is not None:
                self.finish(p, cancel, stopped.get(p.goal_id))  # clears its marker, come what may
            elif (left := self.left_over.pop(p.goal_id, None)) is not None:
                self.finish_left_over(p, left, stopped[p.goal_id])

    def begin_left_overs(self) -> None:
        """Earlier cancels' pending cleanups (their processes still run here): each a Stop,
        which records the cancellation with it, begun now to be stopped with the others."""
        for p, cancel in self.later:
            if cancel is not None:
                continue
            try:
                self.left_over[p.goal_id] = self.begin_stop(p)
            except VersionConflictError:
                self.skipped(p)
            except FATAL:
                raise
            except RefineError as exc:
                self.report(p, "already terminal", f"{p.why.split(';')[0]}; {exc.message}")

    def stop_side_by_side(self) -> dict[str, StopOutcome]:
        """The processes that run here of the Goals stopped and of the attempts cancelled,
        stopped together: goal → how."""
        to_stop = [(p.goal_id, intent.record) for p, intent in self.stops]
        to_stop += [(goal_id, intent.record) for goal_id, intent in self.left_over.items()]
        for n, (p, cancel) in enumerate(self.later):
            if cancel is not None and cancel.marker is not None and cancel.record is not None:
                fresh = renewed(
                    self.journal, cancel, operator=self.operator, node=self.plan.node,
                    grace_s=self.grace_s,
                )  # fmt: skip
                self.later[n] = (p, fresh)
                to_stop.append((p.goal_id, cancel.record))
        outcomes = stop_processes([rec for _, rec in to_stop], self.grace_s)
        return {goal_id: outcome for (goal_id, _), outcome in zip(to_stop, outcomes, strict=True)}

    def finish_stop(self, p: PlannedGoal, intent: StopIntent, stopped: StopOutcome) -> None:
        try:
            self.stopped(p, finish_stop(self.journal, intent, stopped))
        except FATAL:
            raise
        except RefineError as exc:
            self.report(p, REFUSED, exc.message, code=exc.code)

    def finish(self, p: PlannedGoal, intent: CancelIntent, stopped: StopOutcome | None) -> None:
        try:
            done = finish_cancel(
                self.journal,
                intent,
                operator=self.operator,
                node=self.plan.node,
                grace_s=self.grace_s,
                stopped=stopped,
            )
        except FATAL:
            raise
        except RefineError as exc:  # the intent stands; the node or the worker ends it
            why = f"the goal is cancelled; its cleanup was not recorded here: {exc.message}"
            self.report(p, "cancelled", why, code=exc.code)
            return
        self.report(p, "cancelled", done.why, report=done)

    def finish_left_over(self, p: PlannedGoal, intent: StopIntent, stopped: StopOutcome) -> None:
        """An earlier cancel's pending cleanup, its process stopped: the Stop's record."""
        try:
            done = finish_stop(self.journal, intent, stopped)
        except FATAL:
            raise
        except RefineError as exc:
            self.report(p, "already terminal", f"{p.why.split(';')[0]}; {exc.message}")
        else:
            self.report(p, "already terminal", f"already {p.status}; {done.why}", report=done)

    def let_go(self) -> None:
        """An interrupted batch leaves no stop marker behind: the node takes over the cleanup."""
        for _, intent in self.later:
            if intent is not None and intent.marker is not None:
                ProcessRegistry.clear_stopping(intent.marker)
        for _, stop in self.stops:
            ProcessRegistry.clear_stopping(stop.marker)
        for stop in self.left_over.values():
            ProcessRegistry.clear_stopping(stop.marker)
