"""The dashboard's screen: the views and what is around them, the keys, and what they do.

The views (``refine_tui.views``) own their tables, rows, selection, cells and their part of the
next read, which they push to the follower. The screen hands each journal update down to them
as slices (``take``), hears selection and the views' moves as messages, and then says what
applies (``actions``: the footer's keys, the hint line), shows the header, the crumbs and the
selected row in words; it runs the operator flows and the detail pane, and pauses, filters and
reloads. ``RefineApp`` composes it with the journal and the follower (``refine_tui.app``).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from dataclasses import replace
from typing import Any, ClassVar

from textual import events, on, work
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message
from textual.reactive import var
from textual.screen import Screen
from textual.widgets import DataTable, Input, Label

from refine_tui import cells, toasts
from refine_tui import format as fmt
from refine_tui.actions import OperatorFlows
from refine_tui.alerts import Alert, Alerts, Pace, grouped
from refine_tui.detail import DetailPane
from refine_tui.follow import JournalFollower
from refine_tui.key_hold import KeyHold, type_into_focused
from refine_tui.keys import (
    BULK,
    EAGER,
    FOOTER_KEEPS,
    KEYS,
    Selection,
    applies,
    check,
    hint,
    key_action,
    key_refusal,
    refusal,
    store_answers,
    why,
)
from refine_tui.live import LiveReader
from refine_tui.messages import JournalTrouble, JournalUpdate
from refine_tui.paint_hold import PaintHold
from refine_tui.screens.help import HelpScreen
from refine_tui.screens.timeline import TimelineScreen
from refine_tui.textual_private import crop_renders
from refine_tui.views import (
    AttemptsView,
    GoalsView,
    NodesView,
    RunsView,
    ViewStack,
    WorkersView,
)
from refine_tui.widgets.filter_box import FilterBox
from refine_tui.widgets.key_footer import KeyFooter
from refine_tui.widgets.pulses import Pulses as PulsesLine
from refine_tui.widgets.status_header import HeaderState, StatusHeader
from refine_tui.widgets.text_line import TextLine
from refine_tui.widgets.trouble import TroubleNotice
from store.ops.pulses import Pulses

OBSERVE_INTERVAL_S = 5.0  # CPU/memory/liveness of this node's processes (they change silently)
PULSES_MIN_HEIGHT = 20  # a shorter terminal has no line to spare for the pulses
PRESENCE_INTERVAL_S = 2.0  # the Nodes view reads presence again (beats commit nothing)


class Dashboard(Screen[None]):
    """Goals → Runs → Attempts (and Workers), the header, the detail pane and the keys."""

    BINDINGS: ClassVar = KEYS
    paused: var[bool] = var(False, init=False)
    """Live updates held (`p`): what is read meanwhile is shown on resume, in order."""
    snapshot: var[bool] = var(False, init=False)
    """The journal read is a frozen snapshot (a read-only folder): never live, never written."""

    def __init__(
        self,
        header: HeaderState,
        *,
        follower: JournalFollower,
        live: LiveReader,
        flows: OperatorFlows,
        clock: Callable[[], float],
        hold_paint_s: Callable[[], float],
        quiet: bool = False,
    ) -> None:
        super().__init__()
        crop_renders(self)  # a tick's frame renders the lines it changes, not every widget
        self.alerts, self.quiet = Alerts(), quiet  # quiet: alerts ring no bell
        self.node, self.read_only = header.node, header.read_only
        self.journal_label = header.journal
        self.follower, self.live, self.flows = follower, live, flows
        self.held = KeyHold()  # keys typed while an action prepares its dialog
        self.clock = clock  # the pulses' minutes
        self.hold_paint_s = hold_paint_s  # how long a new filter's list may hold the paint
        self.header = StatusHeader(header, id="header")
        self.goals = GoalsView(follower, clock, own_node=self.node)
        self.attempts = AttemptsView(follower, clock)
        runs, workers = RunsView(follower), WorkersView(follower)
        self.nodes = NodesView(follower)
        self.stack = ViewStack(self.goals, runs, self.attempts, workers, self.nodes, node=self.node)
        self.detail_pane = DetailPane(live.find_log, follower, id="detail", max_lines=5000)
        self.filter_box = FilterBox(id="filter")
        self.row_line, self.hint_line = TextLine(id="rowline", hide_empty=True), TextLine(id="why")
        self.pulses_line = PulsesLine(id="pulses")
        self._pulses: Pulses | None = None  # the last read's counts, drawn by the tick
        box = self.filter_box
        self.paint = PaintHold(self, lambda: box if box.is_attached else None)
        self._enabled: tuple[bool, ...] = ()  # which actions the footer last showed enabled
        self._reload_asked = False  # `r` pressed: confirm when the full reload is shown
        self._held_updates: list[JournalUpdate] = []  # read while paused, shown on resume
        self._alerts_due: list[Alert] = []  # raised, to be said once gathered (``alert``)
        self._alerts_pace = Pace()
        self.timeline: TimelineScreen | None = None  # the attempt timeline, while shown

    def compose(self) -> ComposeResult:
        yield self.header
        yield Label("Goals", id="crumbs")
        with Vertical(id="body"):
            yield TroubleNotice("", id="trouble")
            yield self.pulses_line
            yield self.stack
            yield self.row_line
            yield self.detail_pane
        yield self.filter_box
        yield self.hint_line
        yield KeyFooter(keeps=FOOTER_KEEPS, compact=True, show_command_palette=False)

    class Ready(Message):
        """The screen and its tables are mounted: updates can come."""

    class Resumed(Message):
        """The screen is shown again (a dialog closed): held notifications can be shown."""

    def on_screen_resume(self) -> None:
        self.post_message(self.Resumed())

    def place_toasts(self) -> None:
        """Notifications over the table's rows (``toasts.place``; the CSS puts them top right)."""
        racks = self.query("#textual-toastrack")  # none when notifications are off (tests)
        if racks and self.is_mounted:
            footer = self.query_one(KeyFooter).region
            toasts.place(racks.first(), self.stack.region, self.row_line, footer)

    def on_mount(self) -> None:
        self.header.show()
        self.goals.focus()
        self.set_interval(1.0, self.tick)
        self.set_interval(OBSERVE_INTERVAL_S, self.observe_processes)
        self.set_interval(PRESENCE_INTERVAL_S, self.read_presence)
        self.post_message(self.Ready())

    def on_resize(self, event: events.Resize) -> None:
        """Give Title, Note and an attempt's State the room a wide terminal has."""
        self.app.call_after_refresh(self.header.show)  # cut to the new width (else on change)
        self.app.call_after_refresh(self.place_toasts)
        self.draw_pulses()  # a short terminal has no line for them: hidden now, not at the tick
        self.selection_changed()  # the hint line's entries, as many as the width holds
        widths = cells.widths_for(event.size.width)
        with self.app.batch_update():
            self.goals.set_widths(widths)
            self.attempts.set_widths(widths)
            self.stack.workers_view.set_widths(widths)

    # --- the journal, down to the views --------------------------------------------------------

    def take(self, update: JournalUpdate) -> None:
        """A journal update: its slices to the views, then the header and the selection."""
        if self.paused:  # a read that began before `p` waits for the resume, in order
            self._held_updates.append(update)
            return
        self.set_trouble(None)
        self.snapshot = update.snapshot
        with self.app.batch_update():
            self.goals.take(update.goals, update.full)
            if update.node_presence is not None:
                self.goals.set_presence(update.node_presence)
            if update.full:
                self.paint.release()
            if update.runs is not None:
                self.stack.runs.show(update.runs)
            if update.attempts is not None:
                self.attempts.show(update.attempts, update.presence)
            if update.pulses is not None:
                self._pulses = update.pulses  # drawn by the next tick: one repaint a second
            if update.nodes is not None:
                self.nodes.show(update.nodes)
            if update.history:
                self.detail_pane.append_history(update.history)
            if update.timeline is not None and self.timeline is not None:
                self.timeline.show(*update.timeline)
        seq, shown = update.last_sequence, len(self.goals.listed)
        self.show_header(
            state=self.steady_state(),
            last_sequence=seq,
            last_commit=update.last_commit,
            shown=shown,
            total=update.total,
            detail="",
        )
        self.selection_changed()
        said = self.alerts.take(update.goals, update.full)
        if update.node_presence is not None:
            said += self.alerts.take_nodes(update.node_presence, update.full)
        self.alert(said)
        self.tell_detail(retarget=False)  # the attempt in the log pane may have ended
        if update.painted is not None:
            self.app.call_after_refresh(update.painted.set)
        if update.full and self._reload_asked and not update.partial:
            self._reload_asked = False
            self.app.notify(
                f"reloaded from the journal: {shown} goals, last commit seq {seq}", timeout=2
            )

    def trouble(self, trouble: JournalTrouble) -> None:
        """The journal cannot be read (or is read again after a lost connection)."""
        self.paint.release()
        self.show_header(state=trouble.state, detail=trouble.detail)
        if trouble.state not in ("stale", "reconnecting"):
            self.set_trouble(trouble.detail)
        self.selection_changed()

    @work(exclusive=True, group="observe", exit_on_error=False)
    async def observe_processes(self) -> None:
        """Processes die without commits: check this node's, re-read only rows that changed."""
        reader = self.live.reader
        if self.paused or not self.is_running or self.header.state.state != "live" or not reader:
            return
        if recheck := await self.stack.rechecks(reader):
            await self.follower.read(recheck)
        if self.stack.view == "workers":
            await self.stack.workers_view.look(reader)

    def tick(self) -> None:
        """Elapsed times tick once a second (only cells whose text changed are written)."""
        if self.paused or not self.is_running or not self.app.is_running:  # closing
            return
        self.goals.tick()
        self.draw_pulses()
        if self.stack.view == "attempts":
            self.attempts.tick()

    def draw_pulses(self) -> None:
        """The pulses in the Goals view, if the terminal has a line for them (their minute
        moves on with the clock: only a changed sparkline repaints)."""
        shown = self.stack.view == "goals" and self.app.size.height >= PULSES_MIN_HEIGHT
        shown = shown and self.live.pulsing  # none without their reads (`tui --no-pulses`)
        if self.pulses_line.display != shown:
            self.pulses_line.display = shown
        if shown and self._pulses is not None:
            pulses = self._pulses
            self.pulses_line.show(pulses.series(self.clock()), narrowed=pulses.narrowed)

    # --- around the views ----------------------------------------------------------------------

    def steady_state(self) -> str:
        """The header's state while the journal reads fine (a snapshot is never called live)."""
        if self.paused:
            return "paused"
        return "snapshot" if self.snapshot else "live"

    def show_header(self, **changes: Any) -> None:
        """The header with ``changes`` and the filter (repainted only if that changes it)."""
        self.header.show(filter=self.goals.filter, **changes)

    def watch_snapshot(self) -> None:
        self.show_header(state=self.steady_state())

    def set_trouble(self, text: str | None) -> None:
        self.query_one(TroubleNotice).show(text)
        if self.stack.display == (text is None):
            return
        self.stack.display = text is None
        if text is None and self.focused is None:  # the hidden table lost it: keys work again
            self.stack.shown.focus()

    @on(DataTable.RowHighlighted)
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        if not self.app.is_running:  # shutting down: the tables may already be gone
            return
        self.selection_changed()
        if event.data_table.id in ("goals", "runs", "attempts"):
            self.tell_detail()

    def on_view_stack_moved(self) -> None:
        self.set_crumbs()
        self.draw_pulses()  # shown in the Goals view only: hidden at once, not at the next tick
        self.selection_changed()

    def set_crumbs(self) -> None:
        self.query_one("#crumbs", Label).update(fmt.literal(self.stack.crumbs()))  # typed text

    def selection_changed(self) -> None:
        # Only when an action became (un)available: refresh_bindings() has every widget with
        # bindings looked at again (and Textual 8.2's Footer kept each key widget it recomposed).
        selection = self.selection()  # once: every action below is judged on it
        enabled = (*applies(selection), self.goes_back(), self.stack.shown.selected_key is None)
        if enabled != self._enabled:
            self._enabled = enabled
            self.app.refresh_bindings()
        self.hint_line.say(hint(selection, self.app.size.width - 2))  # its padding
        words = self.stack.words()  # the selected row, whole (or why the Goals table is empty)
        self.row_line.say(self.empty_line() if words is None else words)

    def empty_line(self) -> str:
        """An empty Goals table says why, and what to do."""
        journal = self.header.state.state
        if self.stack.view != "goals" or journal not in ("live", "paused", "snapshot"):
            return ""
        return cells.empty_words(self.goals.filter, self.journal_label)

    # --- operator actions ----------------------------------------------------------------------

    def selection(self) -> Selection:
        selection = self.stack.selection(
            read_only=self.read_only or self.snapshot,  # nobody can write a snapshot
            journal_state=self.header.state.state,
        )
        if not self.goals.marked:
            return selection
        return replace(
            selection, marked=len(self.goals.marked), hidden_marks=self.goals.hidden_marks()
        )

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "back":  # shown only where escape goes somewhere
            return self.goes_back()
        if action in EAGER and (isinstance(self.focused, Input) or self.held.active):
            return False  # a letter typed in the filter box is text; a dialog is on its way
        return check(action, self.selection())

    def why_not(self, action: str) -> str | None:
        """Why ``action`` does not apply to the selection now, in words (None: it does)."""
        reason = why(action, self.selection())
        return reason[1] if reason else None

    def on_key(self, event: events.Key) -> None:
        """A greyed key says why instead of doing nothing (or, greyed as advice, asks the
        store, which answers: Stop on a `needs cleanup` row). While an action prepares its
        dialog, keys are held for it (``KeyHold``)."""
        if self.held.take(event):
            event.stop()
            event.prevent_default()
            return
        if isinstance(self.focused, Input):
            return
        if (text := key_refusal(event.key, self.selection)) is not None:
            self.app.notify(text, severity="warning")
            event.stop()
        elif (action := key_action(event.key)) and store_answers(action, self.selection()):
            self.act(action)
            event.stop()

    async def run_checked(self, action: str) -> None:
        """An action from the command palette: greyed ones say why instead."""
        if (text := refusal(action, self.selection())) is not None:
            self.app.notify(text, severity="warning")
            return
        await self.run_action(action)

    def action_stop(self) -> None:
        self.act("stop")

    def action_cancel_goal(self) -> None:
        self.act("cancel_goal")

    def action_cleanup(self) -> None:
        self.act("cleanup")

    def action_release(self) -> None:
        self.act("release")

    def action_reassign(self) -> None:
        self.act("reassign")

    def act(self, action: str) -> None:
        """An operator flow on the selection, as a worker (its modals wait inside it)."""
        selection = self.selection()
        if selection.bulk and action in BULK:
            flow: Coroutine[Any, Any, object] | None = self.act_on_marks(BULK[action])
        else:
            flow = self.flows.flow(action, selection)
        if flow is not None:
            self.held.start()
            self.app.run_worker(self.holding_keys(flow), group="operator", exit_on_error=False)

    async def holding_keys(self, flow: Coroutine[Any, Any, object]) -> None:
        """Run ``flow``, the keys typed before its dialog shows held (``KeyHold``)."""
        try:
            await flow
        finally:
            self.held.stop()

    class Suspended(Message):
        """Another screen (a dialog) is shown over this one: the toasts showing are held."""

    def on_screen_suspend(self) -> None:
        self.post_message(self.Suspended())
        if held := self.held.stop():  # the dialog is up: once focused, its field gets the text
            self.app.call_after_refresh(type_into_focused, self.app, held)

    # --- alerts (DESIGN §16) -------------------------------------------------------------------

    def alert(self, said: list[Alert]) -> None:
        """Gathered as ``Pace`` says (a burst spans updates; a trickle is paced), then said."""
        if said and not self._alerts_due:
            self.set_timer(self._alerts_pace.wait(), self.say_alerts)
        self._alerts_due += said

    def say_alerts(self) -> None:
        """Each kind's alerts (``grouped``), with one ring of the bell (unless quiet)."""
        said, self._alerts_due = self._alerts_due, []
        self._alerts_pace.said()
        for words in grouped(said):
            self.app.notify(words, title="Alert", severity="warning", timeout=15)
        if said and not self.quiet:
            self.app.bell()

    # --- marks (DESIGN §15) --------------------------------------------------------------------

    async def act_on_marks(self, action: str) -> None:
        """A batch on the marked Goals; the marks are cleared once it ran."""
        if await self.flows.bulk(action, list(self.goals.marked)):
            self.action_unmark()

    def action_mark(self) -> None:
        self.goals.toggle_mark()
        self.selection_changed()

    def action_mark_all(self) -> None:
        self.goals.mark_listed()
        self.selection_changed()

    def action_unmark(self) -> None:
        self.goals.clear_marks()
        self.selection_changed()

    # --- the detail pane -----------------------------------------------------------------------

    @property
    def detail(self) -> str | None:
        """What the detail pane shows: None, "history" or "log"."""
        return self.detail_pane.mode if self.app.is_running else None

    def action_history(self) -> None:
        self.toggle_detail("history")

    def action_log(self) -> None:
        self.toggle_detail("log")

    def on_attempts_view_opened(self) -> None:  # enter on an attempt
        self.action_log()

    def toggle_detail(self, mode: str) -> None:
        if self.detail_pane.toggle(mode, self.stack.detail_target()):
            self.app.add_class("with-detail")
            self.selection_changed()  # escape closes it now
        else:
            self.close_detail()

    def close_detail(self) -> None:
        self.detail_pane.close()
        self.app.remove_class("with-detail")
        self.stack.shown.focus()
        self.selection_changed()

    def tell_detail(self, retarget: bool = True) -> None:
        """Tell an open detail pane the selection (or only whether its attempt still runs)."""
        if self.detail_pane.mode is not None:
            target = self.stack.detail_target()
            self.detail_pane.post_message(DetailPane.Selected(target, retarget))

    # --- the view: filter, back, workers, pause, reload ----------------------------------------

    def action_filter(self) -> None:
        if self.stack.view == "nodes":  # a fleet's hundred rows: `/silent` finds the quiet ones
            self.filter_box.open(self.nodes.filter, "nodes")
        else:
            self.filter_box.open(self.goals.filter)

    @on(Input.Submitted, "#filter")
    def _filter_entered(self, event: Input.Submitted) -> None:
        event.stop()
        self.filter_by(event.value)

    def filter_by(self, text: str) -> None:
        if self.filter_box.subject == "goals":  # the box filters what it was opened on
            self.set_filter(text)
        else:
            self.filter_nodes(text)

    def filter_nodes(self, text: str) -> None:
        self.nodes.set_filter(text)  # its rows are at hand: shown now, the box closed now
        self.filter_box.close()
        self.set_crumbs()
        self.selection_changed()
        self.nodes.focus()

    def set_filter(self, text: str) -> None:
        self.goals.filter = text.strip()  # the view stops the older list and wants the new one
        self.paint.hold(self.hold_paint_s())  # nothing painted until the new list is shown
        # The read goes first: it is asked for (in the read task) after the view below is set,
        # and starts before the focus change's messages are handled, beside them.
        self.follower.wake(full=True)
        self.filter_box.close_later()  # a frame after the new list is painted (FilterBox: why)
        if self.stack.view != "goals":
            self.stack.home()
        self.set_crumbs()
        self.goals.focus()

    def goes_back(self) -> bool:
        """Whether escape does something: closes the box or the pane, goes up, clears a filter."""
        return (
            self.filter_box.is_open
            or self.detail is not None
            or self.stack.view != "goals"
            or bool(self.goals.filter)
        )

    def action_back(self) -> None:
        if self.filter_box.is_open:  # escape in the filter clears it (k9s)
            self.filter_by("")
        elif self.detail is not None:
            self.close_detail()
        elif self.stack.view == "nodes" and self.nodes.filter:
            self.filter_nodes("")
        elif self.stack.view == "goals" and self.goals.filter:  # the filtered list: the whole
            self.set_filter("")
        else:
            self.stack.back()

    def action_workers(self) -> None:
        if self.stack.view == "workers":
            self.stack.back()
            return
        self.stack.show(self.stack.workers_view)
        self.observe_processes()

    # --- the Nodes view (its own block: other views' keys land beside it) -----------------------

    def action_nodes(self) -> None:
        if self.stack.view == "nodes":
            self.stack.back()
            return
        self.stack.show(self.nodes)
        self.follower.wake()  # its rows come with the next read

    def read_presence(self) -> None:
        """Presence changes without a commit: the Nodes view, while shown, reads it again, and
        every few seconds a read looks for nodes gone silent (alerts)."""
        if self.paused or not self.is_running:
            return
        if self.stack.view == "nodes" or self.live.presence_due():
            self.follower.wake()

    # --- the attempt timeline (DESIGN §17) -------------------------------------------------------

    def action_timeline(self) -> None:
        """The selected Goal's attempts on a time axis (a Run's only, from a Run or Attempt)."""
        goal = self.stack.selected_goal()
        if goal is None:
            return
        run_id = self.stack.selected_run() if self.stack.view in ("runs", "attempts") else None
        self.timeline = TimelineScreen(
            goal.goal_id, run_id, follower=self.follower, clock=self.clock
        )
        self.app.push_screen(self.timeline, callback=self._timeline_closed)

    def _timeline_closed(self, _: None) -> None:
        self.timeline = None

    def action_pause(self) -> None:
        self.paused = not self.paused

    def watch_paused(self, paused: bool) -> None:
        self.follower.paused = self.goals.paused = self.detail_pane.paused = paused
        self.show_header(state=self.steady_state())
        if not paused:
            held, self._held_updates = self._held_updates, []
            for update in held:
                self.take(update)
            self.follower.wake()

    def action_refresh(self) -> None:
        self._reload_asked = True  # said once the reload is on screen (take)
        self.follower.wake(full=True)

    def action_help(self) -> None:
        self.app.push_screen(HelpScreen())
