"""Learning that the journal changed: a file watcher that wakes, and a feed that reads what changed.

``JournalWatcher`` only says "look now": it watches the journal's directory with inotify on the
event loop (``store.speedups.inotify``; watchfiles elsewhere; a commit shows up as a change of
``<db>-wal``), plus a slow ``stat`` poll that catches what the
watcher cannot (the directory deleted and recreated leaves an inotify watch deaf, silently) and
rebuilds it: it is the SQLite backend's ``WakeUps`` (``Journal.watch(path)``). ``ChangeFeed``
then answers "what changed" on any backend: one long-lived read-only handle, gated by the
backend's change source, reading the events after the last sequence it has seen. Opening a
connection per refresh would itself fire watcher events (SQLite re-owns ``-wal`` and ``-shm``
on open), so the feed keeps one and reopens only when the journal was replaced.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Coroutine
from contextlib import AbstractContextManager
from pathlib import Path

from store.errors import StorageError
from store.journal.api import MAX_PAGE, ChangeSource, Event, Journal, JournalHandle, Location
from store.journal.locations import JournalLocation, resolve_journal_path
from store.speedups import inotify

# Measured here (DESIGN §7): step=20 ms gives ≈ 30 ms from commit to wake-up (a burst of writes
# within it is one batch); the debounce (watchfiles only) bounds how long a steady stream of
# commits may delay one batch.
DEFAULT_DEBOUNCE_MS = 200
DEFAULT_STEP_MS = 20
DEFAULT_POLL_INTERVAL_S = 2.0

Signature = tuple[object, ...]


def _stat_key(path: Path) -> tuple[int, int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class JournalWatcher:
    """Async iterator yielding ``None`` once per batch of changes that may have touched the journal.

    A batch is a wake-up hint, never data: read the changes with a ``ChangeFeed``. Works while
    the journal or its directory are missing (the poll notices when they come back).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        debounce_ms: int = DEFAULT_DEBOUNCE_MS,
        step_ms: int = DEFAULT_STEP_MS,
        poll_interval_s: float = DEFAULT_POLL_INTERVAL_S,
        use_inotify: bool | None = None,
    ) -> None:
        self.path = resolve_journal_path(path)  # the folder where its -wal really changes
        self.directory = self.path.parent
        self._names = {self.path.name, self.path.name + "-wal"}
        self.debounce_ms = debounce_ms
        self.step_ms = step_ms
        self.poll_interval_s = poll_interval_s
        # None: inotify where the kernel has it, else watchfiles (tests run both).
        self.use_inotify = inotify.available() if use_inotify is None else use_inotify
        self._stopped = False
        self._wake = asyncio.Event()
        self._watch_stop: asyncio.Event | None = None
        self._watch_task: asyncio.Task[None] | None = None
        self._watched_dir: tuple[int, int] | None = None
        self.rebuilds = 0  # how many times the file watcher was (re)started
        self.file_wakes = 0  # batches reported by the file watcher (not the poll)

    def __aiter__(self) -> AsyncIterator[None]:
        return self._batches()

    def stop(self) -> None:
        """End the iteration (call from the event loop's thread)."""
        self._stopped = True
        self._wake.set()
        if self._watch_stop is not None:
            self._watch_stop.set()

    def signature(self) -> Signature:
        """What the safety poll compares: the directory's identity and the db and -wal stats."""
        return (
            _stat_key(self.directory),
            _stat_key(self.path),
            _stat_key(self.path.with_name(self.path.name + "-wal")),
        )

    async def _batches(self) -> AsyncIterator[None]:
        last = self.signature()
        self._ensure_watching()
        try:
            while not self._stopped:
                woke = await self._wait(self.poll_interval_s)
                if self._stopped:
                    return
                current = self.signature()
                rebuilt = self._ensure_watching()
                if woke or rebuilt or current != last:
                    last = current
                    yield None
        finally:
            await self._stop_watching()

    async def _wait(self, timeout: float) -> bool:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout)
        woke = self._wake.is_set()
        self._wake.clear()
        return woke

    def _directory_id(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.directory)
        except OSError:
            return None
        return (st.st_dev, st.st_ino)

    def _ensure_watching(self) -> bool:
        """Start (or restart) the file watcher when the directory is new or the watcher died."""
        dir_id = self._directory_id()
        alive = self._watch_task is not None and not self._watch_task.done()
        if alive and dir_id == self._watched_dir:
            return False
        if self._watch_task is not None:
            assert self._watch_stop is not None
            self._watch_stop.set()
            self._watch_task = None
        if dir_id is None:
            changed = self._watched_dir is not None
            self._watched_dir = None
            return changed
        self._watched_dir = dir_id
        self._watch_stop = asyncio.Event()
        self._watch_task = asyncio.create_task(self._watch(self._watch_stop))
        self.rebuilds += 1
        return self.rebuilds > 1

    async def _watch(self, stop: asyncio.Event) -> None:
        if self.use_inotify:
            with contextlib.suppress(OSError):
                await self._watch_inotify(stop)
            return  # ended (deaf or unwatchable): the poll restarts it when the folder is back
        await self._watch_files(stop)

    async def _watch_inotify(self, stop: asyncio.Event) -> None:
        """Kernel events on the event loop: nothing runs while nothing changes.

        A commit writes ``-wal`` several times: the first event arms one wake-up ``step_ms``
        later, so a burst is one batch and a steady stream still wakes every ``step_ms``.
        """
        loop = asyncio.get_running_loop()
        events = inotify.DirectoryEvents(self.directory)
        deaf = asyncio.Event()
        armed: list[asyncio.TimerHandle] = []

        def fire() -> None:
            armed.clear()
            self.file_wakes += 1
            self._wake.set()

        def readable() -> None:
            names, lost, gone = events.read()
            if (lost or names & self._names) and not armed:
                armed.append(loop.call_later(self.step_ms / 1000, fire))
            if gone:
                deaf.set()

        loop.add_reader(events.fd, readable)
        try:
            await _first(stop.wait(), deaf.wait())
        finally:
            loop.remove_reader(events.fd)
            events.close()
            for handle in armed:
                handle.cancel()
        if deaf.is_set():
            self._wake.set()  # the folder went away: let the poll look now

    async def _watch_files(self, stop: asyncio.Event) -> None:
        """Elsewhere: watchfiles (a thread that checks every ``step_ms``)."""
        from watchfiles import Change, awatch

        names = self._names

        def relevant(_change: Change, path: str) -> bool:
            return os.path.basename(path) in names

        # recursive=False: node logs under <dir>/nodes/ change constantly and concern no one here.
        with contextlib.suppress(OSError, RuntimeError):
            async for _ in awatch(
                self.directory,
                watch_filter=relevant,
                debounce=self.debounce_ms,
                step=self.step_ms,
                stop_event=stop,
                recursive=False,
                ignore_permission_denied=True,
            ):
                self.file_wakes += 1
                self._wake.set()

    async def _stop_watching(self) -> None:
        task = self._watch_task
        if self._watch_stop is not None:
            self._watch_stop.set()
        self._watch_task = None
        if task is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(task, 2.0)


async def _first(*waits: Coroutine[object, object, object]) -> None:
    """Wait until any of ``waits`` is done; cancel the others."""
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()


class ChangeFeed:
    """The journal's new events, read through one long-lived read-only handle.

    ``poll()`` is cheap when nothing changed (the backend's change gate: one
    ``PRAGMA data_version`` on SQLite). It raises StorageError while the journal is missing or
    unusable and recovers when it comes back. ``generation`` grows on every (re)open but a
    server journal's resumption after a lost connection: a
    consumer that sees it change reloads everything, since a replaced journal is another
    journal whose sequences mean something else.
    """

    def __init__(
        self,
        location: Location,
        *,
        after_sequence: int | None = None,
        busy_timeout_ms: int = 1000,
    ) -> None:
        self.location = JournalLocation.of(location)  # once: a file's real path
        self._handle = JournalHandle(self.location, read_only=True, busy_timeout_ms=busy_timeout_ms)
        self.journal: Journal | None = None
        self.last_sequence = after_sequence or 0
        self.generation = 0
        self._start_at_end = after_sequence is None
        self._changes: ChangeSource | None = None
        self._journal_id: str | None = None

    def open(self) -> Journal:
        """The current read handle, (re)opened when missing or when the journal was replaced.

        Reopened after a lost server connection, the same server journal (same id, nothing
        lost) resumes after the last sequence seen: the next poll catches up by sequence."""
        journal = self._handle.get()
        if journal is not self.journal:
            self.journal = None
            try:
                if not self._resumes(journal):
                    if self._start_at_end or self.generation > 0:
                        self.last_sequence = journal.last_sequence()
                    self.generation += 1
            except BaseException:
                self._handle.close()
                raise
            self.journal = journal
            self._journal_id = journal.journal_id
            self._changes = journal.changes()
        return journal

    def _resumes(self, journal: Journal) -> bool:
        return (
            self.generation > 0
            and self.location.is_server  # no file to be replaced
            and journal.journal_id is not None
            and journal.journal_id == self._journal_id
            and journal.last_sequence() >= self.last_sequence
        )

    def poll(self) -> list[Event]:
        """Events committed since the last poll (oldest first); [] when nothing changed."""
        try:
            journal = self.open()
            assert self._changes is not None
            # A server's gate is a statement like the read itself (and its wake-ups are commits'
            # notifications): read at once there, one statement a commit rather than two.
            if not self.location.is_server and not self._changes.changed():
                return []
            events: list[Event] = []
            while True:
                page = journal.events_after(self.last_sequence, MAX_PAGE)
                events += page
                if page:
                    self.last_sequence = page[-1].sequence
                if len(page) < MAX_PAGE:
                    break
            return events
        except StorageError:
            self.close()
            raise

    def held(self) -> AbstractContextManager[object]:
        """Keep the read handle's connection for several reads (a refresh): a journal that
        shares its connections (a served tab's, ``store.journal.slots``) connects for each."""
        journal = self.journal
        return journal.held() if journal is not None else contextlib.nullcontext()

    def close(self) -> None:
        self._handle.close()
        self.journal = None
