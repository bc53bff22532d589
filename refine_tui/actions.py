"""Operator actions: what applies to the selection (and, in words, why not), and the Stop /
Cancel / Confirm cleanup / Release flows.

``OperatorActions`` is a mixin of ``RefineApp``: it reads the selection and the journal through the
App, calls ``store.operator`` in threads and reports back as notifications. ``check_action`` greys
what does not apply and ``why_not`` says why.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual import work
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.events import Key
from textual.screen import Screen
from textual.widgets import Input

from refine_tui import format as fmt
from refine_tui.live import LiveReader
from refine_tui.rows import GoalRow, Reader
from refine_tui.screens.confirm import CancelModal, ConfirmModal
from refine_tui.widgets.status_header import HeaderState
from store.errors import RefineError, StorageError
from store.journal_api import Journal, JournalHandle
from store.operator import (
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
from store.watch import ChangeFeed

OPERATOR_ACTIONS = ("stop", "cancel_goal", "cleanup", "release")
SELECTION_ACTIONS = ("log", "history")
ACTION_TITLES = {
    "stop": "Stop",
    "cancel_goal": "Cancel",
    "cleanup": "Confirm cleanup",
    "release": "Release",
    "log": "Log",
    "history": "History",
}
ACTION_KEYS = {"stop": "s", "cancel_goal": "c", "cleanup": "x", "release": "R"}

# Type checkers see the mixins as Apps (for notify, push_screen_wait, super() ...); at run time
# they are plain classes in front of App in RefineApp's bases.
if TYPE_CHECKING:
    _AppBase = App[None]
else:
    _AppBase = object


class OperatorActions(_AppBase):
    """Action availability and the operator commands, on the App's selection and journal."""

    # Provided by RefineApp.
    node: str
    read_only: bool
    operator: str
    grace_s: float
    clock: Callable[[], float]
    view: str
    header_state: HeaderState
    journal_path: Path | str
    feed: ChangeFeed
    live: LiveReader
    _writer: JournalHandle

    if TYPE_CHECKING:

        def selected_goal(self) -> GoalRow | None: ...
        def selected_attempt(self) -> tuple[str, int] | None: ...
        def selected_run(self) -> str | None: ...
        def wake(self, full: bool = False) -> None: ...

    # --- actions: availability -----------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in OPERATOR_ACTIONS or action in SELECTION_ACTIONS:
            return True if self.why_not(action) is None else None
        return True

    def why_not(self, action: str) -> str | None:
        """Why ``action`` does not apply to the selection now, in words (None: it does)."""
        why = self._why(action)
        return why[1] if why else None

    def _why(self, action: str) -> tuple[str, str] | None:
        """(short, long) reason ``action`` is greyed: short for the hint line, long to notify."""
        if action in OPERATOR_ACTIONS:
            if self.read_only:
                return "read-only", "the journal is open read-only"
            if self.header_state.state in ("missing", "broken", "connecting"):
                return "no journal", "the journal is unavailable"
        if self.view == "workers":
            return "n/a here", "not in the Workers view (escape goes back)"
        goal = self.selected_goal()
        if goal is None:
            return "no goal", "no goal selected"
        if goal.status == "corrupt":
            return "corrupt", "the goal's record is corrupt"
        if action == "stop":
            if goal.status != "running":
                return f"{goal.status}", f"goal is {goal.status}, nothing runs"
            if goal.node_id != self.node:
                return (
                    f"on {goal.node_id}",
                    f"it runs on node {goal.node_id}; Stop works on this node ({self.node}) only",
                )
        elif action == "cancel_goal":
            if goal.terminal:
                return f"{goal.status}", f"goal is already {goal.status}"
        elif action == "cleanup":
            target = self.selected_attempt()
            if goal.running_epoch is None or target is None:
                return "nothing running", "the goal has no running attempt"
            if target != (goal.run_id, goal.running_epoch):
                return "not running", f"attempt {target[1]} of {target[0]} is not running"
        elif action == "release":
            if goal.status != "held":
                return "not held", f"goal is {goal.status}; only a held goal is released"
        elif action == "history" and self.selected_run() is None:
            return "no run", "no run selected"
        return None

    def on_key(self, event: Key) -> None:
        """A greyed key says why instead of doing nothing."""
        if self.screen is not self.screen_stack[0] or isinstance(self.focused, Input):
            return
        for binding in self.BINDINGS:
            if isinstance(binding, Binding) and event.key in binding.key.split(","):
                why = self.why_not(binding.action) if binding.action in ACTION_TITLES else None
                if why is not None:
                    self.notify(f"{ACTION_TITLES[binding.action]}: {why}", severity="warning")
                    event.stop()
                return

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        commands = [
            ("Stop", "Stop the selected goal's attempt (s)", "stop"),
            ("Cancel goal", "Cancel the selected goal, with a reason (c)", "cancel_goal"),
            ("Confirm cleanup", "Confirm a silent attempt's work has ended (x)", "cleanup"),
            ("Release", "Make a held goal actionable again (R)", "release"),
            ("Log", "Show / hide the attempt's log (l)", "log"),
            ("History", "Show / hide the run's event history (h)", "history"),
            ("Workers", "This node's worker processes (w)", "workers"),
            ("Filter goals", "Filter by id, title, status or node (/)", "filter"),
            ("Pause / resume", "Pause live updates (p)", "pause"),
            ("Refresh", "Reload everything from the journal (r)", "refresh"),
            ("Help", "All keys (?)", "help"),
        ]
        for title, help_text, action in commands:
            yield SystemCommand(title, help_text, lambda a=action: self.run_checked(a))

    async def run_checked(self, action: str) -> None:
        why = self.why_not(action) if action in ACTION_TITLES else None
        if why is not None:
            self.notify(f"{ACTION_TITLES[action]}: {why}", severity="warning")
            return
        await self.run_action(action)

    # --- actions: operator commands ------------------------------------------------------------

    def writer(self) -> Journal:
        """(thread) The one writable connection, reopened if the journal was replaced."""
        return self._writer.get()

    def reading(self) -> Journal:
        journal = self.feed.journal
        if journal is None:
            raise StorageError("the journal is unavailable")
        return journal

    def action_stop(self) -> None:
        goal = self.selected_goal()
        if goal is not None:
            self.stop_flow(goal.goal_id)

    @work(group="operator", exit_on_error=False)
    async def stop_flow(self, goal_id: str) -> None:
        sentence = await self.call_store(
            lambda: describe_stop(self.writer(), goal_id, node=self.node, grace_s=self.grace_s)
        )
        if sentence is None:
            return
        seen = await self.call_store(lambda: self.attempt_now(goal_id))
        if not await self.push_screen_wait(ConfirmModal(f"Stop goal {goal_id}", sentence, "Stop")):
            return
        # The modal promised a particular attempt: if the goal moved on meanwhile (settled,
        # requeued and restarted, cancelled), stop nothing and say so (htop's locked selection).
        now = await self.call_store(lambda: self.attempt_now(goal_id))
        if now != seen:
            self.notify(
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

    def attempt_now(self, goal_id: str) -> tuple[str, str | None, int | None]:
        """(thread) The goal's status, run and running epoch as the journal has them now."""
        reader = Reader(self.reading(), self.node) if self.live.reader is None else self.live.reader
        row = reader.goal_rows([goal_id]).get(goal_id)
        if row is None:
            return ("gone", None, None)
        return (row.status, row.run_id, row.running_epoch)

    def action_cancel_goal(self) -> None:
        goal = self.selected_goal()
        if goal is not None:
            self.cancel_flow(goal.goal_id)

    @work(group="operator", exit_on_error=False)
    async def cancel_flow(self, goal_id: str) -> None:
        sentence = await self.call_store(
            lambda: describe_cancel(self.writer(), goal_id, node=self.node)
        )
        if sentence is None:
            return
        reason = await self.push_screen_wait(CancelModal(goal_id, sentence))
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

    def action_cleanup(self) -> None:
        target = self.selected_attempt()
        if target is not None:
            self.cleanup_flow(*target)

    @work(group="operator", exit_on_error=False)
    async def cleanup_flow(self, run_id: str, epoch: int) -> None:
        evidence = await self.call_store(
            lambda: cleanup_evidence(self.writer(), run_id, epoch=epoch, node=self.node)
        )
        if evidence is None:
            return
        title = f"Confirm cleanup of attempt {epoch} of run {run_id}"
        if not await self.push_screen_wait(
            ConfirmModal(title, self.cleanup_body(evidence), "Confirm cleanup")
        ):
            return
        report = await self.call_store(
            lambda: confirm_cleanup(
                self.writer(), run_id, epoch=epoch, node=self.node, operator=self.operator
            )
        )
        self.notify_report(report)

    def cleanup_body(self, evidence: CleanupEvidence) -> Text:
        return evidence_text(evidence, f"{self.operator}@{self.node}", self.clock())

    def action_release(self) -> None:
        goal = self.selected_goal()
        if goal is not None:
            self.release_flow(goal)

    @work(group="operator", exit_on_error=False)
    async def release_flow(self, goal: GoalRow) -> None:
        body = (
            f"Release goal {goal.goal_id}: it becomes queued and node {goal.node_id} starts its "
            f"next attempt ({goal.attempts} used). Release only once the external system has "
            "been checked: this goal's recipe is not safe to redeliver blindly."
        )
        if not await self.push_screen_wait(
            ConfirmModal(f"Release goal {goal.goal_id}", body, "Release")
        ):
            return
        report = await self.call_store(
            lambda: release_goal(self.writer(), goal.goal_id, operator=self.operator)
        )
        self.notify_report(report)

    async def call_store(self, fn: Callable[[], Any], busy: str | None = None) -> Any:
        """Run a blocking store call in a thread; a refusal becomes a notification, in words."""
        if busy:
            self.notify(busy, timeout=2)
        try:
            return await asyncio.to_thread(fn)
        except RefineError as exc:
            self.notify(refusal_text(exc), title="Refused", severity="error", timeout=8)
        except Exception as exc:  # never a traceback on the operator's screen
            self.notify(f"{type(exc).__name__}: {exc}", title="Failed", severity="error")
        return None

    def notify_report(self, report: ActionReport | None) -> None:
        if report is None:
            return
        self.notify(report.text(), title=report.action.capitalize(), timeout=8)
        self.wake()


def refusal_text(exc: RefineError) -> str:
    """A refusal in words, with its code for the curious (never a traceback)."""
    return f"{exc.message} ({exc.code})"


def describe(attempt: tuple[str, str | None, int | None] | None) -> str:
    if attempt is None:
        return "unknown"
    status, run_id, epoch = attempt
    return f"{status}, attempt {epoch} of {run_id}" if epoch else status


def evidence_text(evidence: CleanupEvidence, confirmed_by: str, now: float) -> Text:
    """The cleanup modal's body: the evidence, what confirming does, then the log tail.

    The log tail comes last: on a small terminal it is what scrolls, never the consequence.
    """
    text = Text()
    text.append(str(evidence.sentence) + "\n", style="bold")
    if evidence.attempt_started_at is not None:
        age = fmt.duration(now - evidence.attempt_started_at)  # the app's clock, like Elapsed
        text.append(f"attempt {evidence.epoch} by {evidence.worker}, started {age} ago\n")
    rec = evidence.record
    if rec is not None:
        text.append(f"command: {' '.join(rec.argv)}\n", style="dim")
    if evidence.same_process_alive:
        text.append("That process is still alive: stop it first (s).\n", style="bold red")
    text.append(
        f"\nConfirming records attempt {evidence.epoch} as ended (confirmed by {confirmed_by});"
        f" {evidence.ending}. "
    )
    text.append(
        "Confirm only if this attempt's work has really ended (process gone or fenced).",
        style="italic",
    )
    if evidence.log_tail:
        text.append("\n\nlast log lines:", style="dim")
        for line in evidence.log_tail[-8:]:
            text.append("\n  " + line.rstrip("\n"), style="dim")
    return text
