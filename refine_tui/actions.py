"""Operator actions: the Stop / Cancel / Confirm cleanup / Release flows.

``OperatorFlows`` is a small controller: each flow takes typed inputs (a goal id, a run id and
epoch), calls ``store.ops.operator`` in threads, asks the operator through modals and reports
back as notifications, through a ``Dashboard``. Which keys apply, and why not, is
``refine_tui.keys``.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Protocol, TypeVar

from rich.text import Text
from textual.notifications import SeverityLevel
from textual.screen import Screen

from refine_tui import format as fmt
from refine_tui.keys import SYSTEM_COMMANDS, Selection
from refine_tui.rows import GoalRow, Reader
from refine_tui.screens.confirm import MOVE, CancelModal, ConfirmModal
from refine_tui.screens.pick_node import SPREAD, NodePickModal
from refine_tui.visible import as_printed, listed
from store.errors import RefineError, StorageError
from store.journal.api import Journal, JournalHandle
from store.model.goal import goal_id_of_run
from store.model.goals import REASSIGNABLE, Goals
from store.ops.bulk import BulkPlan, plan_bulk, run_bulk
from store.ops.bulk import Selection as Chosen
from store.ops.evidence import count
from store.ops.node_cleanup import (
    NodeCleanup,
    NodeCleanupPlan,
    cleanup_node,
    plan_moving_waiting,
    plan_node_cleanup,
)
from store.ops.nodes import NodeView, list_nodes
from store.ops.operator import (
    ActionReport,
    CleanupEvidence,
    cancel_goal,
    cleanup_evidence,
    confirm_cleanup,
    describe_cancel,
    describe_stop,
    release_goal,
    stop_goal,
)

__all__ = ["SYSTEM_COMMANDS", "OperatorFlows"]  # SYSTEM_COMMANDS: refine_tui.keys' own

T = TypeVar("T")
BUSY_AFTER_S = 0.4  # a store call quicker than this says nothing until its answer


# --- the flows ---------------------------------------------------------------------------------


class Dashboard(Protocol):
    """What the flows need from the screen they run on."""

    def notify(
        self,
        message: str | Sequence[str],
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: float | None = None,
        markup: bool = False,
    ) -> None: ...

    async def push_screen_wait(self, screen: Screen[Any]) -> Any: ...

    def wake(self, full: bool = False) -> None: ...


class OperatorFlows:
    """Stop, Cancel, Confirm cleanup and Release, each: sentence, modal, command, notification.

    Run each flow as a worker of the Dashboard (a modal waits inside a worker).
    """

    def __init__(
        self,
        ui: Dashboard,
        *,
        node: str,
        operator: str,
        grace_s: float,
        clock: Callable[[], float],
        writer: JournalHandle,
        reading: Callable[[], Journal | None],
        reader: Callable[[], Reader | None],
    ) -> None:
        self.ui = ui
        self.node = node
        self.operator = operator
        self.grace_s = grace_s
        self.clock = clock
        self._writer = writer
        self._reading = reading  # the read connection, if open
        self._reader = reader  # the live reader's Reader, if one was made

    def flow(self, action: str, sel: Selection) -> Coroutine[Any, Any, object] | None:
        """The flow an operator action starts on the selection (None: nothing to act on)."""
        goal, attempt = sel.goal, sel.attempt
        if action == "cleanup" and sel.view == "nodes":
            return self.cleanup_node(sel.presence.node_id) if sel.presence else None
        if action == "reassign" and sel.view == "nodes":
            return self.reassign_node(sel.presence.node_id) if sel.presence else None
        if action == "cleanup":
            return self.cleanup(*attempt) if attempt is not None else None
        if goal is None:
            return None
        if action == "stop":
            return self.stop(goal.goal_id)
        if action == "cancel_goal":
            return self.cancel(goal.goal_id)
        if action == "reassign":
            return self.reassign_goals([goal.goal_id], goal.node_id)
        return self.release(goal) if action == "release" else None

    def writer(self) -> Journal:
        """(thread) The one writable connection, reopened if the journal was replaced."""
        return self._writer.get()

    def attempt_now(self, goal_id: str) -> tuple[str, str | None, int | None]:
        """(thread) The goal's status, run and running epoch as the journal has them now."""
        reader = self._reader()
        if reader is None:
            journal = self._reading()
            if journal is None:
                raise StorageError("the journal is unavailable")
            reader = Reader(journal, self.node)
        row = reader.goal_rows([goal_id]).get(goal_id)
        if row is None:
            return ("gone", None, None)
        return (row.status, row.run_id, row.running_epoch)

    async def stop(self, goal_id: str) -> None:
        sentence = await self.call_store(
            lambda: describe_stop(self.writer(), goal_id, node=self.node, grace_s=self.grace_s)
        )
        if sentence is None:
            return
        seen = await self.call_store(lambda: self.attempt_now(goal_id))
        modal = ConfirmModal(f"Stop goal {goal_id}", sentence, "Stop")
        if not await self.ui.push_screen_wait(modal):
            return
        # The modal promised a particular attempt: if the goal moved on meanwhile (settled,
        # requeued and restarted, cancelled), stop nothing and say so (htop's locked selection).
        now = await self.call_store(lambda: self.attempt_now(goal_id))
        if now != seen:
            self.ui.notify(
                f"{goal_id} changed while the dialog was open ({describe(seen)} → "
                f"{describe(now)}): nothing was stopped",
                title="Stop",
                severity="warning",
                timeout=8,
            )
            return
        report = await self.call_store(
            lambda: stop_goal(
                self.writer(), goal_id, node=self.node, operator=self.operator, grace_s=self.grace_s
            ),
            busy=f"Stopping {goal_id}…",
        )
        self.notify_report(report)

    async def cancel(self, goal_id: str) -> None:
        sentence = await self.call_store(
            lambda: describe_cancel(self.writer(), goal_id, node=self.node)
        )
        if sentence is None:
            return
        reason = await self.ui.push_screen_wait(CancelModal(goal_id, sentence))
        if reason is None:
            return
        report = await self.call_store(
            lambda: cancel_goal(
                self.writer(),
                goal_id,
                reason=reason,
                node=self.node,
                operator=self.operator,
                grace_s=self.grace_s,
            ),
            busy=f"Cancelling {goal_id}…",
        )
        self.notify_report(report)

    async def cleanup(self, run_id: str, epoch: int) -> None:
        evidence = await self.call_store(
            lambda: cleanup_evidence(self.writer(), run_id, epoch=epoch, node=self.node)
        )
        if evidence is None:
            return
        title = f"Confirm cleanup of attempt {epoch} of run {run_id}"
        body = evidence_text(evidence, self.operator, self.node, self.clock())
        if not await self.ui.push_screen_wait(ConfirmModal(title, body, "Confirm cleanup")):
            return
        report = await self.call_store(
            lambda: confirm_cleanup(
                self.writer(), run_id, epoch=epoch, node=self.node, operator=self.operator
            )
        )
        self.notify_report(report)

    async def cleanup_node(self, node_id: str) -> None:
        """One confirmation with the counts, then every attempt of the node, one summary. With
        another node live, a second way to confirm (m) then moves every goal that waits for
        this one to the live nodes (WALKTHROUGH step 9: "the other machines pick the work up")."""
        found = await self.call_store(lambda: self.cleanup_plan(node_id))
        if found is None:
            return
        plan, live = found
        if not plan.attempts:  # ended meanwhile: nothing to ask
            self.ui.notify(plan.text(), title="Cleanup", timeout=5)
            return
        if len(plan.alive) == len(plan.attempts):  # every one still runs here: nothing to ask
            refused = f"node {node_id}: {plan.alive_text()}"
            self.ui.notify(refused, title="Cleanup", severity="warning")
            return
        parts = [
            fmt.literal(f"{plan.text(fmt.clock)}."),  # the node's name is the journal's
            Text(
                "Each attempt is recorded as ended by its own confirmation, its evidence"
                " naming the node's last beat; refused if the node is live again. Confirm"
                " only if that machine's work has really ended."
            ),
        ]
        if live:
            parts.append(fmt.literal(moving_words(live)))
        modal = ConfirmModal(
            f"Confirm cleanup of node {node_id}",
            Text("\n\n").join(parts),
            "Confirm" if live else "Confirm cleanup",
            "Confirm, move" if live else None,
        )
        answer = await self.ui.push_screen_wait(modal)
        if not answer:
            return
        to = live if answer == MOVE else ()
        said = await self.call_store(
            lambda: self.clean_node(node_id, to), busy=f"Confirming node {node_id}'s attempts…"
        )
        if said is not None:
            ok, lines = said
            severity: SeverityLevel = "information" if ok else "warning"
            self.ui.notify(lines, title="Cleanup", severity=severity, timeout=10)
            self.ui.wake()

    def cleanup_plan(self, node_id: str) -> tuple[NodeCleanupPlan, tuple[str, ...]]:
        """(thread) What confirming ``node_id`` does, and the live nodes its goals may go to
        (the most room first)."""
        plan = plan_node_cleanup(self.writer(), node_id, here=self.node)
        nodes = sorted(list_nodes(self.writer()), key=pick_order)
        return plan, tuple(n.node_id for n in nodes if n.state == "live" and n.node_id != node_id)

    def clean_node(self, node_id: str, to: tuple[str, ...]) -> tuple[bool, list[str]]:
        """(thread) The node's cleanup, then (``to``) the move of the goals that wait for it:
        whether all went as planned, and the lines that say so."""
        done = cleanup_node(self.writer(), node_id, here=self.node, operator=self.operator)
        if not to:
            said = [node_summary(done), done.next_step("m here (Move to node)")]
            return not done.errors, [line for line in said if line]
        plan = plan_moving_waiting(self.writer(), node_id, here=self.node, to=to)
        moved = run_bulk(self.writer(), plan, operator=self.operator)
        failed = [g.text() for g in moved.failed[:5]]
        return not done.errors and moved.ok, [node_summary(done), moved.summary(), *failed]

    async def release(self, goal: GoalRow) -> None:
        body = (
            f"Release goal {goal.goal_id}: it becomes queued and node {goal.node_id} starts its "
            f"next attempt ({goal.attempts} used). Release only once the external system has "
            "been checked: this goal's recipe is not safe to redeliver blindly."
        )
        modal = ConfirmModal(f"Release goal {goal.goal_id}", body, "Release")
        if not await self.ui.push_screen_wait(modal):
            return
        report = await self.call_store(
            lambda: release_goal(self.writer(), goal.goal_id, operator=self.operator)
        )
        self.notify_report(report)

    async def bulk(self, action: str, goal_ids: list[str]) -> bool:
        """s c R m on the marked Goals (DESIGN §15): the plan's sentence in one confirmation (and
        one reason, for Cancel; m asks for the node first), the batch in a thread, one summary.
        True: it ran."""
        if action == "reassign":
            return await self.reassign_goals(goal_ids)
        plan = await self.call_store(
            lambda: plan_bulk(
                self.writer(), action, node=self.node, goal_ids=goal_ids, grace_s=self.grace_s
            )
        )
        if plan is None:
            return False
        title = f"{action.capitalize()} {len(plan.goals)} marked goals"
        if not plan.acts:  # nothing would be written: say so, ask for no reason (marks kept)
            self.ui.notify(plan.summary(), title=title, severity="warning", timeout=8)
            return False
        reason: str | None = None
        if action == "cancel":
            reason = await self.ui.push_screen_wait(
                CancelModal(title=title, body=plan.summary(), confirm="Cancel goals")
            )
            if reason is None:
                return False
        elif not await self.ui.push_screen_wait(
            ConfirmModal(title, plan.summary(), action.capitalize())
        ):
            return False
        return await self.run_plan(plan, title, reason)

    async def reassign_goals(self, goal_ids: list[str], node: str | None = None) -> bool:
        """m on a Goal (``node``: its own, not offered) or on the marked ones."""
        what = f"goal {goal_ids[0]}" if len(goal_ids) == 1 else f"{len(goal_ids)} marked goals"
        return await self.move(what, node, goal_ids=goal_ids, spread=len(goal_ids) > 1)

    async def reassign_node(self, node_id: str) -> bool:
        """m in the Nodes view: every queued or held Goal of ``node_id``; none, it says so
        before asking where to."""
        waiting = await self.call_store(lambda: self.waiting_on(node_id))
        if not waiting:  # None: refused, and said
            if waiting is not None:
                self.ui.notify(f"node {node_id} has no queued or held goal to move")
            return False
        what, selection = f"node {node_id}'s queued and held goals", Chosen(node_id, REASSIGNABLE)
        return await self.move(what, node_id, selection=selection, spread=True)

    async def move(
        self,
        what: str,
        exclude: str | None,
        *,
        goal_ids: list[str] | None = None,
        selection: Chosen | None = None,
        spread: bool,
    ) -> bool:
        """Goals (named, or a selection) to another node: picked among those the journal knows
        but ``exclude`` (live, the most room first; ``spread``: every live node offered too),
        then the plan confirmed once and run; one summary. True: it ran."""
        nodes = await self.call_store(lambda: list_nodes(self.writer()))
        if nodes is None:
            return False
        choices = sorted((n for n in nodes if n.node_id != exclude), key=pick_order)
        if not choices:
            self.ui.notify(f"no other node is known to move {what} to", severity="warning")
            return False
        body = "A queued goal runs its next round there; a held one waits there until released."
        live = tuple(n.node_id for n in choices if n.state == "live")
        picked = await self.ui.push_screen_wait(
            NodePickModal(f"Move {what} to…", body, choices, spread=spread and len(live) > 1)
        )
        if picked is None:
            return False
        to = live if picked == SPREAD else (picked,)
        plan = await self.call_store(
            lambda: plan_bulk(
                self.writer(),
                "reassign",
                node=self.node,
                goal_ids=goal_ids,
                selection=selection,
                to=to,
            )
        )
        if plan is None:
            return False
        title = f"Move {what} to node {to[0]}" if len(to) == 1 else f"Move {what}"
        if not plan.acts:  # nothing would be written: say so
            self.ui.notify(plan.summary(), title=title, severity="warning", timeout=8)
            return False
        if not await self.ui.push_screen_wait(ConfirmModal(title, plan.summary(), "Move")):
            return False
        return await self.run_plan(plan, title)

    def waiting_on(self, node_id: str) -> bool:
        """(thread) Whether a queued or held Goal names ``node_id`` (one is enough)."""
        goals = Goals(self.writer())
        return bool(goals.list_readable(status=REASSIGNABLE, node_id=node_id, limit=1))

    async def run_plan(self, plan: BulkPlan, title: str, reason: str | None = None) -> bool:
        """A confirmed batch in a thread, then its summary (the failed ones named). True: ran."""
        report = await self.call_store(
            lambda: run_bulk(
                self.writer(),
                plan,
                reason=reason,
                operator=self.operator,
                grace_s=self.grace_s,
            )
        )
        if report is None:
            return False
        failed = [g.text() for g in report.failed[:5]]  # the first few, named, a line each
        severity: SeverityLevel = "information" if report.ok else "warning"
        self.ui.notify([report.summary(), *failed], title=title, severity=severity, timeout=10)
        self.ui.wake()
        return True

    async def call_store(self, fn: Callable[[], T], busy: str | None = None) -> T | None:
        """Run a blocking store call in a thread; a refusal becomes a notification, in words.
        ``busy`` is said only once the call has taken ``BUSY_AFTER_S``: a quicker one's answer
        comes alone (its "Stopping…" stayed beside it for 2 s)."""
        later = None
        if busy:
            say = functools.partial(self.ui.notify, busy, timeout=2)
            later = asyncio.get_running_loop().call_later(BUSY_AFTER_S, say)
        try:
            return await asyncio.to_thread(fn)
        except RefineError as exc:
            self.ui.notify(refusal_text(exc), title="Refused", severity="error", timeout=8)
        except Exception as exc:  # never a traceback on the operator's screen
            self.ui.notify(f"{type(exc).__name__}: {exc}", title="Failed", severity="error")
        finally:
            if later is not None:
                later.cancel()
        return None

    def notify_report(self, report: ActionReport | None) -> None:
        if report is None:
            return
        self.ui.notify(report.text(), title=report.action.capitalize(), timeout=8)
        self.ui.wake()


def refusal_text(exc: RefineError) -> str:
    """A refusal in words, with its code for the curious (never a traceback)."""
    return f"{exc.message} ({exc.code})"


def pick_order(node: NodeView) -> tuple[bool, int, str]:
    """Where goals are best moved first: live nodes, the most room, then by name."""
    return node.state != "live", -node.room, node.node_id


def node_summary(done: NodeCleanup) -> str:
    """A node's cleanup in one line: how many attempts were confirmed, skipped, refused."""
    if not done.reports:
        return f"node {done.node.node_id}: nothing left to confirm (no attempt runs there)"
    counts: dict[str, int] = {}
    for report in done.reports:
        counts[report.outcome] = counts.get(report.outcome, 0) + 1
    said = ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items()))
    refusals = "".join(f"; {e.code}: {e.message}" for e in done.errors[:1])
    return f"node {done.node.node_id}: {count(len(done.reports), 'attempt')}: {said}{refusals}"


def moving_words(live: Sequence[str]) -> str:
    """The cleanup confirmation's second way (m): where the node's waiting goals would go."""
    if len(live) == 1:
        return f"m: also move its queued and held goals to node {live[0]}."
    shown = listed(live, 5)
    return f"m: also move its queued and held goals to the live nodes {shown}, most room first."


def describe(attempt: tuple[str, str | None, int | None] | None) -> str:
    if attempt is None:
        return "unknown"
    status, run_id, epoch = attempt
    return f"{status}, attempt {epoch} of {run_id}" if epoch else status


def evidence_text(evidence: CleanupEvidence, operator: str, node: str, now: float) -> Text:
    """The cleanup modal's body: the evidence, what confirming does, then the log tail.

    The log tail comes last: on a small terminal it is what scrolls, never the consequence.
    Its ages are written one way and read on one clock (the dashboard's, like Elapsed).
    """
    text = Text()
    text.append(str(evidence.sentence) + "\n", style="bold")
    ages = []
    if evidence.attempt_started_at is not None:
        age = fmt.duration(now - evidence.attempt_started_at)  # the app's clock, like Elapsed
        ages.append(f"attempt {evidence.epoch} by {evidence.worker}, started {age} ago")
    output_at = evidence.last_output_at
    ages.append(
        "no log output" if output_at is None else f"last output {fmt.duration(now - output_at)} ago"
    )
    text.append("; ".join(ages) + "\n")
    rec = evidence.record
    if rec is not None:
        text.append(f"command: {fmt.visible(' '.join(rec.argv))}\n", style="dim")
    if evidence.same_process_alive:
        text.append(
            f"That process is still alive: {_stop_advice(evidence, node)}.\n", style="bold red"
        )
    text.append(
        f"\nConfirming records attempt {evidence.epoch} as ended"
        f" (confirmed by {operator}@{node});"
        f" {evidence.ending}. "
    )
    text.append(
        "Confirm only if this attempt's work has really ended (process gone or fenced).",
        style="italic",
    )
    if evidence.log_tail:
        text.append("\n\nlast log lines (↑↓ scroll):", style="dim")
        for line in evidence.log_tail[-8:]:  # visible first: Text.append drops \x07 \b
            text.append("\n  " + fmt.visible(as_printed(line)), style="dim")
    return text


def _stop_advice(evidence: CleanupEvidence, node: str) -> str:
    """What the operator can do about a live process from here: Stop only on its own node, and
    only as a user who may signal it (or cancel: its node stops it)."""
    if evidence.node_id == node and evidence.runs_as_another_user:
        return "it runs as another user, whom you may not signal: cancel the goal (c)"
    if evidence.node_id == node:
        return "stop it first (s)"
    goal_id = goal_id_of_run(evidence.run_id) or evidence.run_id
    return (
        f"stop it on node {evidence.node_id} (refine --node {evidence.node_id} stop {goal_id}),"
        " or cancel the goal (c)"
    )
