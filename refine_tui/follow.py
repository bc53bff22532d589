"""Following the journal: wake-ups in, one read at a time in a thread, messages out.

``JournalFollower`` owns the wake-up event, the read lock, whether a full read is owed and what
the open views want read (``wants``: each view writes its own part when it changes, and says
``wake`` when it needs a read now). The App runs ``follow`` as its live worker and hears the
results as ``JournalUpdate`` / ``JournalTrouble`` messages.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from textual.app import App

from refine_tui.live import LiveReader, Wants
from refine_tui.messages import JournalTrouble
from store.errors import (
    JournalLockedError,
    JournalMissingError,
    RefineError,
    StorageError,
    StorageUnreachableError,
)
from store.journal.api import Journal, WakeUps, relay
from store.journal.locations import Location

RETRY_S = 2.0  # how often an unreadable journal is tried again (file events also wake it)


class JournalFollower:
    """Reads after every watcher batch (and on demand), one read at a time."""

    def __init__(
        self,
        app: App[Any],
        live: LiveReader,
        *,
        location: Location,
        label: str,
        watch_files: bool = True,
    ) -> None:
        self.app = app
        self.live = live
        self.location = location
        self.label = label  # the journal as the screen names it (a URL without its password)
        self.wants = Wants()  # pushed by the views
        self.paused = False  # the dashboard is paused: no reads until it resumes
        self.watch_files = watch_files
        self.read_lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._full_pending = True
        self._watcher: WakeUps | None = None
        self._indexing = False  # the filter's index is being built
        self._was_read = False  # the journal has been read here: missing now means gone

    def wake(self, full: bool = False) -> None:
        """Ask for a read now (``full``: reload the visible set)."""
        self._full_pending = self._full_pending or full
        self._wake.set()

    def stop(self) -> None:
        if self._watcher is not None:
            self._watcher.stop()

    async def follow(self) -> None:
        """Read the journal after every watcher batch (and on demand), one read at a time.

        Wake-ups that arrive during a read collapse into one: the next read starts only after
        the previous one was applied, and it reads everything committed meanwhile.
        """
        try:
            self._watcher = watcher = Journal.watch(self.location)
        except RefineError as exc:  # a location that can never work (an unparsable URL)
            self.app.post_message(JournalTrouble("broken", exc.message))
            return
        pump = asyncio.create_task(relay(watcher, self._wake)) if self.watch_files else None
        try:
            while True:
                if not self.paused:
                    await self.read()
                    if not (self.live.indexed or self._full_pending or self._indexing):
                        self._indexing = True
                        # The work as a callable, as @work passes it: a worker cancelled before
                        # it starts leaves no coroutine never awaited.
                        work: Callable[[], Awaitable[None]] = self.build_index
                        self.app.run_worker(
                            work, group="index", exclusive=True, exit_on_error=False
                        )
                # A lock can go away without touching the files: while the journal is
                # unreadable, also retry now and then.
                timeout = RETRY_S if self._full_pending else None
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout)
                self._wake.clear()
        finally:
            watcher.stop()
            if pump is not None:
                pump.cancel()

    async def build_index(self) -> None:
        """After the first paint: the filter's in-memory index, built beside the live reads (a
        connection of its own); only taking in the commits made meanwhile holds the read lock."""
        try:
            with contextlib.suppress(RefineError):  # unreadable now: the next round tries again
                gc.disable()  # no full collections mid-build: each would hold the GIL ≈ 100 ms
                try:
                    built = await asyncio.to_thread(self.live.build_index)
                finally:
                    gc.enable()
                if built is not None:
                    async with self.read_lock:
                        await asyncio.to_thread(self.live.adopt_index, built)
        finally:
            self._indexing = False
        # What is alive now (widgets, index, first rows) lives as long as the app: out of
        # the cyclic GC's way, so a full collection during a read costs ≈ 5 ms, not ≈ 100.
        gc.collect()
        gc.freeze()

    async def read(self, recheck: Iterable[str] = ()) -> None:
        # One read at a time: two overlapping reads could post their rows out of order.
        async with self.read_lock:
            await self._read(tuple(recheck))

    async def _read(self, recheck: tuple[str, ...]) -> None:
        post = self.app.post_message
        request = self.wants.request(self._full_pending, recheck)
        self._full_pending = False
        try:
            update = await asyncio.to_thread(self.live.read, request, post)
        except StorageError as exc:
            self._full_pending = True
            server = isinstance(self.location, str)
            post(trouble_for(exc, self.label, server=server, was_read=self._was_read))
            return
        except RefineError as exc:
            post(JournalTrouble("stale", exc.message))
            return
        self._was_read = True
        if update is not None:
            post(update)


def trouble_for(
    exc: StorageError, label: str, *, server: bool, was_read: bool = False
) -> JournalTrouble:
    """What the screen says about a journal that cannot be read (``label``: the journal)."""
    if isinstance(exc, JournalMissingError) and was_read:
        # Deleted or moved under us: `init` would start a new, empty journal in its place.
        return JournalTrouble(
            "missing",
            f"{label} is missing — waiting for it to come back (restore the file; `init` would "
            "start a new, empty journal)",
        )
    if isinstance(exc, JournalMissingError):
        return JournalTrouble(
            "missing",
            f"{label} is missing — waiting for it (create it with `refine --journal {label} init`)",
        )
    if isinstance(exc, JournalLockedError):
        return JournalTrouble("stale", exc.message + " — retrying")
    if isinstance(exc, StorageUnreachableError) and server:
        # A server journal's lost connection: the rows stay, the feed catches up when back.
        return JournalTrouble("reconnecting", exc.message)
    return JournalTrouble("broken", exc.message + " — waiting for a usable journal")
