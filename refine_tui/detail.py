"""The detail pane: the selected Run's event history, or the selected Attempt's log, followed live.

A widget that owns its state (what it shows, how far it has read) and its log timer; it hears
about the selection by message (``DetailPane.Selected``). History arrives with the journal
updates (``append_history``); which Run's history it wants, and from where, it tells the
follower (its part of the read, ``follower.wants``), and asks for a full read when it needs a
history from the start. A local log file is followed by polling its size; where the file is
comes from ``find_log``, run in a thread.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from textual import work
from textual.message import Message

from refine_tui import format as fmt
from refine_tui.follow import JournalFollower
from refine_tui.visible import as_printed
from refine_tui.widgets.follow_log import FollowLog
from store.errors import RefineError
from store.journal.api import Event

LOG_POLL_S = 0.5
LOG_WINDOW = 256 * 1024  # at most this much of a log is read per look


@dataclass(frozen=True)
class DetailTarget:
    """The selection as the pane needs it."""

    run_id: str | None  # the selected Run (history)
    attempt: tuple[str, int] | None  # the selected Attempt, (run_id, epoch) (log)
    node_id: str  # the node the selected Goal runs on (where its logs are)
    running: tuple[str | None, int | None] | None  # the Goal's (run_id, running epoch)


FindLog = Callable[[str, int, str], "str | None"]  # (run_id, epoch, node) → local log file


class DetailPane(FollowLog):
    """Open on history or log, retarget with the selection, close."""

    @dataclass
    class Selected(Message, bubble=False):
        """The selection changed (``retarget``) or only what it says did (liveness)."""

        target: DetailTarget
        retarget: bool = True

    def __init__(self, find_log: FindLog, follower: JournalFollower, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.find_log = find_log
        self.follower = follower
        self.mode: str | None = None  # None | "history" | "log"
        self.paused = False  # the dashboard is paused: the log is not followed meanwhile
        self.run_id: str | None = None
        self.epoch: int | None = None
        self.history_after = 0
        self._target: DetailTarget | None = None
        self._log_file: str | None = None
        self._log_offset = 0

    def on_mount(self) -> None:
        super().on_mount()
        self.set_interval(LOG_POLL_S, self.follow_log_file)

    # --- opening, retargeting, closing ---------------------------------------------------------

    def open(self, mode: str, target: DetailTarget) -> None:
        self.mode, self._target = mode, target
        self.display = True
        self.retarget(force=True)
        self._want()

    def toggle(self, mode: str, target: DetailTarget) -> bool:
        """Open on ``mode`` and take the focus (True), or close if it shows ``mode`` (False)."""
        if self.mode == mode:
            self.close()
            return False
        self.open(mode, target)
        self.focus()  # the keys scroll it; tab goes back to the table
        return True

    def close(self) -> None:
        self.mode = self.run_id = self._log_file = None
        self.display = False
        self._want()

    def on_detail_pane_selected(self, message: Selected) -> None:
        self._target = message.target
        if message.retarget:
            self.retarget()
            self._want()
        self.show_liveness()

    def history_wanted(self) -> tuple[str | None, int]:
        """(run_id, last sequence shown) while the pane shows a history, else (None, 0)."""
        return (self.run_id, self.history_after) if self.mode == "history" else (None, 0)

    def _want(self) -> None:
        """Tell the follower what history to read next (this pane's part of the read)."""
        wants = self.follower.wants
        wants.history_run, wants.history_after = self.history_wanted()

    def retarget(self, force: bool = False) -> None:
        """Point the pane at the selected Run (history) or Attempt (log)."""
        target = self._target
        if target is None:
            return
        if self.mode == "history":
            run_id = target.run_id
            if run_id == self.run_id and not force:
                return
            self.run_id, self.history_after = run_id, 0
            self.clear()
            self.border_title = f"History of {run_id}" if run_id else "History"
            if run_id is None:
                self.write_line("No run selected.")
                return
            self._want()
            self.follower.wake(full=True)  # the history from its start
        elif self.mode == "log":
            key = f"{target.attempt[0]}/{target.attempt[1]}" if target.attempt else None
            if key == self._log_key() and not force:
                return
            self.run_id, self.epoch = target.attempt if target.attempt else (None, None)
            self.clear()
            self.border_title = f"Log of attempt {key}" if key else "Log"
            self._log_file, self._log_offset = None, 0
            self.show_liveness()
            self.load_log_path()

    def show_liveness(self) -> None:
        """The pane says "following" only while its attempt runs (nothing more comes after),
        and "no attempt" when there is none (not "attempt ended")."""
        if self.mode != "log" or self._target is None:
            return
        live = None if self.run_id is None else self._target.running == (self.run_id, self.epoch)
        if self.source_live != live:
            self.set_source_live(live)

    def _log_key(self) -> str | None:
        return None if self.run_id is None else f"{self.run_id}/{self.epoch}"

    # --- filling it ------------------------------------------------------------------------------

    def append_history(self, events: Iterable[Event]) -> None:
        for e in events:
            if e.sequence <= self.history_after:
                continue
            when = fmt.clock(e.committed_at)
            self.write_line(f"#{e.sequence:<6} {when}  {e.type:<21} {fmt.event_data(e.data)}")
            self.history_after = e.sequence
        self._want()

    @work(exclusive=True, group="log", exit_on_error=False)
    async def load_log_path(self) -> None:
        run_id, epoch = self.run_id, self.epoch
        if run_id is None or epoch is None or self._target is None:
            self.write_line("No attempt selected (a run's attempts start with the first claim).")
            return
        node = self._target.node_id
        try:
            path = await asyncio.to_thread(self.find_log, run_id, epoch, node)
        except (RefineError, OSError) as exc:
            self.write_line(f"Cannot find the log: {exc}")
            return
        if path is None:
            self.write_line(f"This attempt is on node {node}; its log is on that machine.")
            self.show_elsewhere(node)
            return
        self._log_file, self._log_offset = path, 0
        self.follow_log_file()

    def follow_log_file(self) -> None:
        """Append what the log file gained since the last look (bounded, local file)."""
        if self.mode != "log" or self._log_file is None or self.paused or not self.is_attached:
            return
        try:
            with open(self._log_file, "rb") as f:
                end = f.seek(0, os.SEEK_END)
                if end < self._log_offset:  # truncated or replaced: start over
                    self.clear()
                    self._log_offset = 0
                start = max(self._log_offset, end - LOG_WINDOW)
                f.seek(start)
                data = f.read(end - start)
        except FileNotFoundError:
            self._log_placeholder(f"(no output yet: no log file at {self._log_file})")
            return
        # A last line without its newline is still being printed: shown, and read again.
        cut = data.rfind(b"\n") + 1
        lines = data[:cut].decode("utf-8", "replace").split("\n")[:-1]
        printing = data[cut:].decode("utf-8", "replace")
        if not lines and not as_printed(printing):
            self._log_placeholder("(no output yet)")
            return
        if self.placeholder:  # it goes when the first line comes
            self.clear()
        self._log_offset = start + cut
        self.write_printed(lines, printing)

    def _log_placeholder(self, text: str) -> None:
        """Say why the pane is empty, until the first line comes."""
        if self._log_offset == 0 and not self.line_count:
            self.write_line(text)
            self.placeholder = True
