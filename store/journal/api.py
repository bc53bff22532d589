"""What Execution, Goals, the node and the dashboard need from a journal, whatever its backend.

``Journal`` is that interface (a Protocol) and the entry point: ``Journal.open(location)`` opens
the SQLite file a path names (``store.journal.sqlite``) or the PostgreSQL database a
``postgresql://`` URL names (``store.journal.postgres``, imported only when asked for). Each
backend also brings its own change detection (``ChangeSource``, ``WakeUps``), so no caller
branches on the backend. The value types and the command rules every backend shares are in
``store.journal.core`` (re-exported here for callers).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Literal, Protocol, Self, runtime_checkable

from store.journal.core import (
    MAX_PAGE,
    Change,
    Command,
    Decide,
    Event,
    EventRecord,
    Outcome,
    Stored,
    linked_id,
)
from store.journal.locations import BACKENDS as BACKENDS  # the registry, by URL scheme
from store.journal.locations import JournalLocation, Location

if TYPE_CHECKING:  # asyncio is imported where wake-ups run: a quick CLI never loads it
    import asyncio

    from store.errors import RefineError
    from store.journal.presence import Beat, Presence

__all__ = [
    "MAX_PAGE",
    "Backend",
    "Change",
    "ChangeSource",
    "Command",
    "Decide",
    "Event",
    "EventRecord",
    "Journal",
    "JournalHandle",
    "JournalLocation",
    "Location",
    "Outcome",
    "PollingWakeUps",
    "Stored",
    "WakeUps",
    "backend_for",
    "relay",
]

Synchronous = Literal["FULL", "NORMAL"]


# --- the interface -----------------------------------------------------------------------------


class ChangeSource(Protocol):
    """One consumer's "did anything change?" gate on one open journal."""

    def changed(self) -> bool:
        """True when another connection may have committed since this source's previous call
        (always on the first call). Cheap: callers ask it on every wake-up."""
        ...


class WakeUps(Protocol):
    """Async iterator yielding ``None`` per batch of possible changes: a hint, never data.

    Keeps working while the journal is missing or unreachable (it notices when it is back)."""

    def __aiter__(self) -> AsyncIterator[None]: ...

    def stop(self) -> None:
        """End the iteration (call from the event loop's thread)."""
        ...


async def relay(wakeups: WakeUps, wake: asyncio.Event) -> None:
    """Set ``wake`` on every batch of wake-ups (a loop's own wait then collapses bursts)."""
    async for _ in wakeups:
        wake.set()


class Backend(Protocol):
    """What a backend class provides besides its journals: opening one, and wake-ups."""

    @classmethod
    def connect(
        cls,
        location: str,
        read_only: bool = False,
        *,
        create: bool = True,
        synchronous: Synchronous = "FULL",
        busy_timeout_ms: int = 5000,
        journal_id: str | None = None,
    ) -> Journal: ...

    @classmethod
    def wakeups(cls, location: str, node_id: str | None = None) -> WakeUps: ...


@runtime_checkable
class Journal(Protocol):
    """A command journal. Open with :meth:`open`; use as a context manager.

    A backend class subclasses it (so it inherits ``open`` and ``watch``) and is a ``Backend``.

    Every method raises ``JournalClosedError`` once closed and a ``StorageError`` subclass when
    the database cannot be used; commands raise ``JournalReadOnlyError`` on a read-only journal.
    """

    @staticmethod
    def open(
        location: Location,
        read_only: bool = False,
        *,
        create: bool = True,
        synchronous: Synchronous = "FULL",
        busy_timeout_ms: int = 5000,
        journal_id: str | None = None,
    ) -> Journal:
        """Open the journal at ``location``: a ``postgresql://`` URL or a SQLite file path.

        ``create``: make the journal when missing (never when ``read_only``). ``synchronous``
        and ``busy_timeout_ms`` are durability and lock-wait settings each backend maps to its
        own. ``journal_id``: the journal the caller knows is there (it opened it a moment ago);
        another one there is refused (NotAJournalError), and a server journal whose process
        shares its connections (``store.journal.slots``) checks it at its first connection,
        not now: a worker's open costs no connection of its own. Raises a StorageError subclass
        saying why the journal cannot be opened.
        """
        return JournalLocation.of(location).open(
            read_only,
            create=create,
            synchronous=synchronous,
            busy_timeout_ms=busy_timeout_ms,
            journal_id=journal_id,
        )

    @staticmethod
    def watch(location: Location, node_id: str | None = None) -> WakeUps:
        """Wake-ups for changes of the journal at ``location`` (which may not exist yet).

        ``node_id``: a node's, which need not wake for commits that concern only other nodes
        (PostgreSQL's notifications name them; SQLite's file changes cannot say: all wake)."""
        return JournalLocation.of(location).watch(node_id)

    read_only: bool
    location: str  # where the journal is, fit to show: a file path, or a URL without password
    journal_id: str | None  # names this journal in node records (None: an old read-only file)
    # Read whole from the file, as a snapshot of it while no writer runs (SQLite in a folder this
    # process cannot write): ``replaced()`` turns true once a writer changes it.
    immutable: bool

    @property
    def closed(self) -> bool: ...

    def close(self) -> None: ...

    def __enter__(self) -> Self: ...

    def __exit__(self, *exc: object) -> None: ...

    def execute(
        self,
        *,
        command_id: str,
        payload: Mapping[str, Any],
        expected: Mapping[str, int | None],
        decide: Decide,
    ) -> Outcome:
        """Run one command atomically (``store.journal.core.run_command``: the refusal order)."""
        ...

    def execute_batch(self, commands: Sequence[Command]) -> list[Outcome | RefineError]:
        """Run ``commands`` in one transaction, in order, each as ``execute`` runs it alone (its
        own receipt, events, and refusal: a refused command writes nothing, the others commit).
        A StorageError fails the whole batch, and nothing is written."""
        ...

    def load(self, aggregate_id: str) -> Stored | None: ...

    def load_many(self, aggregate_ids: Sequence[str]) -> dict[str, Stored]:
        """The stored aggregates among ``aggregate_ids`` (missing ones are absent)."""
        ...

    def load_linked(
        self, aggregate_ids: Sequence[str], field: str, prefix: str
    ) -> tuple[dict[str, Stored], dict[str, Stored]]:
        """The stored aggregates among ``aggregate_ids`` and, seen in the same state of the
        journal, the ones their states' text ``field`` names as ``prefix + value`` (a Goal's
        current Run: ``"run_id"``, ``"run:"``), each by aggregate id; missing ones are absent.

        Here two reads in a snapshot; a server backend may answer in one statement.
        """
        with self.snapshot():
            stored = self.load_many(aggregate_ids)
            links = [link for s in stored.values() if (link := linked_id(s, field, prefix))]
            return stored, self.load_many(links)

    def aggregates(
        self,
        kind: str,
        *,
        status: str | Sequence[str] | None = None,
        node_id: str | None = None,
        newest_first: bool = False,
        limit: int | None = None,
        contains: str | None = None,
        offset: int = 0,
        after_id: str | None = None,
        before: tuple[int, str] | None = None,
    ) -> list[Stored]:
        """Aggregates of one kind, optionally by status and node, by id or by recency.

        ``contains``: only those whose id or stored state text contains it (case-insensitive
        for ASCII), a coarse pre-filter the caller refines on the parsed state. ``offset`` (with
        ``limit``) skips that many: pages, read under one ``snapshot()`` to be consistent.
        ``after_id``: only ids after it, in id order (a page that starts where the last one
        ended: a million rows are read in pages without skipping, each page an index range).
        ``before``: newest first, only rows older than this ``Stored.recency`` (the last row of
        the page before: a page by recency is an index range too, where an offset reads and
        skips every row before it).
        """
        ...

    def state_fields(
        self,
        kind: str,
        names: Sequence[str],
        *,
        limit: int | None = None,
        before: tuple[int, str] | None = None,
    ) -> list[tuple[str, int, tuple[Any, ...]]]:
        """Aggregates of one kind newest first, as ``aggregates(kind, newest_first=True)``
        orders and pages them (``before``: a row's ``(last_sequence, aggregate_id)``), each as
        its id, its last commit's sequence and the named top-level fields of its stored state
        (None where absent, or where the state is not a JSON object): the dashboard's filter
        index of every Goal, which keeps three fields, without a ``Stored`` record per Goal
        (SQLite reads the fields itself; PostgreSQL's backend parses the states it reads)."""
        ...

    def count(self, kind: str, status: str | None = None) -> int: ...

    def history(self, aggregate_id: str, after_sequence: int = 0, limit: int = 100) -> list[Event]:
        """One aggregate's events in commit order, after ``after_sequence``, at most ``limit``."""
        ...

    def histories(self, aggregate_ids: Sequence[str]) -> dict[str, list[Event]]:
        """Each of ``aggregate_ids``' whole history in commit order (``[]`` for one with none):
        ``refine check`` reads a page of aggregates so, in one round trip where that counts."""
        ...

    def events_after(self, sequence: int, limit: int = MAX_PAGE) -> list[Event]:
        """Every aggregate's events after ``sequence`` (an index range scan), oldest first."""
        ...

    def event_records(
        self, after_sequence: int, limit: int = MAX_PAGE, types: Sequence[str] | None = None
    ) -> list[EventRecord]:
        """Events after ``after_sequence`` as stored, oldest first, their data unparsed and with
        the id of the command that committed each (``EventRecord``); only those of ``types``
        when given. One index range scan, as ``events_after``: a reader parses what it needs."""
        ...

    def count_by_status_and_node(
        self, kind: str, statuses: Sequence[str] | None = None
    ) -> dict[tuple[str | None, str | None], int]:
        """How many aggregates of ``kind`` have each (status, node), maybe only among
        ``statuses``: one read of an index (for Goals still moving, a small one), no state."""
        ...

    def outbox(self, after_sequence: int = 0, limit: int = MAX_PAGE) -> list[tuple[int, str, str]]:
        """Outbox rows ``(sequence, aggregate_id, topic)`` after ``after_sequence``: one for each
        event, its type as topic (a view of the events)."""
        ...

    def last_sequence(self) -> int: ...

    def last_commit(self) -> tuple[int, float | None]:
        """The last event's sequence and commit time (0, None for an empty journal)."""
        ...

    def snapshot(self) -> AbstractContextManager[Journal]:
        """Several reads that see one consistent state of the journal."""
        ...

    def durable_at_end(self) -> AbstractContextManager[None]:
        """Commands inside commit one by one as ever (each its own transaction, receipt and
        events, visible at once) and are made durable together when the block ends, instead of
        each at its commit: a batch of many commands pays for one flush to disk, not one each.
        A crash of the machine inside the block may lose the block's last commands, whole and
        in order (never one of them in part, never an earlier one without the later); a crash
        of the process loses none. Use it where that loss equals stopping the batch there
        (it is run again), and act outside on what it committed (signal a process) only after
        the block. By default the backend's commits are durable one by one."""
        return contextlib.nullcontext()

    def commits_held(self, aggregate_id: str | None = None) -> AbstractContextManager[None]:
        """No other connection commits on ``aggregate_id`` (a Run) while the block runs, and
        reads inside see the newest commit; nothing is written. What a process decides and
        execs inside is ordered before every such commit after it, and an exec releases the
        hold: on SQLite the block holds the write lock (``BEGIN IMMEDIATE``: no commit at all;
        SQLite opens its files close-on-exec), on PostgreSQL a lock of its session that every
        command on that Run waits for (``store.journal.postgres.LAUNCH_CLASS``). By default
        nothing is held."""
        return contextlib.nullcontext()

    def session_fds(self) -> tuple[int, ...]:
        """Descriptors that keep this journal's server session and its connection slot while
        any copy of them is open (``store.journal.session_end``); none by default."""
        return ()

    def held(self) -> AbstractContextManager[Journal]:
        """Keep one connection for the calls inside. A journal that shares its connections
        (``store.journal.slots``: a worker's) otherwise connects for each call and lets go."""
        ...

    def changes(self) -> ChangeSource:
        """A new change gate on this open journal, for one consumer."""
        ...

    def replaced(self) -> bool:
        """True when the location now names another journal than the one this handle reads
        (e.g. a SQLite file restored or deleted), or the snapshot read is outdated: reopen to
        follow it."""
        ...

    # --- node presence (store.journal.presence): beside the command journal, never in it ---

    def write_presence(self, beat: Beat) -> None:
        """Overwrite node ``beat.node_id``'s presence row, stamped with the database's clock,
        outside any command: no event, receipt or sequence, so no change source reports it
        and nobody following the journal wakes for it. JournalReadOnlyError when read-only."""
        ...

    def presence(self) -> tuple[float, list[Presence]]:
        """Every node's presence row, by node id, and the database's clock now (the clock the
        rows were stamped with: a node's state never depends on the reader's clock)."""
        ...

    def goal_nodes(self) -> list[str]:
        """Every node id a Goal names, sorted."""
        ...


def backend_for(location: Location) -> Backend:
    """The backend class for ``location``, imported on first use."""
    return JournalLocation.of(location).backend()


class PollingWakeUps:
    """Wake-ups from a clock alone: a backend's fallback (and safety poll) without a push."""

    def __init__(self, interval_s: float = 1.0) -> None:
        import asyncio

        self.interval_s = interval_s
        self._stop = asyncio.Event()

    async def _ticks(self) -> AsyncIterator[None]:
        import asyncio

        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.interval_s)
            if not self._stop.is_set():
                yield None

    def __aiter__(self) -> AsyncIterator[None]:
        return self._ticks()

    def stop(self) -> None:
        self._stop.set()


class JournalHandle:
    """One open journal at a location, reopened when that location names another journal.

    The one place that follows a restored, replaced or deleted journal: the change feed, the
    node and the dashboard's writer each hold one. ``get`` raises a StorageError while the
    journal cannot be opened; the next call tries again.
    """

    def __init__(
        self, location: Location, *, read_only: bool = False, busy_timeout_ms: int = 5000
    ) -> None:
        self.location = location
        self.read_only = read_only
        self.busy_timeout_ms = busy_timeout_ms
        self.journal: Journal | None = None

    def get(self) -> Journal:
        """The open journal, (re)opened when missing or replaced; never created."""
        if self.journal is not None and (self.journal.closed or self.journal.replaced()):
            self.close()
        if self.journal is None:
            self.journal = Journal.open(
                self.location,
                self.read_only,
                create=False,
                busy_timeout_ms=self.busy_timeout_ms,
            )
        return self.journal

    def close(self) -> None:
        if self.journal is not None:
            self.journal.close()
            self.journal = None
