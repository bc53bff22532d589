"""Waiting for a goal to reach a status (`refine wait`), woken by the journal's change source.

The wait sleeps on the backend's wake-ups (inotify on SQLite, LISTEN on PostgreSQL) and reads
the goal only when the journal's change gate says another connection committed; a slow safety
check covers a commit that lands before the watcher is listening. No busy polling.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Collection

from store.errors import (
    GoalNotFoundError,
    GoalTerminalError,
    StorageError,
    StorageUnreachableError,
    WaitTimeoutError,
)
from store.journal.api import Journal, JournalHandle, Location, WakeUps
from store.model.goals import TERMINAL_STATUSES, Goal, Goals

SAFETY_CHECK_S = 2.0  # a commit between the first read and the watcher's start is seen by then


async def wait_for_status(
    journal: Journal,
    location: Location,
    goal_id: str,
    wanted: Collection[str],
    timeout_s: float | None = None,
) -> Goal:
    """The goal once its status is one of ``wanted``.

    Raises GoalNotFoundError, GoalTerminalError (it ended in a status not wanted: it can never
    get there) or WaitTimeoutError after ``timeout_s`` seconds (None: no limit). Once the goal
    was read, a journal that becomes unreachable (a server restart) is waited for; before
    that, unreachable (a wrong password, say) is the answer.
    """
    loop = asyncio.get_running_loop()
    deadline = None if timeout_s is None else loop.time() + timeout_s
    goals, changes, wake = Goals(journal), journal.changes(), asyncio.Event()
    watcher = Journal.watch(location)
    pump = asyncio.create_task(_pump(watcher, wake))
    known, handle = "unknown", JournalHandle(location, read_only=True)
    try:
        while True:
            wake.clear()
            trouble = ""
            if journal.replaced():
                # A restored or deleted file: the open one never changes again; follow the path.
                reopened = _reopen(handle)
                if reopened is None:
                    trouble = "journal missing"
                else:
                    journal, goals, changes = reopened, Goals(reopened), reopened.changes()
            try:
                looked = not journal.replaced() and changes.changed()
                goal = goals.read(goal_id) if looked else None
            except StorageUnreachableError:
                if known == "unknown":
                    raise  # never read: the location or its credentials may be wrong
                looked, trouble = False, "journal unreachable"
            if looked:
                if goal is None:
                    raise GoalNotFoundError(f"no goal {goal_id}", goal_id=goal_id)
                known = goal.status
                if known in wanted:
                    return goal
                if known in TERMINAL_STATUSES:
                    raise GoalTerminalError(
                        f"goal {goal_id} is {known} (terminal): it will never be"
                        f" {' or '.join(sorted(wanted))}",
                        goal_id=goal_id,
                    )
            status = f"unknown ({trouble})" if trouble else known
            left = SAFETY_CHECK_S if deadline is None else deadline - loop.time()
            if left <= 0:
                raise WaitTimeoutError(
                    f"goal {goal_id} is still {status} after {timeout_s:g} s",
                    goal_id=goal_id,
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), min(left, SAFETY_CHECK_S))
    finally:
        handle.close()
        watcher.stop()
        pump.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await pump


def _reopen(handle: JournalHandle) -> Journal | None:
    """The journal now at the handle's location, or None while there is none."""
    try:
        return handle.get()
    except StorageError:
        return None


async def _pump(watcher: WakeUps, wake: asyncio.Event) -> None:
    async for _ in watcher:
        wake.set()
