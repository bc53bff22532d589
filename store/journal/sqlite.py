"""The SQLite journal backend: one file, one ``BEGIN IMMEDIATE`` transaction per command.

State, receipt, events and outbox rows of a command commit together. This module is the only
place that knows SQLite; Execution and Goals talk to the ``Journal`` interface
(``store.journal.api``, re-exported here with its value types), so the PostgreSQL backend
replaces it without touching them. ``Journal.open(path)`` lands here for any non-URL location.

One module over 600 lines because it is the whole of one backend: its schema and migrations,
its connections and every statement of the ``Journal`` interface change together (what both
backends build alike is in ``store.journal.core`` and ``store.journal.queries``).
"""

from __future__ import annotations

import os
import threading
import urllib.parse
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from store.errors import (
    DiskFullError,
    InvalidInputError,
    JournalClosedError,
    JournalLockedError,
    JournalMissingError,
    JournalReadOnlyError,
    NotAJournalError,
    RefineError,
    StorageError,
    StorageUnreachableError,
    TargetNotEmptyError,
)
from store.journal.api import ChangeSource, Journal, WakeUps
from store.journal.core import (
    COPY_BATCH,
    COPY_TABLES,
    MAX_PAGE,
    MAX_SAFE_INTEGER,
    AggregateRow,
    Change,
    Command,
    Decide,
    Event,
    EventRecord,
    Outcome,
    Stored,
    Writes,
    aggregate_kind,
    check_page,
    command_key,
    copy_table,
    event_row,
    fields_of,
    first_ids,
    key_digest,
    loads,
    run_batched,
    run_command,
    stored_row,
    write_steps,
)
from store.journal.locations import journal_file_exists, resolve_journal_path
from store.journal.queries import ACTIVE_STATUSES as ACTIVE_STATUSES  # the tests' old name
from store.journal.queries import (
    ACTIVE_TERM,
    GOAL_TERM,
    SQLITE,
    check_field_names,
    filtered_page,
    of_kind,
)
from store.speedups.sqlite import sqlite3

# A command, a read or a node's beat needs neither: `refine goals` does not import them.
if TYPE_CHECKING:
    from store.journal.presence import Beat, Presence

__all__ = [
    "MAX_PAGE",
    "MAX_SAFE_INTEGER",
    "Change",
    "Decide",
    "Event",
    "Journal",
    "Outcome",
    "SqliteJournal",
    "Stored",
    "aggregate_kind",
    "make_folder",
]

# 2: the meta table with the journal id; 3: receipts hold a payload digest; 4: the outbox is a
# view of the events, the aggregate indexes hold only the Goals the dashboard and nodes look up;
# 5: an aggregate's events are chained (``prev``) instead of indexed by aggregate;
# 6: node presence (``node_presence``, store.journal.presence), a table outside the command journal.
SCHEMA_VERSION = 6
PRESENCE = 6  # the first schema with the node_presence table
CHAINED = 5  # the first schema whose events carry ``prev``
APPLICATION_ID = 0x52464E31  # "RFN1": tells our journals from any other SQLite file

Synchronous = Literal["FULL", "NORMAL"]

_SCHEMA = """
CREATE TABLE aggregates (
    aggregate_id  TEXT PRIMARY KEY,
    kind          TEXT NOT NULL,
    version       INTEGER NOT NULL,
    status        TEXT,
    node_id       TEXT,
    last_sequence INTEGER NOT NULL,
    state         TEXT NOT NULL
) WITHOUT ROWID;
CREATE INDEX aggregates_by_status ON aggregates(kind, status, node_id);
CREATE INDEX aggregates_by_recency ON aggregates(kind, last_sequence);
CREATE TABLE events (
    sequence      INTEGER PRIMARY KEY,
    aggregate_id  TEXT NOT NULL,
    version       INTEGER NOT NULL,
    type          TEXT NOT NULL,
    data          TEXT NOT NULL,
    committed_at  REAL NOT NULL,
    command_id    TEXT NOT NULL
);
CREATE INDEX events_by_aggregate ON events(aggregate_id, sequence);
CREATE TABLE receipts (
    command_id    TEXT PRIMARY KEY,
    payload       TEXT NOT NULL,
    result        TEXT NOT NULL,
    committed_at  REAL NOT NULL
) WITHOUT ROWID;
CREATE TABLE outbox (
    sequence      INTEGER PRIMARY KEY REFERENCES events(sequence),
    aggregate_id  TEXT NOT NULL,
    topic         TEXT NOT NULL,
    published     INTEGER NOT NULL DEFAULT 0
);
"""
# Schema 2: what the journal says about itself; ``journal_id`` (written once, at init or at the
# first writable open of a schema-1 journal) is named by every local process record.
_SCHEMA_2 = """
CREATE TABLE meta (
    key           TEXT PRIMARY KEY,
    value         TEXT NOT NULL
) WITHOUT ROWID;
"""
# Schema 4: fewer pages written per command (issue 14; ``python -m bench.pages`` attributes them).
# - The outbox rows repeated each event's sequence, aggregate and type and nobody marked one
#   published: the outbox is now a view of the events (same columns, ``published`` always 0).
# - Only Goals are looked up by status or by recency (Runs are read by id): both indexes leave
#   the Runs out, and the status index holds only the Goals still moving; a settled Goal is found
#   through the recency index, which carries its status. Queries repeat these WHERE terms word
#   for word (the planner uses a partial index only for a query whose WHERE implies its own);
#   ``kind`` stays a column of both, else the planner reads the table to test that term
#   (GOAL_TERM, ACTIVE_TERM: store.journal.queries).
_SCHEMA_4 = f"""
DROP INDEX aggregates_by_status;
DROP INDEX aggregates_by_recency;
CREATE INDEX goals_active ON aggregates(kind, status, node_id) WHERE {GOAL_TERM} AND {ACTIVE_TERM};
CREATE INDEX goals_by_recency ON aggregates(kind, last_sequence, status) WHERE {GOAL_TERM};
DROP TABLE outbox;
CREATE VIEW outbox (sequence, aggregate_id, topic, published) AS
    SELECT sequence, aggregate_id, type, 0 FROM events;
"""
# Schema 5: the index of events by aggregate cost a leaf page per aggregate a command changed
# (3.5 of 15.9 pages per Execution job). Each event names instead the sequence of its aggregate's
# previous event (``prev``, NULL for the first), and the aggregate row's ``last_sequence`` is
# the newest: one aggregate's history is that chain, walked back from its row (a Run has a few
# events, a Goal a few per Round). "Events after N" stays a range of the events' own key.
_SCHEMA_5 = """
ALTER TABLE events ADD COLUMN prev INTEGER CHECK (prev < sequence);
UPDATE events SET prev = chain.prev FROM (
    SELECT sequence, lag(sequence) OVER (PARTITION BY aggregate_id ORDER BY sequence) AS prev
    FROM events
) AS chain WHERE events.sequence = chain.sequence AND chain.prev IS NOT NULL;
DROP INDEX events_by_aggregate;
"""
_RECORD = "sequence, aggregate_id, version, type, data, committed_at, command_id"  # EventRecord
# Schema 6: each node's latest heartbeat (DESIGN §14), overwritten in place by the node outside
# any command: no event, no receipt, no sequence (``write_presence``).
_SCHEMA_6 = """
CREATE TABLE node_presence (
    node_id       TEXT PRIMARY KEY,
    host          TEXT NOT NULL,
    capacity      INTEGER NOT NULL,
    version       TEXT NOT NULL,
    interval_s    REAL NOT NULL,
    last_seen     REAL NOT NULL,
    started_at    REAL NOT NULL,
    stopped_at    REAL
) WITHOUT ROWID;
"""
_EVENT = "e.sequence, e.aggregate_id, e.version, e.type, e.data, e.committed_at"
# One aggregate's events after :after, newest first from its row, by ``prev``. The chain only
# goes back (prev < sequence), so a damaged one ends rather than loops.
_CHAIN = f"""
WITH RECURSIVE chain(seq) AS (
    SELECT last_sequence FROM aggregates WHERE aggregate_id = :agg AND last_sequence > :after
    UNION ALL
    SELECT e.prev FROM events AS e JOIN chain ON e.sequence = chain.seq
    WHERE e.aggregate_id = :agg AND e.prev > :after AND e.prev < e.sequence
)
SELECT {_EVENT} FROM chain JOIN events AS e ON e.sequence = chain.seq
WHERE e.aggregate_id = :agg"""
_HISTORY = {  # by whether the journal's events are chained (schema 5) or indexed (before)
    True: f"{_CHAIN} ORDER BY e.sequence LIMIT :limit",
    False: f"SELECT {_EVENT} FROM events AS e WHERE aggregate_id = :agg AND sequence > :after"
    " ORDER BY sequence LIMIT :limit",
}


# SQLite's primary result codes (the low byte of ``sqlite_errorcode``) → why, for the operator.
_LOCKED_CODES = {sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED}
_NOT_A_JOURNAL_CODES = {sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT}
_UNREACHABLE_CODES = {
    sqlite3.SQLITE_CANTOPEN,
    sqlite3.SQLITE_PERM,
    sqlite3.SQLITE_AUTH,
    sqlite3.SQLITE_IOERR,
    sqlite3.SQLITE_READONLY,
}


class _StorageErrors:
    """Turn SQLite's exceptions into the StorageError subclass saying why, by result code. A
    class rather than ``@contextmanager``: entered on every command and read, a generator's
    set-up is most of its cost."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        if isinstance(exc, sqlite3.DatabaseError):
            raise _storage_error(exc) from exc


def _storage_error(exc: sqlite3.DatabaseError) -> StorageError:
    code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
    if code in _LOCKED_CODES:
        return JournalLockedError(f"journal is locked by another writer ({exc})")
    if code == sqlite3.SQLITE_FULL:
        return DiskFullError(f"journal disk is full ({exc})")
    if code in _NOT_A_JOURNAL_CODES or not isinstance(exc, sqlite3.OperationalError):
        return NotAJournalError(f"not a usable journal: {exc}")
    if code in _UNREACHABLE_CODES:
        return StorageUnreachableError(f"journal unavailable: {exc}")
    return StorageError(f"journal unavailable: {exc}")


_STORAGE_ERRORS = _StorageErrors()


def _storage_errors() -> _StorageErrors:
    return _STORAGE_ERRORS


def _check_utf8(file: Path) -> None:
    """SQLite names files in UTF-8: a path with no UTF-8 form is refused before anything."""
    try:
        str(file).encode("utf-8")
    except UnicodeEncodeError:
        shown = str(file).encode("utf-8", "backslashreplace").decode()
        raise StorageError(f"journal path is not UTF-8, SQLite cannot open it: {shown}") from None


def make_folder(folder: Path) -> None:
    """Create the journal's folder, or refuse in one line (a file in the way, no permission)."""
    existing = folder
    while not os.path.lexists(existing) and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise StorageError(f"cannot create the journal under {existing}: it is not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StorageError(f"cannot create the journal's folder {folder}: {exc.strerror}") from exc


class SqliteJournal(Journal):
    """A SQLite command journal. Open with ``Journal.open(path)``; use as a context manager."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        path: Path,
        read_only: bool,
        *,
        journal_id: str | None = None,
    ) -> None:
        self._conn: sqlite3.Connection | None = conn
        self._lock = threading.RLock()
        self.path = path
        self.location = str(path)
        self.read_only = read_only
        self.journal_id = journal_id  # None only for a schema-1 journal opened read-only
        # Read as a snapshot (``immutable=1``): a read-only open of a journal in a folder where
        # SQLite cannot create its ``-shm`` file, while no writer runs. Someone else may write
        # there (its owner, root, or through a writable mount of the same folder): _as_of says
        # which file state the snapshot is, and ``replaced`` says when it is outdated.
        self.immutable = False
        self._as_of: tuple[int, int, int] | None = None
        self.inode = os.stat(path).st_ino
        self.synchronous: Synchronous = "FULL"  # as opened (``durable_at_end`` relaxes it)
        self._deferring = 0  # open ``durable_at_end`` blocks

    # --- lifecycle -----------------------------------------------------------------------------

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
    ) -> SqliteJournal:
        """Open (and, when writable and ``create``, create) the journal file at ``location``.

        Raises JournalMissingError when the file is missing (and may not be created),
        NotAJournalError when it is not SQLite, another application's database, has a
        newer schema, or is not the journal ``journal_id`` names (when given).
        """
        if synchronous not in ("FULL", "NORMAL"):
            raise InvalidInputError("synchronous must be FULL or NORMAL")
        file = resolve_journal_path(location)
        _check_utf8(file)
        exists = journal_file_exists(file)
        if not exists and (read_only or not create):
            raise JournalMissingError(f"journal missing: {file}")
        if exists and not file.is_file():
            raise NotAJournalError(f"not a journal file: {file}")
        if not read_only:
            make_folder(file.parent)
        try:  # SQLite's messages do not name the file: say which one
            uri = "file:" + urllib.parse.quote(str(file)) + ("?mode=ro" if read_only else "")
            conn = _connect(uri, busy_timeout_ms)
            immutable = False
            try:
                with _storage_errors():
                    # Identify the file with reads alone: switching to WAL rewrites the header of
                    # whatever file this is, so another application's database is refused first.
                    try:
                        version = _identify(conn, file, initialize=create and not read_only)
                    except sqlite3.OperationalError as exc:
                        if not (read_only and _frozen_snapshot(file, exc)):
                            raise
                        conn.close()
                        conn = _connect(uri + "&immutable=1", busy_timeout_ms)
                        immutable = True
                        version = _identify(conn, file, initialize=False)
                    if not read_only:
                        conn.execute("PRAGMA journal_mode = WAL")
                        conn.execute(f"PRAGMA synchronous = {synchronous}")
                        if version < SCHEMA_VERSION:
                            _migrate(conn)
                    found = _journal_id(conn)
                if journal_id is not None and found != journal_id:
                    raise NotAJournalError(f"another journal than {journal_id} is there now")
                journal = cls(conn, file, read_only, journal_id=found)
                journal.immutable = immutable
                journal._as_of = _file_state(file) if immutable else None
                journal.synchronous = synchronous
                return journal
            except BaseException:
                conn.close()
                raise
        except StorageError as exc:
            if str(file) in exc.message:
                raise
            writable = read_only or os.access(file.parent, os.W_OK)
            why = "" if writable else " (its folder is not writable: read-only or no permission)"
            raise type(exc)(f"{exc.message}: {file}{why}") from exc

    @classmethod
    def wakeups(cls, location: str, node_id: str | None = None) -> WakeUps:
        """A file watcher on the journal's folder (a commit changes ``<db>-wal``): every
        commit wakes every watcher (a file change cannot say whose it is)."""
        from store.journal.watch import (
            JournalWatcher,  # watch builds on the interface, not on SQLite
        )

        return JournalWatcher(location)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    @property
    def closed(self) -> bool:
        return self._conn is None

    def __enter__(self) -> SqliteJournal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise JournalClosedError("journal is closed")
        return self._conn

    # --- commands ------------------------------------------------------------------------------

    def execute(
        self,
        *,
        command_id: str,
        payload: Mapping[str, Any],
        expected: Mapping[str, int | None],
        decide: Decide,
    ) -> Outcome:
        """Run one command atomically.

        ``expected`` names every aggregate the command reads, with the version the caller read
        (``None``: no version check, e.g. creation). Refusal order: closed / read-only, then
        replay or CommandConflictError, then VersionConflictError, then the decision's own errors.
        """
        self._connection()
        if self.read_only:
            raise JournalReadOnlyError("journal is open read-only", **first_ids(expected))
        key = command_key(payload, expected)
        with self._write_transaction() as conn:
            return run_command(_SqliteCommand(conn, command_id), command_id, key, expected, decide)

    def execute_batch(self, commands: Sequence[Command]) -> list[Outcome | RefineError]:
        """Run ``commands`` in one transaction, each as ``execute`` runs it alone: its own
        receipt, events and refusal (a refused command writes nothing, the others commit), in
        order. One commit for all (ADR-003's transactional batching). A StorageError fails the
        whole batch: nothing is written."""
        self._connection()
        if self.read_only:
            raise JournalReadOnlyError("journal is open read-only")
        keys = [command_key(c.payload, c.expected) for c in commands]
        results: list[Outcome | RefineError] = []
        with self._write_transaction() as conn:
            for command, key in zip(commands, keys, strict=True):
                conn.execute("SAVEPOINT command")
                result = run_batched(_SqliteCommand(conn, command.command_id), command, key)
                if isinstance(result, RefineError):  # refused: this command writes nothing
                    conn.execute("ROLLBACK TO command")
                conn.execute("RELEASE command")
                results.append(result)
        return results

    @contextmanager
    def _write_transaction(self) -> Iterator[sqlite3.Connection]:
        """``BEGIN IMMEDIATE`` … ``COMMIT`` (rolled back on any error)."""
        with self._lock, _storage_errors():
            conn = self._connection()
            conn.execute("BEGIN IMMEDIATE")
            try:
                # An unlinked or replaced file still accepts writes through our old handle:
                # they would be lost (or mixed into the new file through its -wal). Refuse.
                if self.file_replaced():
                    raise JournalMissingError(
                        f"journal {self.path} was deleted or replaced since it was opened:"
                        " reopen it"
                    )
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    # --- reads ---------------------------------------------------------------------------------

    def load(self, aggregate_id: str) -> Stored | None:
        with self._lock, _storage_errors():
            return self._load(self._connection(), aggregate_id)

    def load_many(self, aggregate_ids: Sequence[str]) -> dict[str, Stored]:
        """The stored aggregates among ``aggregate_ids`` (missing ones are absent)."""
        found: dict[str, Stored] = {}
        with self._lock, _storage_errors():
            conn = self._connection()
            for start in range(0, len(aggregate_ids), 500):
                chunk = list(aggregate_ids[start : start + 500])
                marks = ",".join("?" * len(chunk))
                for row in conn.execute(
                    "SELECT aggregate_id, version, state FROM aggregates"
                    f" WHERE aggregate_id IN ({marks})",
                    chunk,
                ):
                    found[row[0]] = stored_row(row)
        return found

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
        for ASCII), a coarse pre-filter the caller refines on the parsed state.
        """
        statuses = None if status is None else [status] if isinstance(status, str) else status
        # A page by status (``after_id``: a listing's) finds its ids in a status index alone
        # (it holds them), then reads just those rows: sorting the matches' whole rows by id
        # cost 5× more per page.
        ids_first = statuses is not None and limit is not None and after_id is not None
        columns = "aggregate_id" if ids_first else "aggregate_id, version, state"
        if newest_first:
            columns += ", last_sequence"  # where its next page begins (``before``)
        sql, args = of_kind(SQLITE, f"SELECT {columns} FROM aggregates", kind, statuses)
        if statuses is None and limit is not None and not newest_first:
            # A page in id order: along the primary key from ``after_id``. Given the Goals'
            # partial index instead, the planner read and sorted every Goal for each page (a
            # million Goals listed in a thousand pages: a billion rows). The unary + keeps the
            # kind term from matching that index's WHERE.
            sql, args = f"SELECT {columns} FROM aggregates WHERE +kind = ?", [kind]
        sql, args = filtered_page(
            SQLITE,
            sql,
            args,
            contains=contains,
            node_id=node_id,
            after_id=after_id,
            newest_first=newest_first,
            limit=limit,
            offset=offset,
            before=before,
        )
        if ids_first:
            sql = (
                "SELECT aggregate_id, version, state FROM aggregates"
                f" WHERE aggregate_id IN ({sql}) ORDER BY aggregate_id"
            )
        with self._lock, _storage_errors():
            return [stored_row(row) for row in self._connection().execute(sql, args)]

    def state_fields(
        self,
        kind: str,
        names: Sequence[str],
        *,
        limit: int | None = None,
        before: tuple[int, str] | None = None,
    ) -> list[tuple[str, int, tuple[Any, ...]]]:
        """Aggregates newest first with some fields of each state (see ``Journal``), found by
        SQLite's ``json_extract``, in C: the dashboard's filter index of a million Goals was
        built in 9–11 s instead of 22–34 s of reading and parsing every state here."""
        paths = [f"'$.{name}'" for name in check_field_names(names)]
        # Two or more paths give a JSON array of the values (one path gives the bare value).
        extract = f"json_extract(state, {', '.join(paths if len(paths) > 1 else paths * 2)})"

        def page(column: str) -> tuple[str, list[Any]]:
            sql, args = of_kind(
                SQLITE, f"SELECT aggregate_id, last_sequence, {column} FROM aggregates", kind, None
            )
            return filtered_page(
                SQLITE, sql, args, contains=None, node_id=None, after_id=None,
                newest_first=True, limit=limit, offset=0, before=before,
            )  # fmt: skip

        with self._lock, _storage_errors():
            conn = self._connection()
            try:
                rows = conn.execute(*page(extract)).fetchall()
            except sqlite3.OperationalError as exc:
                if "malformed JSON" not in str(exc):
                    raise
                # A state that is not JSON (a damaged row): this page's states parsed here.
                texts = conn.execute(*page("state")).fetchall()
                return [(r[0], int(r[1]), fields_of(r[2], names)) for r in texts]
        count = len(names)
        return [(r[0], int(r[1]), tuple(loads(r[2])[:count])) for r in rows]

    def count(self, kind: str, status: str | None = None) -> int:
        statuses = None if status is None else [status]
        sql, args = of_kind(SQLITE, "SELECT count(*) FROM aggregates", kind, statuses)
        with self._lock, _storage_errors():
            return int(self._connection().execute(sql, args).fetchone()[0])

    def history(self, aggregate_id: str, after_sequence: int = 0, limit: int = 100) -> list[Event]:
        """One aggregate's events in commit order, after ``after_sequence``, at most ``limit``."""
        check_page(after_sequence, limit)
        with self._lock, _storage_errors():
            conn = self._connection()
            # Read per call: a writer may migrate the journal while we hold it open read-only.
            chained = conn.execute("PRAGMA user_version").fetchone()[0] >= CHAINED
            args = {"agg": aggregate_id, "after": after_sequence, "limit": limit}
            return [event_row(row) for row in conn.execute(_HISTORY[chained], args)]

    def histories(self, aggregate_ids: Sequence[str]) -> dict[str, list[Event]]:
        """Each aggregate's whole history, read one by one: a read costs no round trip here."""
        found: dict[str, list[Event]] = {}
        for aggregate_id in aggregate_ids:
            events = found[aggregate_id] = self.history(aggregate_id, 0, MAX_PAGE)
            while len(events) % MAX_PAGE == 0 and events:  # a full page: maybe more
                if not (page := self.history(aggregate_id, events[-1].sequence, MAX_PAGE)):
                    break
                events += page
        return found

    def events_after(self, sequence: int, limit: int = MAX_PAGE) -> list[Event]:
        """Every aggregate's events after ``sequence`` (an index range scan), oldest first."""
        check_page(sequence, limit)
        with self._lock, _storage_errors():
            rows = self._connection().execute(
                "SELECT sequence, aggregate_id, version, type, data, committed_at FROM events"
                " WHERE sequence > ? ORDER BY sequence LIMIT ?",
                (sequence, limit),
            )
            return [event_row(row) for row in rows]

    def event_records(
        self, after_sequence: int, limit: int = MAX_PAGE, types: Sequence[str] | None = None
    ) -> list[EventRecord]:
        """Events after ``after_sequence`` as stored (data unparsed), maybe only of ``types``."""
        check_page(after_sequence, limit)
        sql, args = f"SELECT {_RECORD} FROM events WHERE sequence > ?", list[Any]([after_sequence])
        if types is not None:
            sql += f" AND type IN ({','.join('?' * len(types))})"
            args += types
        with self._lock, _storage_errors():
            rows = self._connection().execute(f"{sql} ORDER BY sequence LIMIT ?", [*args, limit])
            return rows.fetchall()

    def count_by_status_and_node(
        self, kind: str, statuses: Sequence[str] | None = None
    ) -> dict[tuple[str | None, str | None], int]:
        """Aggregates of ``kind`` per (status, node), maybe only of ``statuses`` (the Goals still
        moving: over their own index)."""
        select = "SELECT status, node_id, count(*) FROM aggregates"
        sql, args = of_kind(SQLITE, select, kind, statuses)
        with self._lock, _storage_errors():
            rows = self._connection().execute(f"{sql} GROUP BY status, node_id", args)
            return {(row[0], row[1]): int(row[2]) for row in rows}

    def outbox(self, after_sequence: int = 0, limit: int = MAX_PAGE) -> list[tuple[int, str, str]]:
        """Outbox rows ``(sequence, aggregate_id, topic)`` after ``after_sequence``."""
        check_page(after_sequence, limit)
        with self._lock, _storage_errors():
            rows = self._connection().execute(
                "SELECT sequence, aggregate_id, topic FROM outbox WHERE sequence > ?"
                " ORDER BY sequence LIMIT ?",
                (after_sequence, limit),
            )
            return [(int(r[0]), str(r[1]), str(r[2])) for r in rows]

    def last_sequence(self) -> int:
        with self._lock, _storage_errors():
            row = self._connection().execute("SELECT max(sequence) FROM events").fetchone()
            return int(row[0] or 0)

    def last_commit(self) -> tuple[int, float | None]:
        """The last event's sequence and commit time (0, None for an empty journal)."""
        with self._lock, _storage_errors():
            row = (
                self._connection()
                .execute("SELECT sequence, committed_at FROM events ORDER BY sequence DESC LIMIT 1")
                .fetchone()
            )
        return (int(row[0]), float(row[1])) if row else (0, None)

    def data_version(self) -> int:
        """Changes exactly when another connection commits: a cheap "anything new?" gate."""
        with self._lock, _storage_errors():
            return int(self._connection().execute("PRAGMA data_version").fetchone()[0])

    @contextmanager
    def durable_at_end(self) -> Iterator[None]:
        """Commits inside run at ``synchronous=NORMAL`` (WAL mode: a commit is not fsynced; a
        power cut loses the last ones, whole and in order; a SIGKILL none), then the WAL is
        fsynced once: what was committed is then as durable as FULL had made it."""
        if self.read_only or self.synchronous != "FULL" or self._deferring:
            self._deferring += 1  # nested, or nothing to defer: the outer block syncs
            try:
                yield
            finally:
                self._deferring -= 1
            return
        with self._lock, _storage_errors():
            self._connection().execute("PRAGMA synchronous = NORMAL")
        self._deferring += 1
        try:
            yield
        finally:
            self._deferring -= 1
            with self._lock, _storage_errors():
                conn = self._connection()
                conn.execute("PRAGMA synchronous = FULL")
                self._sync_wal()

    def _sync_wal(self) -> None:
        """fsync the ``-wal`` file: every frame committed so far reaches the disk. A frame
        already checkpointed into the database was synced there by the checkpoint (NORMAL
        syncs the WAL before, and the database after, each checkpoint)."""
        try:
            fd = os.open(f"{self.path}-wal", os.O_RDONLY)
        except FileNotFoundError:
            return  # no WAL now: every commit is in the (synced) database
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    @contextmanager
    def held(self) -> Iterator[SqliteJournal]:
        """A file journal holds no server connection: nothing to keep."""
        yield self

    @contextmanager
    def snapshot(self) -> Iterator[SqliteJournal]:
        """Several reads that see one consistent state of the journal."""
        with self._lock, _storage_errors():
            conn = self._connection()
            if conn.in_transaction:
                yield self
                return
            conn.execute("BEGIN")
            try:
                yield self
            finally:
                if conn.in_transaction:
                    conn.execute("COMMIT")

    def export_rows(self, table: str) -> Iterator[list[tuple[Any, ...]]]:
        """Every row of one stored table (``COPY_TABLES``' columns), in batches, in key order.
        Call inside :meth:`snapshot` so the tables agree with one another."""
        columns, key = copy_table(table)
        with self._lock, _storage_errors():
            cur = self._connection().execute(
                f"SELECT {', '.join(columns)} FROM {table} ORDER BY {key}"
            )
            while batch := cur.fetchmany(COPY_BATCH):
                yield batch

    def import_rows(self, batches: Iterable[tuple[str, list[tuple[Any, ...]]]]) -> int:
        """Write a whole journal's rows into this empty one, in one transaction; returns the
        number of rows. TargetNotEmptyError (nothing written) when it holds anything."""
        if self.read_only:
            raise JournalReadOnlyError("journal is open read-only")
        from store.journal.copy_chain import ChainHeads

        count = 0
        with self._lock, _storage_errors():
            conn = self._connection()
            heads = ChainHeads()  # each aggregate's newest event so far, on disk
            conn.execute("BEGIN IMMEDIATE")
            try:
                if any(
                    conn.execute(f"SELECT 1 FROM {table} LIMIT 1").fetchone()
                    for table, _, _ in COPY_TABLES
                ):
                    raise TargetNotEmptyError(f"journal {self.path} is not empty")
                for table, rows in batches:
                    columns, _ = copy_table(table)
                    if table == "outbox":  # a view of the events: it must agree with them
                        _check_outbox_rows(conn, rows)
                        count += len(rows)
                        continue
                    if table == "events":  # in sequence order: chain each to the one before
                        columns, rows = (*columns, "prev"), heads.chained(rows)
                    marks = ", ".join("?" * len(columns))
                    conn.executemany(
                        f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})", rows
                    )
                    count += len(rows)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            finally:
                heads.close()
        return count

    @contextmanager
    def commits_held(self, aggregate_id: str | None = None) -> Iterator[None]:
        """The write lock, held without writing (whatever ``aggregate_id``: every commit
        waits); rolled back at the end (see ``Journal``)."""
        with self._lock:
            with _storage_errors():
                conn = self._connection()
                conn.execute("BEGIN IMMEDIATE")
            try:
                yield
            finally:
                with _storage_errors():
                    conn.execute("ROLLBACK")

    def changes(self) -> ChangeSource:
        return _DataVersionGate(self)

    def replaced(self) -> bool:
        return self.file_replaced() or self._snapshot_outdated()

    def _snapshot_outdated(self) -> bool:
        """A snapshot read of a file that a writer has touched since: it made a ``-wal`` (then
        a reopen reads through it, live), or committed and checkpointed it away already."""
        if self._as_of is None:
            return False
        return os.path.exists(f"{self.path}-wal") or _file_state(self.path) != self._as_of

    def file_replaced(self) -> bool:
        """True when the path now names another file (or none) than the one we opened."""
        try:
            return os.stat(self.path).st_ino != self.inode
        except FileNotFoundError:
            return True

    # --- node presence (DESIGN §14): observations beside the command journal, never in it ---

    def write_presence(self, beat: Beat) -> None:
        """Overwrite node ``beat.node_id``'s presence row, stamped with SQLite's clock: one
        small transaction of its own, with no event, receipt or sequence.

        It waits for another writer's lock at most one interval, and never more than a second
        (then JournalLockedError): a beat must not hold up its node's loop for the whole
        busy timeout while a long writer holds the journal; the next beat tries again."""
        from store.journal.presence import beat_row

        row = beat_row(beat)
        if self.read_only:
            raise JournalReadOnlyError("journal is open read-only")
        with self._lock, _storage_errors():
            conn = self._connection()
            busy_ms = conn.execute("PRAGMA busy_timeout").fetchone()[0]
            conn.execute(f"PRAGMA busy_timeout = {int(min(1.0, beat.interval_s) * 1000)}")
            try:
                conn.execute(_WRITE_PRESENCE, row)
            finally:
                conn.execute(f"PRAGMA busy_timeout = {int(busy_ms)}")

    def presence(self) -> tuple[float, list[Presence]]:
        """Every node's presence row (by node id) and SQLite's clock now; none before
        schema 6 (a journal opened read-only as it was)."""
        from store.journal.presence import PRESENCE_COLUMNS, presence_row

        with self._lock, _storage_errors():
            conn = self._connection()
            now = float(conn.execute(f"SELECT {_SQLITE_NOW}").fetchone()[0])
            if conn.execute("PRAGMA user_version").fetchone()[0] < PRESENCE:
                return now, []
            rows = conn.execute(f"SELECT {PRESENCE_COLUMNS} FROM node_presence ORDER BY node_id")
            return now, [presence_row(row) for row in rows]

    def goal_nodes(self) -> list[str]:
        """Every node id a Goal names, sorted."""
        with self._lock, _storage_errors():
            rows = self._connection().execute(
                f"SELECT DISTINCT node_id FROM aggregates WHERE {GOAL_TERM} ORDER BY node_id"
            )
            return [str(row[0]) for row in rows if row[0] is not None]

    @staticmethod
    def _load(conn: sqlite3.Connection, aggregate_id: str) -> Stored | None:
        row = conn.execute(
            "SELECT aggregate_id, version, state FROM aggregates WHERE aggregate_id = ?",
            (aggregate_id,),
        ).fetchone()
        return stored_row(row) if row else None


def _check_outbox_rows(conn: sqlite3.Connection, rows: list[tuple[Any, ...]]) -> None:
    """Refuse a copied outbox row that is not the one our view derives from its event."""
    if not rows:
        return
    low, high = rows[0][0], rows[-1][0]
    derived = conn.execute(
        "SELECT sequence, aggregate_id, topic, published FROM outbox"
        " WHERE sequence BETWEEN ? AND ? ORDER BY sequence",
        (low, high),
    ).fetchall()
    if [tuple(r) for r in rows] != derived:
        raise InvalidInputError(
            f"the source's outbox rows {low}..{high} do not match its events: run refine check"
        )


def _connect(uri: str, busy_timeout_ms: int) -> sqlite3.Connection:
    with _storage_errors():
        conn = sqlite3.connect(
            uri,
            uri=True,
            isolation_level=None,
            timeout=busy_timeout_ms / 1000,
            check_same_thread=False,
        )
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
    return conn


def _frozen_snapshot(file: Path, exc: sqlite3.OperationalError) -> bool:
    """A read-only open failed because SQLite could not create its side files in a folder
    this process may not write. Without a ``-wal`` file no writer runs and every commit is in
    the database file: reading it as immutable is exact, until a writer that may write the
    folder starts (``SqliteJournal.replaced`` notices). Decided by the result code and the
    folder itself, never by the message's words: a writable folder that merely ran out of
    space or inodes is not a snapshot."""
    code = getattr(exc, "sqlite_errorcode", 0) & 0xFF  # READONLY_* share the primary code
    if code not in (sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_READONLY):
        return False
    return not os.access(file.parent, os.W_OK) and not os.path.exists(f"{file}-wal")


def _file_state(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


class _DataVersionGate:
    """``PRAGMA data_version`` changes exactly when another connection commits (≈ 5 µs); then
    the last sequence says whether that was a command. A node's heartbeat (store.journal.presence)
    commits too, but adds no event: it must not wake a worker, a node or a dashboard into a
    reread (PostgreSQL's gate reads the sequence alone)."""

    def __init__(self, journal: SqliteJournal) -> None:
        self._journal = journal
        self._seen: int | None = None
        self._sequence: int | None = None

    def changed(self) -> bool:
        version = self._journal.data_version()
        if version == self._seen:
            return False
        self._seen = version
        sequence = self._journal.last_sequence()
        moved, self._sequence = sequence != self._sequence, sequence
        return moved


def _identify(conn: sqlite3.Connection, file: Path, *, initialize: bool) -> int:
    """Refuse files that are not our journal, reading only; the schema version found (0: a
    new, empty file, accepted only when ``initialize``: a journal truncated to zero bytes must
    be refused, not silently reborn empty)."""
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    app_id = conn.execute("PRAGMA application_id").fetchone()[0]
    if 1 <= version <= SCHEMA_VERSION and app_id == APPLICATION_ID:
        return version
    if version > SCHEMA_VERSION and app_id == APPLICATION_ID:
        raise NotAJournalError(f"journal {file} has schema {version}, newer than {SCHEMA_VERSION}")
    tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
    if version != 0 or app_id not in (0, APPLICATION_ID) or tables:
        raise NotAJournalError(f"not a refine journal: {file}")
    if not initialize:
        raise NotAJournalError(f"not a refine journal (empty file): {file}")
    return 0


def _migrate(conn: sqlite3.Connection) -> None:
    """Bring the schema forward to SCHEMA_VERSION in one transaction (another process may be
    doing the same: the version is read again under the write lock)."""
    import uuid  # here, not at the top: only a new or an old journal needs an id

    conn.execute("BEGIN IMMEDIATE")
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version == 0:
            _run_script(conn, _SCHEMA)
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        if version < 2:
            _run_script(conn, _SCHEMA_2)
            conn.execute(
                "INSERT INTO meta (key, value) VALUES ('journal_id', ?)", (str(uuid.uuid4()),)
            )
        if 0 < version < 3:  # a receipt keeps the digest of its command's canonical text
            conn.create_function("refine_key_digest", 1, key_digest, deterministic=True)
            conn.execute("UPDATE receipts SET payload = refine_key_digest(payload)")
        if version < 4:
            _run_script(conn, _SCHEMA_4)
        if version < 5:
            _run_script(conn, _SCHEMA_5)
        if version < PRESENCE:
            _run_script(conn, _SCHEMA_6)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


# SQLite's clock in seconds since the epoch (ms resolution); one value within a statement.
_SQLITE_NOW = "(julianday('now') - 2440587.5) * 86400.0"
# A beat (``beat_row``'s names): a ``start`` also resets ``started_at``; only ``stop`` marks.
_WRITE_PRESENCE = f"""
INSERT INTO node_presence
    (node_id, host, capacity, version, interval_s, last_seen, started_at, stopped_at)
VALUES (:node_id, :host, :capacity, :version, :interval_s, {_SQLITE_NOW}, {_SQLITE_NOW},
        CASE WHEN :kind = 'stop' THEN {_SQLITE_NOW} END)
ON CONFLICT (node_id) DO UPDATE SET
    host = excluded.host, capacity = excluded.capacity, version = excluded.version,
    interval_s = excluded.interval_s, last_seen = excluded.last_seen,
    started_at = CASE WHEN :kind = 'start' THEN excluded.started_at ELSE started_at END,
    stopped_at = excluded.stopped_at
"""


def _run_script(conn: sqlite3.Connection, script: str) -> None:
    for statement in script.split(";"):
        if statement.strip():
            conn.execute(statement)


def _journal_id(conn: sqlite3.Connection) -> str | None:
    if conn.execute("PRAGMA user_version").fetchone()[0] < 2:
        return None
    row = conn.execute("SELECT value FROM meta WHERE key = 'journal_id'").fetchone()
    return str(row[0]) if row else None


class _SqliteCommand:
    """The storage steps of one command inside ``BEGIN IMMEDIATE`` (which already excludes
    every other writer, so loading needs no row locks)."""

    def __init__(self, conn: sqlite3.Connection, command_id: str) -> None:
        self.conn = conn
        self.command_id = command_id
        self.heads: dict[str, int] = {}  # aggregate → its newest event's sequence (chain head)
        self.found_receipt: tuple[str, str] | None = None
        self.last: int | None = None  # the newest event's sequence, once read

    def load(self, aggregate_ids: Sequence[str]) -> dict[str, Stored | None]:
        """The aggregates, and in the same statement (one step of the VM, not three) this
        command's receipt and the newest sequence: the write lock is held from BEGIN IMMEDIATE
        to COMMIT, so what ``receipt`` and ``append`` would read later is what this reads."""
        marks = ",".join("?" * len(aggregate_ids))
        rows = self.conn.execute(
            "SELECT 0, aggregate_id, version, state, last_sequence FROM aggregates"
            f" WHERE aggregate_id IN ({marks})"
            " UNION ALL SELECT 1, payload, result, NULL, NULL FROM receipts WHERE command_id = ?"
            " UNION ALL SELECT 2, (SELECT max(sequence) FROM events), NULL, NULL, NULL",
            [*aggregate_ids, self.command_id],
        ).fetchall()
        found: dict[str, Stored] = {}
        for tag, *row in rows:
            if tag == 0:
                self.heads[str(row[0])] = int(row[3])
                found[str(row[0])] = stored_row(row)
            elif tag == 1:
                self.found_receipt = (row[0], row[1])
            else:
                self.last = row[0] or 0
        return {agg: found.get(agg) for agg in aggregate_ids}

    def receipt(self, command_id: str) -> tuple[str, str] | None:
        if command_id == self.command_id:
            return self.found_receipt
        found: tuple[str, str] | None = self.conn.execute(
            "SELECT payload, result FROM receipts WHERE command_id = ?", (command_id,)
        ).fetchone()
        return found

    def events_of(self, aggregate_id: str, up_to_version: int) -> list[Event]:
        rows = self.conn.execute(
            f"{_CHAIN} AND e.version <= :version ORDER BY e.sequence",
            {"agg": aggregate_id, "after": 0, "version": up_to_version},
        )
        return [event_row(row) for row in rows]

    def append(
        self, events: Sequence[tuple[str, int, str, str]], now: float, command_id: str
    ) -> list[int]:
        if not events:
            return []
        # Sequences follow the newest one (BEGIN IMMEDIATE excludes every other writer): known
        # before the INSERT, so each event names its aggregate's previous one. The outbox is a
        # view of these rows.
        last = self.last
        if last is None:
            last = self.conn.execute("SELECT max(sequence) FROM events").fetchone()[0] or 0
        sequences = list(range(last + 1, last + 1 + len(events)))
        self.last = sequences[-1]
        args: list[Any] = []
        for seq, (agg, version, type_, data) in zip(sequences, events, strict=True):
            args += (seq, agg, version, type_, data, now, command_id, self.heads.get(agg) or None)
            self.heads[agg] = seq
        self.conn.execute(
            "INSERT INTO events (sequence, aggregate_id, version, type, data, committed_at,"
            f" command_id, prev) VALUES {','.join(['(?, ?, ?, ?, ?, ?, ?, ?)'] * len(events))}",
            args,
        )
        return sequences

    def put(self, row: AggregateRow) -> None:
        """INSERT a new aggregate, UPDATE an existing one (cheaper than an upsert)."""
        if row.new:
            self.conn.execute(
                "INSERT INTO aggregates (aggregate_id, kind, version, status, node_id,"
                " last_sequence, state) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    row.aggregate_id,
                    row.kind,
                    row.version,
                    row.status,
                    row.node_id,
                    row.last_sequence,
                    row.state,
                ),
            )
        else:
            self.conn.execute(
                # max(): a change without events keeps the head of its aggregate's chain.
                "UPDATE aggregates SET version = ?, status = ?, node_id = ?,"
                " last_sequence = max(last_sequence, ?), state = ? WHERE aggregate_id = ?",
                (
                    row.version,
                    row.status,
                    row.node_id,
                    row.last_sequence,
                    row.state,
                    row.aggregate_id,
                ),
            )

    def write(self, writes: Writes) -> list[int]:
        return write_steps(self, writes)

    def add_receipt(self, command_id: str, key: str, result: str, now: float) -> None:
        self.conn.execute(
            "INSERT INTO receipts (command_id, payload, result, committed_at) VALUES (?, ?, ?, ?)",
            (command_id, key, result, now),
        )
