"""Operator actions: what applies to the selection (and, in words, why not), and the Stop /
Cancel / Confirm cleanup / Release flows.

``why`` is a pure function of a ``Selection`` (what the screen has selected, and the journal's
state): the App greys keys with it and says why. ``OperatorFlows`` is a small controller: each
flow takes typed inputs (a goal id, a run id and epoch), calls ``store.ops.operator`` in threads,
asks the operator through modals and reports back as notifications, through a ``Dashboard``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from rich.text import Text
from textual.binding import Binding, BindingType
from textual.notifications import SeverityLevel
from textual.screen import Screen

from refine_tui import format as fmt
from refine_tui.rows import GoalRow, Reader
from refine_tui.screens.confirm import CancelModal, ConfirmModal
from store.errors import RefineError, StorageError
from store.journal.api import Journal, JournalHandle
from store.model.goal import goal_id_of_run
from store.ops.bulk import plan_bulk, run_bulk
from store.ops.node_cleanup import NodeCleanup, cleanup_node
from store.ops.nodes import NodeView, active_attempts
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

# The dashboard's keys. Back beside the tables' enter (the focused table's keys lead the
# footer); shown only where it goes somewhere (Dashboard.check_action).
KEYS: list[BindingType] = [
    Binding("escape,backspace", "back", "Back"),
    Binding("question_mark", "help", "Help"),
    Binding("q", "app.quit", "Quit"),
    Binding("s", "stop", "Stop"),
    Binding("c", "cancel_goal", "Cancel"),
    Binding("x", "cleanup", "Cleanup"),
    Binding("R", "release", "Release"),
    Binding("l", "log", "Log"),
    Binding("h", "history", "History"),
    Binding("w", "workers", "Workers", show=False),
    Binding("slash", "filter", "Filter"),
    Binding("p", "pause", "Pause", show=False),
    Binding("r", "refresh", "Refresh", show=False),
]
# Marks (DESIGN §15): with marks, s c R act on the marked Goals.
KEYS += [
    Binding("space", "mark", "Mark", show=False),
    Binding("asterisk", "mark_all", "Mark all", show=False),
    Binding("u", "unmark", "Unmark", show=False),
]
MARK_ACTIONS = ("mark", "mark_all", "unmark")
# The operator actions a batch does (store.ops.bulk's names), with marks.
BULK = {"stop": "stop", "cancel_goal": "cancel", "release": "release"}
# The Nodes view (DESIGN §14): its own block, so other keys land beside it without conflict.
KEYS.append(Binding("n", "nodes", "Nodes", show=False))
# The attempt timeline (DESIGN §17), of the selected Goal or Run.
KEYS.append(Binding("t", "timeline", "Timeline"))
# What a footer too narrow for every key keeps, first to last (whole keys: the others are in
# `?` help): Help and Quit, the Filter, the way down (the tables' enter) and back, then the
# operator keys. Log and History go first.
FOOTER_KEEPS = (
    "help",
    "app.quit",
    "filter",
    "select_cursor",
    "back",
    "stop",
    "cancel_goal",
    "cleanup",
    "release",
    "log",
    "history",
    "timeline",
)
OPERATOR_ACTIONS = ("stop", "cancel_goal", "cleanup", "release")
SELECTION_ACTIONS = ("log", "history", "timeline")
ACTION_TITLES = {
    "stop": "Stop",
    "cancel_goal": "Cancel",
    "cleanup": "Confirm cleanup",
    "release": "Release",
    "log": "Log",
    "history": "History",
    "timeline": "Timeline",
    "mark": "Mark",
    "mark_all": "Mark all",
    "unmark": "Unmark",
}
ACTION_KEYS = {"stop": "s", "cancel_goal": "c", "cleanup": "x", "release": "R"}
SYSTEM_COMMANDS = (
    ("Stop", "Stop the selected goal's attempt (s)", "stop"),
    ("Cancel goal", "Cancel the selected goal, with a reason (c)", "cancel_goal"),
    ("Confirm cleanup", "Confirm a silent attempt's work has ended (x)", "cleanup"),
    ("Release", "Make a held goal actionable again (R)", "release"),
    ("Log", "Show / hide the attempt's log (l)", "log"),
    ("History", "Show / hide the run's event history (h)", "history"),
    ("Workers", "This node's worker processes (w)", "workers"),
    ("Timeline", "The goal's (or run's) attempts on a time axis (t)", "timeline"),
    ("Nodes", "Every node's presence; x confirms a silent node's attempts (n)", "nodes"),
    ("Filter goals", "Filter by id, title, status or node (/)", "filter"),
    ("Pause / resume", "Pause live updates (p)", "pause"),
    ("Refresh", "Reload everything from the journal (r)", "refresh"),
    ("Help", "All keys (?)", "help"),
    ("Mark / unmark", "Mark the selected goal: s c R act on the marked (space)", "mark"),
    ("Mark all shown", "Mark every goal the filter shows (*)", "mark_all"),
    ("Clear marks", "Unmark every goal (u)", "unmark"),
)

T = TypeVar("T")


# --- what applies ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Selection:
    """What the screen has selected, and what the actions depend on besides."""

    node: str  # this dashboard's node
    read_only: bool
    journal_state: str  # the header's state: live, paused, missing, broken, connecting, ...
    view: str  # goals | runs | attempts | workers
    goal: GoalRow | None
    attempt: tuple[str, int] | None  # (run_id, epoch) the attempt-level actions apply to
    run_id: str | None
    marked: int = 0  # marked Goals (s c R act on them in the Goals view)
    hidden_marks: int = 0  # of which the filter does not show

    @property
    def bulk(self) -> bool:
        """s c R act on the marked Goals rather than the selected row."""
        return self.marked > 0 and self.view == "goals"

    presence: NodeView | None = None  # the node selected in the Nodes view


def why(action: str, sel: Selection) -> tuple[str, str] | None:
    """(short, long) reason ``action`` is greyed: short for the hint line, long to notify."""
    if action in OPERATOR_ACTIONS:
        if sel.read_only:
            return "read-only", "the journal is open read-only"
        if sel.journal_state in ("missing", "broken", "connecting"):
            return "no journal", "the journal is unavailable"
    if sel.view == "nodes":
        return why_node(action, sel.presence)
    if sel.bulk and action in BULK:
        return None  # the plan says what it does to each marked Goal
    if action in MARK_ACTIONS:
        return why_mark(action, sel)
    if sel.view == "workers":
        return "n/a here", "not in the Workers view (escape goes back)"
    goal = sel.goal
    if goal is None:
        return "no goal", "no goal selected"
    if goal.status == "corrupt":
        return "corrupt", "the goal's record is corrupt"
    if action == "stop":
        if goal.status != "running":
            return f"{goal.status}", f"goal is {goal.status}, nothing runs"
        if goal.node_id != sel.node:
            return (
                f"on {goal.node_id}",
                f"it runs on node {goal.node_id}; Stop works on this node ({sel.node}) only",
            )
        if goal.needs_cleanup:  # advice: pressed anyway, the store answers (store_answers)
            return no_process(goal, sel.node)
    elif action == "cancel_goal":
        if goal.terminal:
            return f"{goal.status}", f"goal is already {goal.status}"
    elif action == "cleanup":
        target = sel.attempt
        if goal.running_epoch is None or target is None:
            return "nothing running", "the goal has no running attempt"
        if target != (goal.run_id, goal.running_epoch):
            return "not running", f"attempt {target[1]} of {target[0]} is not running"
    elif action == "release":
        if goal.status != "held":
            return "not held", f"goal is {goal.status}; only a held goal is released"
    elif action == "history" and sel.run_id is None:
        return "no run", "no run selected"
    return None


def no_process(goal: GoalRow, node: str) -> tuple[str, str]:
    """Stop on a `needs cleanup` row: no live process proves the attempt, x is what to do."""
    return (
        "no process here — x confirms cleanup",
        f"no process of attempt {goal.running_epoch} is left on node {node} to stop;"
        " x (Confirm cleanup) records that its work has ended",
    )


def store_answers(action: str, sel: Selection) -> bool:
    """Greyed as advice only (Stop on a `needs cleanup` row): pressed anyway, the flow runs
    and the store answers, with its typed refusal (NO_PROCESS_RECORD) when no process record
    is left, or a Stop of the dead process its record names."""
    goal = sel.goal
    if action != "stop" or goal is None or not goal.needs_cleanup or sel.bulk:
        return False
    return why(action, sel) == no_process(goal, sel.node)


def why_mark(action: str, sel: Selection) -> tuple[str, str] | None:
    if action == "unmark":
        return None if sel.marked else ("no marks", "no goal is marked")
    if sel.view != "goals":
        return "goals only", "marks are made in the Goals view (escape goes back)"
    if action == "mark" and sel.goal is None:
        return "no goal", "no goal selected"
    return None


def marks_words(sel: Selection) -> str:
    """The marks in words: "3 marked (1 hidden by the filter)" ("" without marks)."""
    if not sel.marked:
        return ""
    hidden = f" ({sel.hidden_marks} hidden by the filter)" if sel.hidden_marks else ""
    return f"{sel.marked} marked{hidden}"


def why_node(action: str, node: NodeView | None) -> tuple[str, str] | None:
    """In the Nodes view only `x` applies: to a silent or stopped node that runs attempts."""
    if action != "cleanup":
        return "n/a here", "not in the Nodes view (escape goes back)"
    if node is None:
        return "no node", "no node selected"
    if node.state == "live":
        return "node live", f"node {node.node_id} is live: its attempts are its own to end"
    if node.state == "unknown":
        return "never beat", f"node {node.node_id} never beat: nothing says it is gone"
    if not node.running:
        return "nothing running", f"no attempt runs on node {node.node_id}"
    return None


def applies(sel: Selection) -> tuple[bool, ...]:
    """Which of the operator and selection actions apply (the footer greys the others)."""
    actions = (*OPERATOR_ACTIONS, *SELECTION_ACTIONS, *MARK_ACTIONS)
    return tuple(why(a, sel) is None for a in actions)


def check(action: str, sel: Selection) -> bool | None:
    """As ``App.check_action``: True (applies), None (shown greyed: it does not, now)."""
    if action in OPERATOR_ACTIONS or action in SELECTION_ACTIONS or action in MARK_ACTIONS:
        return True if why(action, sel) is None else None
    return True


def key_action(key: str) -> str | None:
    """The dashboard's action for ``key`` (None: not one of its keys)."""
    for binding in KEYS:
        if isinstance(binding, Binding) and key in binding.key.split(","):
            return binding.action
    return None


def key_refusal(key: str, selection: Callable[[], Selection]) -> str | None:
    """What pressing ``key`` says when its action is greyed (None: nothing to say, or the
    store answers); the selection is looked at only for the dashboard's own keys."""
    if (action := key_action(key)) is None:
        return None
    sel = selection()
    return None if store_answers(action, sel) else refusal(action, sel)


def refusal(action: str, sel: Selection) -> str | None:
    """What a greyed action says when asked for anyway (None: it applies or is a view's)."""
    reason = why(action, sel) if action in ACTION_TITLES else None
    return f"{ACTION_TITLES[action]}: {reason[1]}" if reason is not None else None


def hint(sel: Selection) -> str:
    """The line under the table: why the operator keys are greyed, in short."""
    if sel.read_only:
        return "read-only: s c x R are disabled"
    if sel.journal_state in ("missing", "broken"):
        return "journal unavailable: actions are disabled until it is back"
    if sel.bulk:
        return f"{marks_words(sel)} · s c R act on them · u clears"
    marks = [marks_words(sel)] if sel.marked else []
    return " · ".join(
        marks
        + [
            f"{ACTION_KEYS[a]}: {short}"
            for a in OPERATOR_ACTIONS
            if (short := (why(a, sel) or ("", ""))[0])
        ]
    )


# --- the flows ---------------------------------------------------------------------------------


class Dashboard(Protocol):
    """What the flows need from the screen they run on."""

    def notify(
        self,
        message: str,
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

    def flow(self, action: str, sel: Selection) -> Coroutine[Any, Any, None] | None:
        """The flow an operator action starts on the selection (None: nothing to act on)."""
        goal, attempt = sel.goal, sel.attempt
        if action == "cleanup" and sel.view == "nodes":
            return self.cleanup_node(sel.presence.node_id) if sel.presence else None
        if action == "cleanup":
            return self.cleanup(*attempt) if attempt is not None else None
        if goal is None:
            return None
        if action == "stop":
            return self.stop(goal.goal_id)
        if action == "cancel_goal":
            return self.cancel(goal.goal_id)
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
        """One confirmation with the counts, then every attempt of the node, one summary."""
        attempts = await self.call_store(lambda: active_attempts(self.writer(), node_id))
        if attempts is None:
            return
        goals = len({a.goal.goal_id for a in attempts})
        body = (
            f"Node {node_id} runs {len(attempts)} attempt(s) of {goals} goal(s) as the journal"
            " says. Confirming records each as ended (its evidence names the node's last beat)"
            " and each goal follows its redelivery rule (queued or held). Refused if the node"
            " is live again. Confirm only if that machine's work has really ended."
        )
        modal = ConfirmModal(f"Confirm cleanup of node {node_id}", body, "Confirm cleanup")
        if not await self.ui.push_screen_wait(modal):
            return
        done = await self.call_store(
            lambda: cleanup_node(self.writer(), node_id, here=self.node, operator=self.operator),
            busy=f"Confirming node {node_id}'s attempts…",
        )
        if done is not None:
            self.ui.notify(node_summary(done), title="Cleanup", timeout=8)
            self.ui.wake()

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
        """s c R on the marked Goals (DESIGN §15): the plan's sentence in one confirmation (and
        one reason, for Cancel), the batch in a thread, one summary. True: it ran."""
        plan = await self.call_store(
            lambda: plan_bulk(
                self.writer(), action, node=self.node, goal_ids=goal_ids, grace_s=self.grace_s
            )
        )
        if plan is None:
            return False
        reason: str | None = None
        title = f"{action.capitalize()} {len(plan.goals)} marked goals"
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
        failed = "".join(f"\n{g.text()}" for g in report.failed[:5])  # the first few, named
        severity: SeverityLevel = "information" if report.ok else "warning"
        self.ui.notify(report.summary() + failed, title=title, severity=severity, timeout=10)
        self.ui.wake()
        return True

    async def call_store(self, fn: Callable[[], T], busy: str | None = None) -> T | None:
        """Run a blocking store call in a thread; a refusal becomes a notification, in words."""
        if busy:
            self.ui.notify(busy, timeout=2)
        try:
            return await asyncio.to_thread(fn)
        except RefineError as exc:
            self.ui.notify(refusal_text(exc), title="Refused", severity="error", timeout=8)
        except Exception as exc:  # never a traceback on the operator's screen
            self.ui.notify(f"{type(exc).__name__}: {exc}", title="Failed", severity="error")
        return None

    def notify_report(self, report: ActionReport | None) -> None:
        if report is None:
            return
        self.ui.notify(report.text(), title=report.action.capitalize(), timeout=8)
        self.ui.wake()


def refusal_text(exc: RefineError) -> str:
    """A refusal in words, with its code for the curious (never a traceback)."""
    return f"{exc.message} ({exc.code})"


def node_summary(done: NodeCleanup) -> str:
    """A node's cleanup in one line: how many attempts were confirmed, skipped, refused."""
    if not done.reports:
        return f"node {done.node.node_id}: nothing left to confirm (no attempt runs there)"
    counts: dict[str, int] = {}
    for report in done.reports:
        counts[report.outcome] = counts.get(report.outcome, 0) + 1
    said = ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items()))
    refusals = "".join(f"; {e.code}: {e.message}" for e in done.errors[:1])
    return f"node {done.node.node_id}: {len(done.reports)} attempt(s): {said}{refusals}"


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
        for line in evidence.log_tail[-8:]:  # visible first: Text.append drops \r \x07 \b
            text.append("\n  " + fmt.visible(line.rstrip("\n")), style="dim")
    return text


def _stop_advice(evidence: CleanupEvidence, node: str) -> str:
    """What the operator can do about a live process from here: Stop only on its own node."""
    if evidence.node_id == node:
        return "stop it first (s)"
    goal_id = goal_id_of_run(evidence.run_id) or evidence.run_id
    return (
        f"stop it on node {evidence.node_id} (refine --node {evidence.node_id} stop {goal_id}),"
        " or cancel the goal (c)"
    )
