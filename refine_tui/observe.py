"""What changes without a commit: a starting row's launch window ends; a process is observed,
then its record goes away.

``LaunchWindows`` owns the starting rows and the one timer that has them read again (the Goals
view's); ``LastObservations`` keeps each attempt's last process observation (the Attempts
table's).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from functools import partial

from textual.timer import Timer
from textual.widget import Widget

from refine_tui.rows import AttemptRow, GoalRow
from store.ops.reads import launch_ends


class LaunchWindows:
    """Rows still starting (no process record yet) are read again when their window ends:
    then their process proves them, or they need cleanup."""

    def __init__(
        self,
        owner: Widget,
        *,
        paused: Callable[[], bool],
        recheck: Callable[[list[str]], Awaitable[None]],
    ) -> None:
        self.owner = owner  # its timer and its reads are the owner's
        self.paused = paused
        self.recheck = recheck  # re-read these Goals now
        self._launching: dict[str, float] = {}  # starting rows → when their launch window ends
        self._timer: Timer | None = None

    def note(self, goals: Mapping[str, GoalRow | None], full: bool) -> None:
        """Goal rows just read (``full``: the whole list)."""
        if full:
            self._launching.clear()
        for key, row in goals.items():
            if row is not None and row.starting and row.started_at is not None:
                self._launching[key] = launch_ends(row.started_at)
            else:
                self._launching.pop(key, None)
        self._arm()

    def _arm(self, at_least: float = 0.1) -> None:
        if not self._launching or self._timer is not None:
            return
        delay = max(at_least, min(self._launching.values()) - time.time() + 0.1)
        self._timer = self.owner.set_timer(delay, self._ended)

    def _ended(self) -> None:
        self._timer = None
        if not self.owner.is_running:
            return
        now = time.time()
        due = [key for key, end in self._launching.items() if end <= now]
        if self.paused() or not due:
            self._arm(at_least=1.0)
            return
        for key in due:
            del self._launching[key]  # back with the re-read row if it is still starting
        # The work as a callable, as @work passes it: a worker cancelled before it starts
        # leaves no coroutine never awaited.
        self.owner.run_worker(partial(self.recheck, due), group="launch", exit_on_error=False)
        self._arm(at_least=1.0)


class LastObservations:
    """Each attempt's last pid/alive observation, kept once the process record is gone (after
    a Stop)."""

    def __init__(self) -> None:
        self._observed: dict[tuple[str, int], AttemptRow] = {}  # last row that had a pid

    def __call__(self, a: AttemptRow) -> AttemptRow:
        key = (a.run_id, a.epoch)
        if a.pid is not None:
            self._observed[key] = a
            return a
        seen = self._observed.get(key)
        if seen is None:
            return a
        return replace(a, pid=seen.pid, alive=seen.alive, observed_at=seen.observed_at)
