"""Waiting for a goal to reach a status (`refine wait`), woken by the journal's change source.

The wait sleeps on the backend's wake-ups (inotify on SQLite, LISTEN on PostgreSQL) and reads
the goal only when the journal's change gate says another connection committed; a slow safety
check covers a commit that lands before the watcher is listening. No busy polling.

The goal belongs to one journal, known by its id. Once the goal was read, the journal gone from
its location (a deleted file, a dropped schema) is waited for, since a restore may bring it
back (same id: followed); another journal there (a new id: `refine init` again) ends the wait
with JournalMissingError: its goal of the same name is not the one waited for. The id at the
location is checked before any answer and at each safety check (a fresh open: a PostgreSQL
schema dropped and made again has no file whose change a handle could notice).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Collection

from store.errors import (
    GoalNotFoundError,
    GoalTerminalError,
    JournalMissingError,
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
    was read, a journal that becomes unreachable (a server restart) or missing (a restore under
    way) is waited for; before that, unreachable (a wrong password, say) is the answer; another
    journal at the location raises JournalMissingError.
    """
    loop = asyncio.get_running_loop()
    deadline = None if timeout_s is None else loop.time() + timeout_s
    goals, changes, wake = Goals(journal), journal.changes(), asyncio.Event()
    watcher = Journal.watch(location)
    pump = asyncio.create_task(_pump(watcher, wake))
    known, handle = "unknown", JournalHandle(location, read_only=True)
    origin = _Origin(location, journal, goal_id)
    next_check = loop.time() + SAFETY_CHECK_S
    reread = False  # the last look ended in trouble: a change its gate took may be unread
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
                looked = not journal.replaced() and (changes.changed() or reread)
                goal = goals.read(goal_id) if looked else None
            except StorageUnreachableError:
                if known == "unknown":
                    raise  # never read: the location or its credentials may be wrong
                looked, trouble = False, "journal unreachable"
            except StorageError:
                # A dropped schema fails every read: gone (waited for) or another journal there.
                if known == "unknown" or not (trouble := origin.trouble()):
                    raise
                looked = False
            answers = looked and (goal is None or goal.status in {*wanted, *TERMINAL_STATUSES})
            if known != "unknown" and not trouble and (answers or loop.time() >= next_check):
                trouble, next_check = origin.trouble(), loop.time() + SAFETY_CHECK_S
                looked = looked and not trouble
            reread = bool(trouble)
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


class _Origin:
    """The journal the wait first read, told apart by its id from whatever is there now."""

    def __init__(self, location: Location, journal: Journal, goal_id: str) -> None:
        self.location, self.shown, self.goal_id = location, journal.location, goal_id
        self.journal_id = journal.journal_id

    def trouble(self) -> str:
        """Why the location does not hold this journal now ("" when it does): it holds none,
        or cannot be reached. JournalMissingError when it holds another journal."""
        try:
            with Journal.open(self.location, read_only=True, create=False) as now:
                found = now.journal_id
        except StorageUnreachableError:
            return "journal unreachable"
        except StorageError:  # missing, or not a journal yet (a restore under way)
            return "journal missing"
        if None not in (found, self.journal_id) and found != self.journal_id:
            raise JournalMissingError(
                f"journal replaced: {self.shown} now holds another journal (id {found}, not"
                f" {self.journal_id}); goal {self.goal_id} was in the one this wait read",
                goal_id=self.goal_id,
            )
        return ""


def _reopen(handle: JournalHandle) -> Journal | None:
    """The journal now at the handle's location, or None while there is none."""
    try:
        return handle.get()
    except StorageError:
        return None


async def _pump(watcher: WakeUps, wake: asyncio.Event) -> None:
    async for _ in watcher:
        wake.set()
