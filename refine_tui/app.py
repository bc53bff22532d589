"""The refine dashboard: Goals → Runs → Attempts, live from the journal, with Stop/Cancel/Cleanup.

Structure: a live worker (``refine_tui.follow``) waits on the JournalWatcher, reads what changed
through one ChangeFeed connection in a thread, and posts one ``JournalUpdate``; handlers diff the
rows into KeyedTables by key. This module is the App's wiring: layout, key bindings, and message
handlers that hand each update to the part that owns it. Beside it, each owning its own state:
the Goals list and its chunked fill (``goal_list``), the new-list paint hold (``paint_hold``),
the Runs and Attempts tables (``tables``), rows → cells (``cells``), where the operator is and
what is selected (``drill``), launch windows and process observations (``observe``), the read
thread's state (``live``), the operator flows and what applies (``actions``) and the detail
pane widget (``detail``: history and log).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any, ClassVar

from textual import events, on, work
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Vertical
from textual.driver import Driver
from textual.notifications import SeverityLevel
from textual.screen import Screen
from textual.widgets import ContentSwitcher, DataTable, Input, Label, Static

from refine_tui import cells
from refine_tui import format as fmt
from refine_tui.actions import (
    ACTION_TITLES,
    OPERATOR_ACTIONS,
    SELECTION_ACTIONS,
    SYSTEM_COMMANDS,
    OperatorFlows,
    Selection,
    applies,
    hint,
    why,
)
from refine_tui.cells import BASE_WIDTHS, GOAL_COLUMNS
from refine_tui.detail import DetailPane, DetailTarget
from refine_tui.drill import Drill
from refine_tui.follow import JournalFollower
from refine_tui.goal_list import GoalList, matches
from refine_tui.live import LiveReader, ReadRequest
from refine_tui.messages import JournalTrouble, JournalUpdate
from refine_tui.observe import LaunchWindows
from refine_tui.paint_hold import PaintHold
from refine_tui.rows import AttemptRow, GoalRow, WorkerRow
from refine_tui.screens.help import HelpScreen
from refine_tui.tables import AttemptTable, RunTable, WorkerTable
from refine_tui.widgets.filter_box import FilterBox
from refine_tui.widgets.key_footer import KeyFooter
from refine_tui.widgets.keyed_table import KeyedTable
from refine_tui.widgets.status_header import HeaderState, StatusHeader
from refine_tui.widgets.trouble import TroubleNotice
from store.errors import RefineError, StorageError
from store.journal.api import JournalHandle
from store.journal.locations import resolve_location
from store.journal.url import redact
from store.journal.watch import ChangeFeed
from store.ops.operator import default_node, default_operator

# A new filter's list usually arrives in 20–60 ms: paint nothing meanwhile, at most this long.
HOLD_PAINT_S = 0.5
OBSERVE_INTERVAL_S = 5.0  # CPU/memory/liveness of this node's processes (they change silently)


class RefineApp(App[None]):
    """The dashboard. ``RefineApp(journal=PATH, node=NAME, read_only=False)``."""

    CSS_PATH = "app.tcss"
    TITLE = "refine"
    # Help and Quit first: a narrow terminal cuts the footer's end, and these two must stay.
    BINDINGS: ClassVar = [
        Binding("question_mark", "help", "Help"),
        Binding("q", "quit", "Quit"),
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
        Binding("escape,backspace", "back", "Back", show=False),
    ]

    def __init__(
        self,
        journal: str | os.PathLike[str],
        node: str | None = None,
        read_only: bool = False,
        *,
        operator: str | None = None,
        grace_s: float = 5.0,
        clock: Callable[[], float] = time.time,
        watch: bool = True,
    ) -> None:
        super().__init__()
        self.journal_path = resolve_location(journal)  # once: the watch folder derives from it
        self.journal_label = redact(journal)  # a URL without its password
        self.node = node or default_node()
        self.read_only = read_only
        self.operator = operator or default_operator()
        self.grace_s = grace_s
        self.clock = clock
        self.watch_files = watch
        self.paused = False
        self.snapshot = False  # the journal read is a frozen snapshot (a read-only folder)
        self.filter_text = ""
        self.goal_list = GoalList(
            self, lambda: self.query_one("#goals", KeyedTable), self.goal_cells
        )
        self.header_state = HeaderState(self.journal_label, self.node, read_only)
        self.feed = ChangeFeed(self.journal_path)
        self.live = LiveReader(self.feed, self.node)  # the read thread's own state
        self._writer = JournalHandle(self.journal_path)
        self.flows = OperatorFlows(
            self,
            node=self.node,
            operator=self.operator,
            grace_s=grace_s,
            clock=clock,
            writer=self._writer,
            reading=lambda: self.feed.journal,
            reader=lambda: self.live.reader,
        )
        self.follower = JournalFollower(
            self,
            self.live,
            location=self.journal_path,
            label=self.journal_label,
            request=self.read_request,
            paused=lambda: self.paused,
            watch_files=watch,
        )
        # Grown on wide terminals (on_resize); the attempt State fits "interrupted (… by dana@n1)".
        self.widths = dict(BASE_WIDTHS)
        self._why_text: str | None = None  # what the hint line last showed
        self._row_text: str | None = None  # what the selected row's line last showed
        self._enabled: tuple[bool, ...] = ()  # which actions the footer last showed enabled
        self._reload_asked = False  # `r` pressed: confirm when the full reload is shown
        self._held_updates: list[JournalUpdate] = []  # read while paused, shown on resume
        self.launches = LaunchWindows(self, paused=lambda: self.paused, recheck=self.read_and_post)
        self.paint = PaintHold(self, lambda: self.query_one_optional(FilterBox))
        self.drill = Drill(self, lambda: self.goal_rows)

    def get_driver_class(self) -> type[Driver]:
        driver = super().get_driver_class()
        if driver.__name__ == "LinuxDriver":  # a terminal: the input thread that does not poll
            from refine_tui.driver import QuietLinuxDriver

            return QuietLinuxDriver
        return driver

    # --- layout --------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield StatusHeader(id="header")
        yield Label("Goals", id="crumbs")
        with Vertical(id="body"):
            yield TroubleNotice("", id="trouble")
            with ContentSwitcher(initial="goals", id="views"):
                yield KeyedTable(GOAL_COLUMNS, id="goals")
                yield RunTable(id="runs")
                yield AttemptTable(self.attempt_cells, id="attempts")
                yield WorkerTable(id="workers")
            yield Static("", id="rowline")
            yield DetailPane(self.find_log, id="detail", max_lines=5000)
        yield FilterBox(id="filter")
        yield Label("", id="why")
        yield KeyFooter(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        self.show_header()
        self.query_one("#goals", KeyedTable).focus()
        self.set_interval(1.0, self.tick)
        self.watch(self.query_one("#goals", KeyedTable), "scroll_y", self._scrolled, init=False)
        self.set_interval(OBSERVE_INTERVAL_S, self.observe_processes)
        self.follow_journal()

    def _scrolled(self) -> None:
        self.tick()  # rows scrolled into view show their elapsed time now, not within a second

    def on_resize(self, event: events.Resize) -> None:
        """Give Title, Note and an attempt's State the room a wide terminal has."""
        self.call_after_refresh(self.show_header)  # cut to the new width (updates: on change)
        widths = cells.widths_for(event.size.width)
        if widths == self.widths:
            return
        self.widths = widths
        goals = self.query_one("#goals", KeyedTable)
        attempts = self.query_one(AttemptTable)
        for key in ("title", "note"):
            goals.set_width(key, widths[key])
        for key in ("state", "worker"):
            attempts.set_width(key, widths[key])
        with self.batch_update():
            self.goal_list.redraw()
            attempts.redraw()

    def on_unmount(self) -> None:
        self.follower.stop()
        self.feed.close()
        self._writer.close()

    # --- live updates --------------------------------------------------------------------------

    @work(exclusive=True, group="live", exit_on_error=False)
    async def follow_journal(self) -> None:
        await self.follower.follow()

    def wake(self, full: bool = False) -> None:
        """Ask the live worker for a read now (``full``: reload the visible set)."""
        self.follower.wake(full)

    async def read_and_post(self, recheck: Iterable[str] = ()) -> None:
        await self.follower.read(recheck)

    def read_request(self, full: bool, recheck: tuple[str, ...] = ()) -> ReadRequest:
        """What the next read should read: the screen as it is now."""
        focused = self.goal_rows.get(self.drill.goal) if self.drill.goal else None
        history_run, history_after = self.query_one(DetailPane).history_wanted()
        return ReadRequest(
            full=full,
            filter=self.filter_text,
            view=self.view,
            goal_id=self.drill.goal,
            run_id=self.drill.run,
            history_run=history_run,
            history_after=history_after,
            recheck=recheck,
            goal_node=focused.node_id if focused else None,
            # The table's height, and the lines the filter box frees when it closes (held paint:
            # not laid out yet); a first screen read and added is its cost (≈ 0.5 ms a row).
            first_screen=max(self.query_one("#goals", KeyedTable).size.height, 20) + 4,
        )

    def on_journal_update(self, update: JournalUpdate) -> None:
        if not self.is_running:  # shutting down: the widgets are already gone
            return
        if self.paused:  # a read that began before `p` waits for the resume, in order
            self._held_updates.append(update)
            return
        self.set_trouble(None)
        self.snapshot = update.snapshot
        with self.batch_update():
            if update.full:
                self.goal_list.show({k: r for k, r in update.goals.items() if r is not None})
                self.release_paint()
            else:
                self.goal_list.apply(update.goals, self.matches_filter)
            if update.runs is not None:
                self.query_one(RunTable).show(update.runs)
            if update.attempts is not None:
                self.query_one(AttemptTable).show(update.attempts)
            if update.history:
                self.query_one(DetailPane).append_history(update.history)
        header = self._header(
            state=self.steady_state(),
            last_sequence=update.last_sequence,
            last_commit=update.last_commit,
            shown=len(self.goal_rows),
            total=update.total,
            detail="",
        )
        if header != self.header_state:  # a process recheck usually changes nothing
            self.header_state = header
            self.show_header()
        self.selection_changed()
        self.tell_detail(retarget=False)  # the attempt in the log pane may have ended
        self.launches.note(update)
        if update.painted is not None:
            self.call_after_refresh(update.painted.set)
        if update.full and self._reload_asked and not update.partial:
            self._reload_asked = False
            self.notify(
                f"reloaded from the journal: {len(self.goal_rows)} goals, "
                f"last commit seq {update.last_sequence}",
                timeout=2,
            )

    @property
    def goal_rows(self) -> dict[str, GoalRow]:
        """The listed Goals, in list order (some may not be in the table yet: ``filling``)."""
        return self.goal_list.rows

    @property
    def filling(self) -> bool:
        """Part of the list is still on its way into the table, a chunk per turn."""
        return self.goal_list.filling

    def on_journal_trouble(self, trouble: JournalTrouble) -> None:
        if not self.is_running:
            return
        self.release_paint()
        self.header_state = self._header(state=trouble.state, detail=trouble.detail)
        self.show_header()
        if trouble.state not in ("stale", "reconnecting"):
            self.set_trouble(trouble.detail)
        self.selection_changed()

    def set_trouble(self, text: str | None) -> None:
        self.query_one(TroubleNotice).show(text)
        self.query_one("#views").display = text is None

    def set_crumbs(self, crumbs: str) -> None:
        self.query_one("#crumbs", Label).update(fmt.literal(crumbs))  # the filter is typed text

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: float | None = None,
        markup: bool = False,
    ) -> None:
        """Every notification is literal: it embeds titles, reasons, refusals and sentences."""
        super().notify(
            fmt.visible(message),
            title=fmt.visible(title),
            severity=severity,
            timeout=timeout,
            markup=False,
        )

    def matches_filter(self, row: GoalRow) -> bool:
        return matches(row, self.filter_text)

    def steady_state(self) -> str:
        """The header's state while the journal reads fine: a snapshot never changes, so it
        is never called live."""
        if self.paused:
            return "paused"
        return "snapshot" if self.snapshot else "live"

    def _header(self, **changes: Any) -> HeaderState:
        return replace(self.header_state, filter=self.filter_text, **changes)

    def show_header(self) -> None:
        self.query_one(StatusHeader).show(self.header_state)

    # --- rows → cells --------------------------------------------------------------------------

    def goal_cells(self, r: GoalRow) -> tuple[Any, ...]:
        return cells.goal_cells(r, self.widths, self.clock)

    def attempt_cells(self, a: AttemptRow) -> tuple[Any, ...]:
        return cells.attempt_cells(a, self.widths, self.clock)

    def show_workers(self, workers: list[WorkerRow]) -> None:
        self.query_one(WorkerTable).show(workers)

    def tick(self) -> None:
        """Elapsed times tick once a second: only the visible elapsed cells whose text changed.

        The text shows seconds for ten minutes and minutes after that; a cell whose text did not
        change is not written, so nothing repaints. Rows scrolled into view catch up at once.
        """
        if self.paused or not self.is_running:  # a timer can fire while the widgets are removed
            return
        self.goal_list.tick(self.clock())
        if self.view == "attempts":
            self.query_one(AttemptTable).redraw(running_only=True)

    def watched_rows(self) -> list[GoalRow]:
        """The rows a liveness look covers: the visible Goals and the one the views focus on."""
        keys = set(self.query_one("#goals", KeyedTable).visible_keys())
        if self.drill.goal is not None:
            keys.add(self.drill.goal)
        return [r for k in keys if (r := self.goal_rows.get(k)) is not None]

    @work(exclusive=True, group="observe", exit_on_error=False)
    async def observe_processes(self) -> None:
        """Processes die without commits: check this node's, re-read only rows that changed."""
        if self.paused or not self.is_running or self.header_state.state != "live":
            return
        reader = self.live.reader
        if reader is None:
            return
        running = [r for r in self.watched_rows() if r.status == "running"]
        recheck = await asyncio.to_thread(reader.liveness_changed, running) if running else []
        if self.view == "attempts" and self.drill.goal:
            recheck.append(self.drill.goal)
        if recheck:
            await self.read_and_post(recheck=recheck)
        if self.view == "workers":
            with contextlib.suppress(RefineError, OSError):
                self.show_workers(await asyncio.to_thread(reader.worker_rows))

    # --- selection and views -------------------------------------------------------------------

    @property
    def view(self) -> str:
        """The view shown: goals, runs, attempts or workers."""
        return self.drill.view

    def selected_goal(self) -> GoalRow | None:
        return self.drill.selected_goal()

    @on(DataTable.RowHighlighted)
    def on_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if not self.is_running:  # shutting down: the tables may already be gone
            return
        self.selection_changed()
        if event.data_table.id in ("goals", "runs", "attempts"):
            self.tell_detail()

    def selection_changed(self) -> None:
        # Only when an action became (un)available: refresh_bindings() has every widget with
        # bindings looked at again (and Textual 8.2's Footer kept each key widget it recomposed).
        selection = self.selection()  # once: every action below is judged on it
        enabled = applies(selection)
        if enabled != self._enabled:
            self._enabled = enabled
            self.refresh_bindings()
        text = hint(selection)
        if text != self._why_text:  # a Label update relayouts the screen: only on change
            self._why_text = text
            self.query_one("#why", Label).update(fmt.literal(text))
        row = self.row_line()
        if row != self._row_text:
            self._row_text = row
            line = self.query_one("#rowline", Static)
            line.update(fmt.literal(row))  # journal text is literal
            line.display = bool(row)

    def row_line(self) -> str:
        """The selected row in words, whole (or why the Goals table is empty)."""
        words = self.drill.selected_words(self.node)
        return self.empty_line() if words is None else words

    def empty_line(self) -> str:
        """An empty Goals table says why, and what to do."""
        if self.view != "goals" or self.header_state.state not in ("live", "paused", "snapshot"):
            return ""
        return cells.empty_words(self.filter_text, self.journal_label)

    @on(DataTable.RowSelected)
    def on_row_selected(self, event: DataTable.RowSelected) -> None:
        key = event.row_key.value
        if event.data_table.id == "goals" and key:
            self.open_runs(key)
        elif event.data_table.id == "runs" and key:
            self.open_attempts(key)
        elif event.data_table.id == "attempts":
            self.action_log()

    def switch_view(self, view: str) -> None:
        self.drill.show(view)
        self.set_crumbs(self.crumbs())
        self.drill.table().focus()
        self.selection_changed()

    def crumbs(self) -> str:
        if self.view == "goals" and self.filter_text:
            return f"Goals — filter “{self.filter_text}”"
        return self.drill.crumbs(self.node)

    def open_runs(self, goal_id: str) -> None:
        self.drill.open_runs(goal_id)
        self.switch_view("runs")
        self.wake(full=True)

    def open_attempts(self, run_id: str) -> None:
        self.drill.open_attempts(run_id)
        self.switch_view("attempts")
        self.wake(full=True)

    async def action_back(self) -> None:
        self.go_back()

    def go_back(self) -> None:
        if self.query_one(FilterBox).is_open:  # escape in the filter clears it (k9s)
            self.set_filter("")
        elif self.detail is not None:
            self.close_detail()
        elif self.view == "attempts":
            self.switch_view("runs")
            self.drill.run = None
        elif self.view in ("runs", "workers"):
            self.drill.goal = self.drill.run = None
            self.switch_view("goals")

    def action_workers(self) -> None:
        if self.view == "workers":
            self.go_back()
            return
        self.switch_view("workers")
        self.observe_processes()

    # --- operator actions ------------------------------------------------------------------------

    def selection(self) -> Selection:
        return Selection(
            node=self.node,
            read_only=self.read_only or self.snapshot,  # nobody can write a snapshot
            journal_state=self.header_state.state,
            view=self.view,
            goal=self.selected_goal(),
            attempt=self.drill.selected_attempt(),
            run_id=self.drill.selected_run(),
        )

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in OPERATOR_ACTIONS or action in SELECTION_ACTIONS:
            return True if self.why_not(action) is None else None
        return True

    def why_not(self, action: str) -> str | None:
        """Why ``action`` does not apply to the selection now, in words (None: it does)."""
        reason = why(action, self.selection())
        return reason[1] if reason else None

    def refusal(self, action: str) -> str | None:
        """What a greyed action says when asked for anyway (None: it applies or is a view's)."""
        reason = self.why_not(action) if action in ACTION_TITLES else None
        return f"{ACTION_TITLES[action]}: {reason}" if reason is not None else None

    def on_key(self, event: events.Key) -> None:
        """A greyed key says why instead of doing nothing."""
        if self.screen is not self.screen_stack[0] or isinstance(self.focused, Input):
            return
        for binding in self.BINDINGS:
            if isinstance(binding, Binding) and event.key in binding.key.split(","):
                if (refusal := self.refusal(binding.action)) is not None:
                    self.notify(refusal, severity="warning")
                    event.stop()
                return

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        for title, help_text, action in SYSTEM_COMMANDS:
            yield SystemCommand(title, help_text, lambda a=action: self.run_checked(a))

    async def run_checked(self, action: str) -> None:
        if (refusal := self.refusal(action)) is not None:
            self.notify(refusal, severity="warning")
            return
        await self.run_action(action)

    def action_stop(self) -> None:
        goal = self.selected_goal()
        if goal is not None:
            self.run_worker(self.flows.stop(goal.goal_id), group="operator", exit_on_error=False)

    def action_cancel_goal(self) -> None:
        goal = self.selected_goal()
        if goal is not None:
            self.run_worker(self.flows.cancel(goal.goal_id), group="operator", exit_on_error=False)

    def action_cleanup(self) -> None:
        target = self.drill.selected_attempt()
        if target is not None:
            self.run_worker(self.flows.cleanup(*target), group="operator", exit_on_error=False)

    def action_release(self) -> None:
        goal = self.selected_goal()
        if goal is not None:
            self.run_worker(self.flows.release(goal), group="operator", exit_on_error=False)

    # --- the detail pane -------------------------------------------------------------------------

    @property
    def detail(self) -> str | None:
        """What the detail pane shows: None, "history" or "log"."""
        return self.query_one(DetailPane).mode if self.is_running else None

    def action_history(self) -> None:
        self.toggle_detail("history")

    def action_log(self) -> None:
        self.toggle_detail("log")

    def toggle_detail(self, mode: str) -> None:
        pane = self.query_one(DetailPane)
        if pane.mode == mode:
            self.close_detail()
            return
        pane.open(mode, self.detail_target())
        self.add_class("with-detail")
        pane.focus()  # the keys scroll it; tab goes back to the table

    def close_detail(self) -> None:
        self.query_one(DetailPane).close()
        self.remove_class("with-detail")
        self.drill.table().focus()

    def tell_detail(self, retarget: bool = True) -> None:
        """Tell an open detail pane the selection (or only whether its attempt still runs)."""
        pane = self.query_one(DetailPane)
        if pane.mode is not None:
            pane.post_message(DetailPane.Selected(self.detail_target(), retarget))

    def detail_target(self) -> DetailTarget:
        return self.drill.detail_target(self.node)

    def find_log(self, run_id: str, epoch: int, node_id: str) -> str | None:
        """(thread) The attempt's local log file (None: it ran on another node)."""
        reader = self.live.reader
        if reader is None:
            raise StorageError("the journal is not read yet")
        return reader.log_path(run_id, epoch, node_id)

    def on_detail_pane_history_wanted(self) -> None:
        self.wake(full=True)

    # --- actions: view -------------------------------------------------------------------------

    def action_filter(self) -> None:
        self.query_one(FilterBox).open(self.filter_text)

    @on(Input.Submitted, "#filter")
    def apply_filter(self, event: Input.Submitted) -> None:
        event.stop()
        self.set_filter(event.value)

    def set_filter(self, text: str) -> None:
        self.filter_text = text.strip()
        self.goal_list.stop()  # a newer filter: the older list's remaining chunks would be stale
        self.hold_paint()
        # The read goes first: it is asked for (in the read task) after the view below is set,
        # and starts before the focus change's messages are handled, beside them.
        self.wake(full=True)
        # The box closes a frame after the new list is painted (FilterBox says why).
        self.query_one(FilterBox).close_later()
        if self.view != "goals":
            self.drill.goal = self.drill.run = None
            self.switch_view("goals")
        self.set_crumbs(self.crumbs())
        self.query_one("#goals", KeyedTable).focus()

    def hold_paint(self) -> None:
        """Paint nothing until the new list is shown (or HOLD_PAINT_S passed): see PaintHold."""
        self.paint.hold(HOLD_PAINT_S)

    def release_paint(self) -> None:
        self.paint.release()

    def action_pause(self) -> None:
        self.paused = not self.paused
        self.query_one(DetailPane).paused = self.paused
        self.header_state = self._header(state=self.steady_state())
        self.show_header()
        if not self.paused:
            held, self._held_updates = self._held_updates, []
            for update in held:
                self.on_journal_update(update)
            self.wake()

    def action_refresh(self) -> None:
        self._reload_asked = True  # said once the reload is on screen (on_journal_update)
        self.wake(full=True)

    def action_help(self) -> None:
        self.push_screen(HelpScreen())
