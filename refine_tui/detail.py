"""The detail pane: the selected Run's event history, or the selected Attempt's log, followed live.

``DetailPane`` is a mixin of ``RefineApp``: history arrives with the journal updates
(``append_history``); a local log file is followed by polling its size (``follow_log_file``).
"""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING, Any

from textual import work
from textual.app import App

from refine_tui import format as fmt
from refine_tui.live import LiveReader
from refine_tui.rows import GoalRow
from refine_tui.widgets.follow_log import FollowLog
from store.errors import RefineError

if TYPE_CHECKING:
    from refine_tui.widgets.keyed_table import KeyedTable

    _AppBase = App[None]  # type checkers see an App (query_one, add_class, ...)
else:
    _AppBase = object  # at run time a plain class in front of App in RefineApp's bases


class DetailPane(_AppBase):
    """Open, retarget and close the detail pane; fill it from the journal or the log file."""

    # Provided by RefineApp.
    node: str
    paused: bool
    focus_goal: str | None
    goal_rows: dict[str, GoalRow]
    detail: str | None
    detail_run: str | None
    detail_epoch: int | None
    live: LiveReader
    _history_after: int
    _log_file: str | None
    _log_offset: int

    if TYPE_CHECKING:

        def current_table(self) -> KeyedTable: ...
        def selected_goal(self) -> GoalRow | None: ...
        def selected_attempt(self) -> tuple[str, int] | None: ...
        def selected_run(self) -> str | None: ...
        def wake(self, full: bool = False) -> None: ...

    def action_history(self) -> None:
        self.toggle_detail("history")

    def action_log(self) -> None:
        self.toggle_detail("log")

    def toggle_detail(self, mode: str) -> None:
        if self.detail == mode:
            self.close_detail()
            return
        self.detail = mode
        pane = self.query_one("#detail", FollowLog)
        pane.display = True
        self.add_class("with-detail")
        self.retarget_detail(force=True)
        pane.focus()  # the keys scroll it; tab goes back to the table

    def close_detail(self) -> None:
        self.detail = self.detail_run = self._log_file = None
        self.query_one("#detail").display = False
        self.remove_class("with-detail")
        self.current_table().focus()

    def retarget_detail(self, force: bool = False) -> None:
        """Point the pane at the selected Run (history) or Attempt (log)."""
        log = self.query_one("#detail", FollowLog)
        if self.detail == "history":
            run_id = self.selected_run()
            if run_id == self.detail_run and not force:
                return
            self.detail_run, self._history_after = run_id, 0
            log.clear()
            log.border_title = f"History of {run_id}" if run_id else "History"
            if run_id is None:
                log.write_line("No run selected.")
                return
            self.wake(full=True)
        elif self.detail == "log":
            target = self.selected_attempt()
            key = f"{target[0]}/{target[1]}" if target else None
            if key == self._log_key() and not force:
                return
            self.detail_run, self.detail_epoch = target if target else (None, None)
            log.clear()
            log.border_title = f"Log of attempt {key}" if key else "Log"
            self._log_file, self._log_offset = None, 0
            self.show_log_liveness()
            self.load_log_path()

    def show_log_liveness(self) -> None:
        """The pane says "following" only while its attempt runs (nothing more comes after)."""
        if self.detail != "log":
            return
        goal = self.goal_rows.get(self.focus_goal or "") or self.selected_goal()
        live = goal is not None and (goal.run_id, goal.running_epoch) == (
            self.detail_run,
            self.detail_epoch,
        )
        log = self.query_one("#detail", FollowLog)
        if log.source_live != live:
            log.set_source_live(live)

    def _log_key(self) -> str | None:
        if self.detail_run is None:
            return None
        return f"{self.detail_run}/{self.detail_epoch}"

    def append_history(self, events: list[Any]) -> None:
        log = self.query_one("#detail", FollowLog)
        for e in events:
            if e.sequence <= self._history_after:
                continue
            when = fmt.clock(e.committed_at)
            log.write_line(f"#{e.sequence:<6} {when}  {e.type:<21} {fmt.event_data(e.data)}")
            self._history_after = e.sequence

    @work(exclusive=True, group="log", exit_on_error=False)
    async def load_log_path(self) -> None:
        log = self.query_one("#detail", FollowLog)
        run_id, epoch = self.detail_run, self.detail_epoch
        goal = self.goal_rows.get(self.focus_goal or "") or self.selected_goal()
        if run_id is None or epoch is None or self.live.reader is None:
            log.write_line("No attempt selected (a run's attempts start with the first claim).")
            return
        node = goal.node_id if goal else self.node
        reader = self.live.reader
        try:
            path = await asyncio.to_thread(reader.log_path, run_id, epoch, node)
        except (RefineError, OSError) as exc:
            log.write_line(f"Cannot find the log: {exc}")
            return
        if path is None:
            log.write_line(f"This attempt ran on node {node}; its log is on that machine.")
            return
        self._log_file, self._log_offset = path, 0
        self.follow_log_file()

    def follow_log_file(self) -> None:
        """Append what the log file gained since the last look (bounded, local file)."""
        if self.detail != "log" or self._log_file is None or self.paused or not self.is_running:
            return
        log = self.query_one("#detail", FollowLog)
        try:
            with open(self._log_file, "rb") as f:
                end = f.seek(0, os.SEEK_END)
                if end < self._log_offset:  # truncated or replaced: start over
                    log.clear()
                    self._log_offset = 0
                start = max(self._log_offset, end - 256 * 1024)
                f.seek(start)
                data = f.read(end - start)
        except FileNotFoundError:
            self._log_placeholder(f"(no output yet: no log file at {self._log_file})")
            return
        cut = data.rfind(b"\n") + 1  # keep a partial last line for the next look
        if cut == 0:
            self._log_placeholder("(no output yet)")
            return
        if log.placeholder:  # it goes when the first line comes
            log.clear()
        self._log_offset = start + cut
        log.write_lines(data[:cut].decode("utf-8", "replace").splitlines())

    def _log_placeholder(self, text: str) -> None:
        """Say why the pane is empty, until the first line comes."""
        log = self.query_one("#detail", FollowLog)
        if self._log_offset == 0 and not log.line_count:
            log.write_line(text)
            log.placeholder = True
