"""The refine dashboard: Goals → Runs → Attempts, live from the journal, with Stop/Cancel/Cleanup.

``RefineApp`` is the wiring: the journal (one read feed, one writer), the follower that reads
what changed (``follow``: it waits on the journal's change source, reads in a thread with
``live`` and posts one ``JournalUpdate``), the operator flows (``actions``) and the dashboard
screen (``dashboard``), which hands each update down to the views (``views``) that own their
tables, rows, selection and their part of the next read.
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from textual import work
from textual.app import App, SystemCommand
from textual.driver import Driver
from textual.screen import ModalScreen, Screen

from refine_tui import format as fmt
from refine_tui.actions import OperatorFlows
from refine_tui.dashboard import Dashboard
from refine_tui.follow import JournalFollower
from refine_tui.keys import SYSTEM_COMMANDS
from refine_tui.live import LiveReader
from refine_tui.messages import JournalTrouble, JournalUpdate
from refine_tui.rows import GoalRow
from refine_tui.toasts import ToastHold
from refine_tui.widgets.status_header import HeaderState
from store.journal.api import JournalHandle
from store.journal.locations import resolve_location
from store.journal.url import login_role, redact
from store.journal.watch import ChangeFeed
from store.ops.operator import default_node, default_operator

# A new filter's list usually arrives in 20–60 ms: paint nothing meanwhile, at most this long.
HOLD_PAINT_S = 0.5


# Young collections every 5,000 allocations while the dashboard runs, not CPython's 700: under a
# stream of commits each frame makes thousands of short-lived containers (Textual's strips and
# their caches). Counted in the fan-out (20 s at 50 commits a second): 1,378 collections, 0.81 s
# of CPU and 12 full ones of ≈ 20 ms each at 700; 95, 0.32 s and one at 5,000.
YOUNG_COLLECTIONS_EVERY = 5000


class RefineApp(App[None]):
    """The dashboard. ``RefineApp(journal=PATH, node=NAME, read_only=False)``; ``quiet``:
    alerts notify without ringing the terminal bell; ``pulses=False``: no pulses, nor their
    reads (``tui --no-pulses``: a small terminal's line, and the benches' other arm)."""

    CSS_PATH = "app.tcss"
    TITLE = "refine"

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
        quiet: bool = False,
        pulses: bool = True,
    ) -> None:
        super().__init__()
        self._gc_threshold: tuple[int, ...] | None = None  # the process's own, while mounted
        self._toasts = ToastHold()  # what waits for a dialog to close
        self.journal_path = location = resolve_location(journal)  # once: watches derive from it
        self.journal_label = label = redact(journal)  # a URL without its password
        self.node = node or default_node()
        self.read_only = read_only
        self.operator = operator or default_operator()
        self.feed = ChangeFeed(location)
        self.live = live = LiveReader(
            self.feed, self.node, pulses=pulses
        )  # the read thread's own state
        self._writer = JournalHandle(location)
        flows = OperatorFlows(
            self,
            node=self.node,
            operator=self.operator,
            grace_s=grace_s,
            clock=clock,
            writer=self._writer,
            reading=lambda: self.feed.journal,
            reader=lambda: live.reader,
        )
        self.follower = JournalFollower(
            self, live, location=location, label=label, watch_files=watch
        )
        self.dashboard = Dashboard(
            HeaderState(label, self.node, read_only, role=login_role(journal)),
            follower=self.follower,
            live=live,
            flows=flows,
            clock=clock,
            hold_paint_s=lambda: HOLD_PAINT_S,  # read when held (a test lengthens it)
            quiet=quiet,  # alerts without the terminal bell
        )

    def get_default_screen(self) -> Screen[Any]:
        return self.dashboard

    def get_driver_class(self) -> type[Driver]:
        driver = super().get_driver_class()
        if driver.__name__ == "LinuxDriver":  # a terminal: the input thread that does not poll
            from refine_tui.driver import QuietLinuxDriver

            return QuietLinuxDriver
        return driver

    def on_mount(self) -> None:
        self._gc_threshold = threshold = gc.get_threshold()
        gc.set_threshold(YOUNG_COLLECTIONS_EVERY, *threshold[1:])

    def on_dashboard_ready(self) -> None:
        self.follow_journal()

    def on_unmount(self) -> None:
        self.follower.stop()
        self.feed.close()
        self._writer.close()
        if self._gc_threshold is not None:
            gc.set_threshold(*self._gc_threshold)

    # --- the journal ---------------------------------------------------------------------------

    @work(exclusive=True, group="live", exit_on_error=False)
    async def follow_journal(self) -> None:
        await self.follower.follow()

    def wake(self, full: bool = False) -> None:
        """Ask the live worker for a read now (``full``: reload the visible set)."""
        self.follower.wake(full)

    def on_journal_update(self, update: JournalUpdate) -> None:
        if self.is_running:  # shutting down: the widgets are already gone
            self.dashboard.take(update)

    def on_journal_trouble(self, trouble: JournalTrouble) -> None:
        if self.is_running:
            self.dashboard.trouble(trouble)

    # --- what the operator sees ----------------------------------------------------------------

    def notify(self, message: str | Sequence[str], *, title: str = "", **options: Any) -> None:
        """Every notification is literal: it embeds titles, reasons, refusals and sentences
        (a line break inside one is shown as ``\\n``; ``message`` as lines keeps its own)."""
        options["markup"] = False
        if isinstance(self.screen, ModalScreen):  # never over a dialog: shown when it closes
            self._toasts.hold((message, title, options))
            return
        self.dashboard.place_toasts()
        lines = [message] if isinstance(message, str) else message
        text = "\n".join(fmt.visible(line) for line in lines)
        super().notify(text, title=fmt.visible(title), **options)
        timeout = options.get("timeout") or self.NOTIFICATION_TIMEOUT
        self._toasts.shown((message, title, options), time.monotonic(), timeout)

    def on_dashboard_suspended(self) -> None:
        """A dialog opened: what still shows would cover it, so it waits for it to close."""
        if isinstance(self.screen, ModalScreen) and self._toasts.dialog_opened(time.monotonic()):
            self.clear_notifications()

    def on_dashboard_resumed(self) -> None:
        """A dialog closed: what was said meanwhile (or hidden by it) is shown now."""
        for message, title, options in self._toasts.dialog_closed():
            self.notify(message, title=title, **options)

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        for title, help_text, action in SYSTEM_COMMANDS:
            yield SystemCommand(title, help_text, lambda a=action: self.dashboard.run_checked(a))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Whether a key's action applies now (None: shown greyed), as the footer shows it."""
        return self.dashboard.check_action(action, parameters)

    @property
    def header_state(self) -> HeaderState:
        """What the header says: the journal's state, its last commit, the Goals shown."""
        return self.dashboard.header.state

    @property
    def goal_rows(self) -> Mapping[str, GoalRow]:
        """The listed Goals, in list order (some may not be in the table yet: still filling)."""
        return self.dashboard.goals.listed

    def selected_goal(self) -> GoalRow | None:
        return self.dashboard.stack.selected_goal()
