"""The journal's events as a stream for scripts (`refine events`, DESIGN §16).

Events are read by sequence range (``event_records``: "after the last one handed out"),
so however reads are batched, interrupted or resumed, each event comes once and in commit order
(sequences are gap-free and assigned in commit order on both backends, §3a). ``follow`` sleeps
on the backend's wake-ups (inotify on SQLite, LISTEN on PostgreSQL) and reads only when the
journal's change gate says another connection committed; a slow safety check covers a wake-up
that came before the watcher listened. A journal that becomes unusable (a server restart, a
file being replaced) is waited for and the stream goes on after the last sequence it handed
out; a SQLite file replaced at its path is followed there.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable, Collection, Iterator
from typing import TYPE_CHECKING, Any

from store.errors import StorageError
from store.journal.api import (
    MAX_PAGE,
    ChangeSource,
    Event,
    Journal,
    JournalHandle,
    Location,
    relay,
)
from store.journal.core import event_row
from store.journal.locations import JournalLocation
from store.model.goal import GOAL_EVENT_STATUS, goal_id_of
from store.records import dataclass

if TYPE_CHECKING:  # asyncio is imported where the stream follows: a plain read never loads it
    import asyncio

SAFETY_CHECK_S = 2.0  # look this often even without a wake-up (one cheap change-gate read)

# Every event type the models write (goal_model, run_model): `--type` names some of these.
EVENT_TYPES = frozenset(
    {
        "goal.created",
        "goal.cancelled",
        "goal.reassigned",
        *GOAL_EVENT_STATUS,
        "run.submitted",
        "run.completed",
        "run.exhausted",
        "run.cancel-requested",
        "run.cancelled",
        "attempt.claimed",
        "attempt.completed",
        "attempt.failed",
        "attempt.interrupted",
    }
)


@dataclass(frozen=True)
class StreamedEvent:
    """One event as the stream hands it out, with the command that committed it."""

    event: Event
    command_id: str

    def to_json(self) -> dict[str, Any]:
        event = self.event
        return {
            "sequence": event.sequence,
            "committed_at": event.committed_at,
            "aggregate_id": event.aggregate_id,
            "type": event.type,
            "data": dict(event.data),
            "command_id": self.command_id,
        }


@dataclass(frozen=True)
class EventFilter:
    """Which events a reader wants: some types (None: all), of one Goal and its Runs."""

    types: frozenset[str] | None = None
    goal_id: str | None = None

    def __call__(self, streamed: StreamedEvent) -> bool:
        event = streamed.event
        if self.types is not None and event.type not in self.types:
            return False
        return self.goal_id is None or goal_id_of(event.aggregate_id) == self.goal_id


def _watch_pipe(fd: int | None, wake: asyncio.Event) -> asyncio.Event | None:
    """An event set (and ``wake`` set) once the reader of pipe ``fd`` went away; None when
    ``fd`` is no pipe. On Linux a pipe's write end polls as an error once its reader closed
    it, which the event loop reports as "readable" (a write end never is otherwise). Only a
    pipe is watched: a terminal's descriptor is readable whenever someone types."""
    import asyncio

    try:
        if fd is None or not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return None
    except OSError:
        return None
    loop, gone = asyncio.get_running_loop(), asyncio.Event()

    def went_away() -> None:
        loop.remove_reader(fd)
        gone.set()
        wake.set()

    loop.add_reader(fd, went_away)
    return gone


def unknown_types(types: Collection[str]) -> list[str]:
    """The names among ``types`` that no model writes (a typo would match nothing forever)."""
    return sorted(set(types) - EVENT_TYPES)


class EventStream:
    """The events after a sequence, read in pages; ``follow`` waits for more.

    ``sequence`` is the last sequence handed out (the resume point a reader passes back as
    ``--after``). Reads never skip: the change gate is consulted only once everything before
    it was read, and a read that failed is repeated whatever the gate says.
    """

    def __init__(
        self,
        location: Location,
        *,
        after: int = 0,
        journal: Journal | None = None,
        note: Callable[[str], None] = lambda _: None,
    ) -> None:
        self.location = JournalLocation.of(location)
        self.sequence = after
        self._note = note  # one line for the reader's stderr: waiting, resumed, replaced
        self._handle = JournalHandle(self.location, read_only=True)
        self._handle.journal = journal  # the one the caller opened (and checked) first
        self._journal: Journal | None = journal
        self._changes: ChangeSource | None = journal.changes() if journal else None
        self._unread = True  # something may be unread whatever the gate says
        self._trouble: str | None = None  # why the journal is unusable now (noted once)

    def pages(self) -> Iterator[list[StreamedEvent]]:
        """Every event after ``sequence`` now, a page at a time (``sequence`` moves as each
        page is handed out). Raises StorageError when the journal cannot be read."""
        journal = self._open()
        assert self._changes is not None
        # A server's gate is a statement like the read itself (and a wake-up there is a
        # commit's notification): read at once, one statement a commit rather than two.
        gated = not self.location.is_server
        if gated and not (self._changes.changed() or self._unread):
            return
        self._unread = True
        while True:
            page = [StreamedEvent(event_row(r), r[6]) for r in journal.event_records(self.sequence)]
            if page:
                self.sequence = page[-1].event.sequence
                yield page
            if len(page) < MAX_PAGE:
                self._unread = False
                return

    async def follow(
        self, deliver: Callable[[list[StreamedEvent]], None], *, output: int | None = None
    ) -> None:
        """Hand every new page to ``deliver``, forever (until cancelled or ``deliver`` raises).

        ``output``: the descriptor ``deliver`` writes to. When it is a pipe whose reader went
        away (``| head -3`` has its lines), BrokenPipeError ends the wait at once, as ``tail -f``
        does, rather than at the next event. A journal that cannot be read is waited for (noted
        once); the first read's failure is the caller's to report: call :meth:`pages` first."""
        import asyncio  # here: a stream that does not follow never loads it

        wake = asyncio.Event()
        watcher = Journal.watch(self.location)
        pump = asyncio.create_task(relay(watcher, wake))
        reader_gone = _watch_pipe(output, wake)
        try:
            while True:
                wake.clear()
                if reader_gone is not None and reader_gone.is_set():
                    raise BrokenPipeError(errno.EPIPE, "the reader of the output went away")
                try:
                    for page in self.pages():
                        deliver(page)
                    self._recovered()
                except StorageError as exc:
                    self._troubled(exc)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), SAFETY_CHECK_S)
        finally:
            if output is not None and reader_gone is not None and not reader_gone.is_set():
                asyncio.get_running_loop().remove_reader(output)
            watcher.stop()
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pump
            self.close()

    def close(self) -> None:
        self._handle.close()
        self._journal = self._changes = None

    # --- the journal at the location -----------------------------------------------------------

    def _open(self) -> Journal:
        """The journal now at the location: a replaced SQLite file is reopened (and a new gate
        taken); the stream goes on after its last sequence unless the new file ends before it."""
        try:
            journal = self._handle.get()
        except StorageError:
            self._journal = self._changes = None
            raise
        if journal is not self._journal:
            previous, self._journal = self._journal, journal
            self._changes, self._unread = journal.changes(), True
            if previous is not None or self._trouble is not None:
                self._reopened(journal)
        return journal

    def _reopened(self, journal: Journal) -> None:
        last = journal.last_sequence()
        if last < self.sequence:
            self._note(
                f"the journal at {journal.location} now ends at sequence {last}, before"
                f" {self.sequence} already shown: following it from {last}"
            )
            self.sequence = last

    def _troubled(self, exc: StorageError) -> None:
        self._unread = True
        if self._trouble is None:
            self._note(f"waiting for the journal: {exc.message}")
        self._trouble = exc.message

    def _recovered(self) -> None:
        if self._trouble is not None:
            self._note(f"journal readable again: following after sequence {self.sequence}")
        self._trouble = None
