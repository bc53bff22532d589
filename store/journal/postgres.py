"""The command journal on PostgreSQL (psycopg 3): the SQLite journal's semantics on a server.

One transaction per command. The aggregates it reads are locked (``SELECT … FOR UPDATE``) and
version-checked by the shared command code (``store.journal.core``). Sequences come from one
head row (``UPDATE … RETURNING``) whose lock is held to commit: writers that append events
commit in sequence order, so a reader of "events after N" can never skip an event that commits
late. The same transaction sends ``NOTIFY`` with the new last sequence and the nodes the command
touches (``notice_suffix``) on the journal's channel (every commit: dashboards, followers), and
on each of those nodes' own channels, or on the all-nodes channel when it cannot say
(``node_channel``): a node listens to its own two, so the server never sends it the commits of
other nodes. A command is two round
trips (the decision, in Python, needs the locked state): the locks and the receipt, then one
call of the schema's ``write_command()`` and COMMIT; its statements are prepared once per
connection.

Tables live in their own schema (default ``refine``; ``?schema=NAME`` in the URL or the
``schema`` argument picks another), always quoted in SQL (a reserved word is a name like any
other). A database without our schema is refused unless the journal is being created (``init``);
a schema holding anything else (a table, a function, a type: any object) is never touched. A
writable handle is one the role may write with: a role that may only read is refused at open.

One module over 600 lines because it is the whole of one backend: its schema and roles, its
connections and every statement of the ``Journal`` interface change together (what both
backends build alike is in ``store.journal.core`` and ``store.journal.queries``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

import psycopg
from psycopg import errors as pgerrors
from psycopg.sql import Identifier

from store.errors import (
    DiskFullError,
    InvalidInputError,
    JournalClosedError,
    JournalLockedError,
    JournalMissingError,
    JournalNotPermittedError,
    JournalReadOnlyError,
    NotAJournalError,
    RefineError,
    ServerFullError,
    StorageError,
    StorageUnreachableError,
    TargetNotEmptyError,
)
from store.journal import session_end
from store.journal.api import Journal, WakeUps
from store.journal.core import (
    COPY_BATCH,
    COPY_TABLES,
    MAX_PAGE,
    Command,
    Decide,
    Event,
    EventRecord,
    Outcome,
    Stored,
    Writes,
    check_page,
    command_key,
    copy_table,
    event_row,
    fields_of,
    first_ids,
    linked_id,
    run_batched,
    run_command,
    stored_row,
    text_field,
)
from store.journal.locations import server_journal_dir
from store.journal.presence import PRESENCE_COLUMNS, Beat, Presence, beat_row, presence_row
from store.journal.queries import (
    ACTIVE_TERM,
    GOAL_TERM,
    POSTGRES,
    check_field_names,
    filtered_page,
    of_kind,
)
from store.journal.slots import Sharing, Slot, sharing
from store.journal.url import DEFAULT_SCHEMA, check_ports, parse_url, redact, valid_schema

Synchronous = Literal["FULL", "NORMAL"]
SCHEMA_VERSION = 7
APPLICATION = "refine-journal"
CHANNEL = "refine_journal"
NAME_MAX = 63  # bytes in a PostgreSQL identifier (NAMEDATALEN - 1), a NOTIFY channel's too
_RECORD = "sequence, aggregate_id, version, type, data, committed_at, command_id"  # EventRecord
_IDLE = psycopg.pq.TransactionStatus.IDLE
_GENERIC = "SET LOCAL plan_cache_mode = force_generic_plan; "  # ``_prepared_rows(generic=True)``
_NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # store.names' rule, ASCII: a node id
_UNPREPARED = pgerrors.InvalidSqlStatementName
_RETRIES = 8  # a lost race on a new row, a deadlock or a serialization failure: run it again
_T = TypeVar("_T")

# A decided command's writes in one call (``_PostgresCommand.write``): the sequences are taken
# from the head row here, so the client sends its writes without waiting for them. ``writes`` is
# ``[events, rows]`` as JSON: an event ``[aggregate_id, version, type, data]``, a row
# ``[aggregate_id, kind, version, status, node_id, last event (1-based, 0: none), state, new]``;
# ``writes->2`` (schema 6), text appended to the NOTIFY payload after the last sequence: the
# nodes the command touches (``notice_suffix``). The head is updated first, before any row is
# inserted (as every writer does: a lock order without cycles).
_WRITE_COMMAND = """
CREATE OR REPLACE FUNCTION {s}.write_command(
    command_id text, key text, result text, at double precision, channel text, writes jsonb
) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    n integer := jsonb_array_length(writes->0);
    last bigint := 0;
    a jsonb;
BEGIN
    IF n > 0 THEN
        UPDATE {s}.head SET sequence = sequence + n RETURNING sequence INTO last;
        INSERT INTO {s}.events
                (sequence, aggregate_id, version, type, data, committed_at, command_id)
            SELECT last - n + e.i, e.v->>0, (e.v->>1)::bigint, e.v->>2, e.v->>3, at,
                   write_command.command_id
            FROM jsonb_array_elements(writes->0) WITH ORDINALITY AS e(v, i);
    END IF;
    -- One row at a time, each by its key: a join would be planned once, as a scan.
    FOR a IN SELECT jsonb_array_elements(writes->1) LOOP
        IF (a->>7)::boolean THEN
            INSERT INTO {s}.aggregates
                    (aggregate_id, kind, version, status, node_id, last_sequence, state)
                VALUES (a->>0, a->>1, (a->>2)::bigint, a->>3, a->>4,
                        CASE WHEN (a->>5)::integer > 0 THEN last - n + (a->>5)::integer
                             ELSE 0 END, a->>6);
        ELSE
            UPDATE {s}.aggregates SET version = (a->>2)::bigint, status = a->>3,
                    node_id = a->>4, state = a->>6,
                    last_sequence = CASE WHEN (a->>5)::integer > 0
                                         THEN last - n + (a->>5)::integer ELSE 0 END
                WHERE aggregate_id = a->>0;
        END IF;
    END LOOP;
    INSERT INTO {s}.receipts (command_id, payload, result, committed_at)
        VALUES (write_command.command_id, key, result, at);
    IF n > 0 THEN
        PERFORM pg_notify(channel, last::text);
    END IF;
    RETURN last;
END
$$;
"""
# Schema 6: the payload names the nodes the command touches, when the client says (an older
# client's writes have no third element: "<last>" alone, which wakes everyone).
_WRITE_COMMAND_6 = _WRITE_COMMAND.replace(
    "pg_notify(channel, last::text)", "pg_notify(channel, last::text || coalesce(writes->>2, ''))"
)
# Schema 7: the same notification also on each named node's channel, or on the all-nodes one
# when the command names none (``node_channel``: the same names, computed here from the
# journal's channel and each node; an older client's writes, "<last> a b" or "<last>", are
# routed alike). A node LISTENs to its own and the all-nodes channel only.
_WRITE_COMMAND_7 = _WRITE_COMMAND.replace(
    "    a jsonb;\n", "    a jsonb;\n    note text;\n    tail text;\n"
).replace(
    "        PERFORM pg_notify(channel, last::text);\n",
    """        note := last::text || coalesce(writes->>2, '');
        PERFORM pg_notify(channel, note);
        FOREACH tail IN ARRAY coalesce(
            string_to_array(nullif(ltrim(writes->>2), ''), ' '), ARRAY['*']
        ) LOOP
            PERFORM pg_notify(CASE
                WHEN octet_length(channel) + octet_length(tail) < 63
                    THEN channel || ':' || tail
                ELSE left(channel, 45) || ':#'
                    || left(encode(sha256(convert_to(channel || ':' || tail, 'UTF8')), 'hex'), 16)
                END, note);
        END LOOP;
""",
)
_WRITE_COMMAND_3 = _WRITE_COMMAND.replace(  # schema 3 also wrote the outbox table
    "    END IF;\n    -- One row",
    """        INSERT INTO {s}.outbox (sequence, aggregate_id, topic)
            SELECT last - n + e.i, e.v->>0, e.v->>2
            FROM jsonb_array_elements(writes->0) WITH ORDINALITY AS e(v, i);
    END IF;
    -- One row""",
)

# A command's statements, prepared once per connection (``EXECUTE`` then skips parsing and
# planning them: a third of the server's work per command when sent as plain text), and the
# reads a follower makes on every commit (the events after its cursor, the Goals they touched).
# A read of one id has a statement of its own, by equality: PostgreSQL plans ``= ANY`` of an
# array again on every execution (its generic plan guesses ten rows), which is most of the
# server's work for such a read (measured: 210–230 µs of server CPU → 110–120 µs).
# The connection prepares nothing else (``prepare_threshold``), so DEALLOCATE ALL drops only these.
_PREPARE = """
DEALLOCATE ALL;
PREPARE refine_lock (text[]) AS SELECT aggregate_id, version, state FROM {s}.aggregates
    WHERE aggregate_id = ANY($1) ORDER BY aggregate_id FOR UPDATE;
PREPARE refine_lock_one (text) AS SELECT aggregate_id, version, state FROM {s}.aggregates
    WHERE aggregate_id = $1 FOR UPDATE;
PREPARE refine_receipt (text) AS SELECT payload, result FROM {s}.receipts WHERE command_id = $1;
PREPARE refine_launches (text[]) AS SELECT count(pg_advisory_xact_lock_shared({launch}))
    FROM unnest($1) AS a;
PREPARE refine_write (text, text, text, double precision, text, jsonb) AS
    SELECT {s}.write_command($1, $2, $3, $4, $5, $6);
PREPARE refine_events_after (bigint, bigint) AS SELECT {record} FROM {s}.events
    WHERE sequence > $1 ORDER BY sequence LIMIT $2;
PREPARE refine_load_many (text[]) AS SELECT aggregate_id, version, state FROM {s}.aggregates
    WHERE aggregate_id = ANY($1);
PREPARE refine_load_one (text) AS SELECT aggregate_id, version, state FROM {s}.aggregates
    WHERE aggregate_id = $1;
PREPARE refine_load_linked (text[], text, text) AS {linked} WHERE a.aggregate_id = ANY($1);
PREPARE refine_load_linked_one (text, text, text) AS {linked} WHERE a.aggregate_id = $1;
"""
# An aggregate and the one its state's text names (``load_linked``): $2 the pattern, $3 the prefix.
_LINKED = """SELECT a.aggregate_id, a.version, a.state, link.id, b.version, b.state
    FROM {s}.aggregates a
    CROSS JOIN LATERAL (SELECT substring(a.state FROM $2)) AS link (id)
    LEFT JOIN {s}.aggregates b ON b.aggregate_id = $3 || link.id"""

# A launch's lock on its Run (``commits_held``): advisory, keyed by this class and the hash of
# "<schema>.<aggregate id>". A claim helper holds it exclusively, in its session, from its last
# look to its exec (which closes the connection: the server then drops the lock, and logs
# nothing for a connection that had no open transaction); a command takes it shared on every Run
# it writes, before the Run's row, so a cancellation waits for the exec rather than committing
# unseen between the look and the exec (DESIGN §10). A collision only makes a command wait.
LAUNCH_CLASS = 0x52454649  # "REFI"
_LAUNCH_KEY = "{launch_class}, hashtext('{schema}.' || a)"
LAUNCH_WAIT_S = 5.0  # as SQLite's busy timeout: then JournalLockedError (the launch retries)

# Forward migrations: MIGRATIONS[n] takes a journal from schema n - 1 to n. "{s}" is the schema.
MIGRATIONS: dict[int, str] = {
    1: """
CREATE TABLE {s}.schema_version (
    version      integer PRIMARY KEY,
    applied_at   double precision NOT NULL
);
CREATE TABLE {s}.journal (
    one          boolean PRIMARY KEY DEFAULT true CHECK (one),
    journal_id   text NOT NULL,
    application  text NOT NULL,
    created_at   double precision NOT NULL
);
CREATE TABLE {s}.head (
    one          boolean PRIMARY KEY DEFAULT true CHECK (one),
    sequence     bigint NOT NULL
);
INSERT INTO {s}.head (sequence) VALUES (0);
CREATE TABLE {s}.aggregates (
    aggregate_id  text COLLATE "C" PRIMARY KEY,
    kind          text COLLATE "C" NOT NULL,
    version       bigint NOT NULL,
    status        text COLLATE "C",
    node_id       text COLLATE "C",
    last_sequence bigint NOT NULL,
    state         text NOT NULL
);
CREATE INDEX aggregates_by_status ON {s}.aggregates (kind, status, node_id);
CREATE INDEX aggregates_by_recency ON {s}.aggregates (kind, last_sequence);
CREATE TABLE {s}.events (
    sequence      bigint PRIMARY KEY,
    aggregate_id  text COLLATE "C" NOT NULL,
    version       bigint NOT NULL,
    type          text NOT NULL,
    data          text NOT NULL,
    committed_at  double precision NOT NULL,
    command_id    text NOT NULL
);
CREATE INDEX events_by_aggregate ON {s}.events (aggregate_id, sequence);
CREATE TABLE {s}.receipts (
    command_id    text COLLATE "C" PRIMARY KEY,
    payload       text NOT NULL,
    result        text NOT NULL,
    committed_at  double precision NOT NULL
);
CREATE TABLE {s}.outbox (
    sequence      bigint PRIMARY KEY REFERENCES {s}.events (sequence),
    aggregate_id  text NOT NULL,
    topic         text NOT NULL,
    published     integer NOT NULL DEFAULT 0
);
""",
    # 2: a receipt keeps the digest of its command's canonical text (``key_digest``), and the
    # state only of aggregates whose state is not the fold of their events.
    2: """
UPDATE {s}.receipts SET payload = left(encode(sha256(convert_to(payload, 'UTF8')), 'hex'), 32)
    WHERE payload LIKE '{{%%';
""",
    # 3: a decided command's writes in one call (``_PostgresCommand.write``), then with an
    # outbox table; 4 replaces it; 6 replaces it again.
    3: "\n" + _WRITE_COMMAND_3,
    # 4 (as SQLite's schema 4): the outbox is a view of the events (it repeated each event's
    # sequence, aggregate and type; nobody marked a row published), and the aggregate indexes
    # hold only what is looked up (Runs are read by id): the Goals by recency, and the Goals
    # still moving by status. Queries repeat the WHERE terms word for word (a partial index
    # serves only a query whose WHERE implies its own).
    4: f"""
DROP INDEX {{s}}.aggregates_by_status;
DROP INDEX {{s}}.aggregates_by_recency;
CREATE INDEX goals_active ON {{s}}.aggregates (kind, status, node_id)
    WHERE {GOAL_TERM} AND {ACTIVE_TERM};
CREATE INDEX goals_by_recency ON {{s}}.aggregates (kind, last_sequence, status)
    WHERE {GOAL_TERM};
DROP TABLE {{s}}.outbox;
CREATE VIEW {{s}}.outbox (sequence, aggregate_id, topic, published) AS
    SELECT sequence, aggregate_id, type, 0 FROM {{s}}.events;
"""
    + _WRITE_COMMAND,
    # 5: node presence (store.journal.presence): each node's latest heartbeat, overwritten
    # in place outside any command (no event, no sequence, no NOTIFY), stamped by the server.
    5: """
CREATE TABLE {s}.node_presence (
    node_id       text COLLATE "C" PRIMARY KEY,
    host          text NOT NULL,
    capacity      integer NOT NULL,
    version       text NOT NULL,
    interval_s    double precision NOT NULL,
    last_seen     double precision NOT NULL,
    started_at    double precision NOT NULL,
    stopped_at    double precision
);
""",
    # 6: NOTIFY names the nodes a command touches (``notice_suffix``): a node reads only on
    # commits of its own (and on those that cannot say), no longer on every node's.
    6: "\n" + _WRITE_COMMAND_6,
    # 7: the server routes each notification to the channels of the nodes it names (or to the
    # all-nodes channel), beside the journal's: a node no longer receives other nodes' commits.
    7: "\n" + _WRITE_COMMAND_7,
}

# The server's clock, for every machine alike: ``now()`` is the time its transaction began.
_SERVER_NOW = "extract(epoch FROM now())::double precision"
_SERVER_START = "extract(epoch FROM pg_postmaster_start_time())::double precision"
# A beat (``_PRESENCE_ARGS`` of ``beat_row``): a ``start`` also resets ``started_at``; only
# ``stop`` marks the clean exit. RETURNING: one row back, as every statement ``_rows`` runs.
_WRITE_PRESENCE = f"""
INSERT INTO {{s}}.node_presence AS p
    (node_id, host, capacity, version, interval_s, last_seen, started_at, stopped_at)
VALUES (%s, %s, %s, %s, %s, {_SERVER_NOW}, {_SERVER_NOW},
        CASE WHEN %s = 'stop' THEN {_SERVER_NOW} END)
ON CONFLICT (node_id) DO UPDATE SET
    host = excluded.host, capacity = excluded.capacity, version = excluded.version,
    interval_s = excluded.interval_s, last_seen = excluded.last_seen,
    started_at = CASE WHEN %s = 'start' THEN excluded.started_at ELSE p.started_at END,
    stopped_at = excluded.stopped_at
RETURNING node_id
"""
_PRESENCE_ARGS = ("node_id", "host", "capacity", "version", "interval_s", "kind", "kind")


# Keepalives end an idle connection to a lost peer; TCP_USER_TIMEOUT (ms) one with data in
# flight, which keepalives never probe: without it a read sent into a network cut waited out the
# kernel's retransmissions (≈ 15 min) and a dashboard said "live" all along. The server gets the
# same settings (its ``tcp_*``), so it ends a session whose client vanished inside a
# transaction and frees that command's row locks (its default waits 2 hours of silence).
# libpq's names; the server's are the same with "tcp_" in front. A URL that sets one of them
# (``?tcp_user_timeout=5000``: a whole number, as libpq takes it) sets it on both ends instead.
LOST_PEER = {"keepalives_idle": 15, "keepalives_interval": 5, "keepalives_count": 4,
             "tcp_user_timeout": 15000}  # fmt: skip


def connection_info(
    location: str,
    settings: Sequence[str] = (),
    schema: str | None = None,
    connect_timeout_s: int = 10,
) -> tuple[str, str]:
    """libpq's conninfo for ``location`` (session ``settings`` applied) and the journal's schema.

    The conninfo is built from ``parse_url``'s reading of the URL, the one the printable form
    (``redact``) is drawn from. A peer lost without a word (a network cut, a machine switched
    off) is an error on both ends within about half a minute (``LOST_PEER``, or the URL's own
    values of those options), rather than a read that hangs forever. The ``application_name``
    is this process's (``slots.sharing``: e.g. ``refine node n1``), so ``pg_stat_activity``
    says which node holds which connection."""
    url = parse_url(location)  # InvalidInputError, never quoting the URL
    if schema is None:  # an empty ``?schema=`` is refused below, never the default in disguise
        schema = DEFAULT_SCHEMA if url.schema is None else url.schema
    if not valid_schema(schema):
        raise InvalidInputError(f"schema must be a lower-case SQL name, not {schema!r}")
    options = url.libpq_options()
    if "port" not in options:  # libpq's $PGPORT: refused as input too, not as unreachable
        check_ports(os.environ.get("PGPORT", ""))
    lost_peer = {name: options.get(name, str(value)) for name, value in LOST_PEER.items()}
    for name, value in lost_peer.items():  # also a server setting below: digits only
        if not (value.isascii() and value.isdigit()):
            unit = "milliseconds" if name == "tcp_user_timeout" else "seconds"
            raise InvalidInputError(f"{name} in a journal URL must be a whole number of {unit}")
    server = [f"tcp_{name.removeprefix('tcp_')}={value}" for name, value in lost_peer.items()]
    # Every query of ours is a few index ranges; a JIT compile, when a plan's cost estimate
    # passes jit_above_cost (statistics missing or stale), costs more than the query (2–3 ms on
    # a 5 ms read at 100k Goals; with inlining, past 500,000, far more).
    server.append("jit=off")
    options.update(
        connect_timeout=str(connect_timeout_s),
        application_name=sharing().application,
        keepalives="1",
        options=" ".join("-c " + setting for setting in [*server, *settings]),
        **lost_peer,
    )
    try:
        return psycopg.conninfo.make_conninfo("", **options), schema
    except psycopg.ProgrammingError:  # libpq's message may quote a password's tail
        raise InvalidInputError(
            f"not a usable journal URL: {url.shown()} has a query option libpq does not take"
            " (write an '&' in a value as %26)"
        ) from None


def channel_for(schema: str) -> str:
    """The NOTIFY channel of the journal in ``schema``, at most ``NAME_MAX`` bytes: past that,
    the start of ``refine_journal_<schema>`` and a digest of the whole name (a shared channel
    would only cost spurious wake-ups: a notification is a hint, never data)."""
    if schema == DEFAULT_SCHEMA:
        return CHANNEL
    channel = f"{CHANNEL}_{schema}"  # a schema name is ASCII (checked): a byte per character
    if len(channel) <= NAME_MAX:
        return channel
    digest = hashlib.sha256(schema.encode()).hexdigest()[:16]
    return f"{channel[: NAME_MAX - len(digest) - 1]}_{digest}"


def node_channel(channel: str, node: str | None) -> str:
    """The channel that carries the commits of ``node`` (None: those that name no node, for
    every node) in the journal whose channel is ``channel``: ``<channel>:<node>`` (``:*``), or
    past ``NAME_MAX`` bytes the start of the journal's channel, ``:#`` and a digest of that
    name. ``write_command`` (schema 7) computes the same in SQL. Neither a journal's channel
    nor a node name holds ``:``, ``#`` or ``*``: two names meet only by a digest collision,
    which costs a notification received and skipped (its payload names the other node)."""
    name = f"{channel}:{'*' if node is None else node}"
    raw = name.encode()
    if len(raw) <= NAME_MAX:
        return name
    digest = hashlib.sha256(raw).hexdigest()[:16]
    return f"{channel[: NAME_MAX - len(digest) - 2]}:#{digest}"  # a channel is ASCII


# The most text a notification names nodes with (after "<last>"): a command touching more
# nodes (or a name of other characters) names none, so every node reads it. Far below
# NOTIFY's 8,000 bytes (past which the command itself would fail), and small beside what every
# listener (each node, each dashboard) receives for every commit; ≥ 15 nodes of 64 bytes fit.
NOTICE_NODES_MAX = 1000


def notice_suffix(rows: Iterable[tuple[str | None, str | None]]) -> str:
    """What a command's NOTIFY says after its last sequence: ``" a b"``, the nodes its rows
    name (``(node before, node after)`` each: a Goal moved to another node concerns both), or
    ``""`` when it cannot say: no row names a node, a node id is not a name, or too many nodes.
    ``""`` sends the commit to the all-nodes channel (``node_channel``): every node reads it.

    A Run names no node: its Goal does, and Goals writes a Goal and its Runs in one command. A
    Run written alone (``Execution``) names none, so every node reads that commit."""
    nodes = {node for pair in rows for node in pair if node is not None}
    if not nodes or not all(_NODE_NAME.fullmatch(node) for node in nodes):
        return ""
    suffix = "".join(f" {node}" for node in sorted(nodes))
    return suffix if len(suffix) <= NOTICE_NODES_MAX else ""


def read_notice(payload: str) -> tuple[int | None, frozenset[str] | None]:
    """A notification's last sequence (None: unreadable) and the nodes it names (None: it
    names none, so it may concern every node)."""
    first, _, rest = payload.partition(" ")
    try:
        last: int | None = int(first)
    except ValueError:
        return None, None
    nodes = frozenset(rest.split()) if rest else None
    return last, nodes or None


def quoted(schema: str) -> str:
    """``schema`` as a quoted SQL identifier, for the ``{s}`` of this module's SQL texts."""
    return Identifier(schema).as_string()


class PostgresJournal(Journal):
    """A PostgreSQL command journal. Open with :meth:`open`; use as a context manager."""

    def __init__(
        self,
        conninfo: str,
        location: str,
        schema: str,
        read_only: bool,
        journal_id: str,
        how: Sharing | None = None,
    ) -> None:
        self._conninfo = conninfo
        self._conn: psycopg.Connection[Any] | None = None
        # A connection holds a slot of the shared limit while open (``how.slots``), and a
        # transient journal gives both back once a call is done (``_in_use``).
        self._sharing = how or Sharing()
        self._slot: Slot | None = None
        self._depth = 0  # calls in progress (a snapshot, held(), an export): keep the connection
        self._unchecked = False  # opened by id alone: the first connection checks the journal
        self._cursor: psycopg.ClientCursor[Any] | None = None
        self._closed = False
        self._lock = threading.RLock()
        self._snapshots = 0  # open snapshot transactions (no silent reconnection inside one)
        self._vacuum_due = False  # rows imported inside ``atomic``: vacuum them once it commits
        self.location = location  # redacted: safe to print
        self.schema = schema
        self._s = quoted(schema)  # what the SQL texts name it by
        self.read_only = read_only
        self.journal_id = journal_id
        self.immutable = False  # a server journal is never a frozen snapshot
        self.channel = channel_for(schema)
        # Queries this handle sent to read the journal (not its commands, not its presence
        # beats): how a node shows it did not read on another node's commits.
        self.reads = 0

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
        schema: str | None = None,
        connect_timeout_s: int = 10,
        journal_id: str | None = None,
    ) -> PostgresJournal:
        """Open the journal in the database ``location`` (a ``postgresql://`` URL) names; create
        its schema only when writable and ``create``.

        ``synchronous`` NORMAL is ``synchronous_commit=off`` (a server crash may lose the last
        commits, never half of one); ``busy_timeout_ms`` is the ``lock_timeout`` of a command
        waiting for another's rows. Raises StorageUnreachableError (server down, refused,
        authentication, database missing), JournalMissingError (no journal in that database),
        NotAJournalError (the schema holds something else, or a newer journal, or not the
        journal ``journal_id`` names). With ``journal_id`` in a process whose connections are
        transient (a worker's), nothing is checked now: the first connection checks it.
        """
        if synchronous not in ("FULL", "NORMAL"):
            raise InvalidInputError("synchronous must be FULL or NORMAL")
        settings = [f"lock_timeout={int(busy_timeout_ms)}"]
        if synchronous == "NORMAL":
            settings.append("synchronous_commit=off")
        if read_only:
            settings.append("default_transaction_read_only=on")
        conninfo, schema = connection_info(location, settings, schema, connect_timeout_s)
        journal = cls(conninfo, redact(location), schema, read_only, "", sharing())
        if journal_id is not None and journal._sharing.transient:
            journal.journal_id, journal._unchecked = journal_id, True
            return journal
        try:
            with journal._in_use(), journal._storage_errors():
                conn = journal._connection()
                found = _migrate(conn, schema, journal.location, create and not read_only)
                if journal_id is not None and found != journal_id:
                    raise NotAJournalError(_another(journal.location, journal_id))
                journal.journal_id = found
                if not read_only:
                    _check_writable(conn, schema, journal.location)
            return journal
        except BaseException:
            journal.close()
            raise

    @classmethod
    @contextlib.contextmanager
    def atomic(cls, location: str, busy_timeout_ms: int = 5000) -> Iterator[PostgresJournal]:
        """The journal at ``location``, created (or migrated) when needed in one transaction
        with all that the block writes, committed when the block ends (``refine copy``). A block
        that fails, or a process that dies, even by SIGKILL, leaves no new schema: the server
        rolls it all back. A journal made there meanwhile is found under the migration's
        lock (an import then refuses it)."""
        conninfo, schema = connection_info(location, [f"lock_timeout={int(busy_timeout_ms)}"])
        journal = cls(conninfo, redact(location), schema, False, "")
        try:
            with journal._in_use(), journal._storage_errors():
                conn = journal._connection()
                with conn.transaction():  # the migration's and the import's are savepoints
                    journal.journal_id = _migrate(conn, schema, journal.location, True)
                    yield journal
                if journal._vacuum_due:  # committed: now VACUUM may run
                    journal._vacuum_copied(conn)
        finally:
            journal.close()

    @classmethod
    def wakeups(cls, location: str, node_id: str | None = None) -> WakeUps:
        """``LISTEN`` on a dedicated connection, with a slow safety poll and reconnection; or,
        in a process that shares its connections (a served tab), the changes of the file its
        parent relays its own LISTEN to: no connection of ours at all. ``node_id``: a node's
        listener, woken only by commits that may concern it (``ListenWakeUps``)."""
        wake_file = sharing().wake_file
        if wake_file is not None:
            from store.journal.watch import JournalWatcher

            return JournalWatcher(wake_file)
        from store.journal.listen import ListenWakeUps

        return ListenWakeUps(location, node_id=node_id)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._let_go()

    def _let_go(self) -> None:
        """Close the connection, if any, and give its slot back once the server let go of the
        session (``store.journal.session_end``)."""
        conn, self._conn = self._conn, None
        slot, self._slot = self._slot, None
        watched = None
        if conn is not None:
            if slot is not None and not conn.closed:
                with contextlib.suppress(psycopg.Error):  # a lost connection has no socket
                    watched = session_end.watch(conn.fileno())
            with contextlib.suppress(psycopg.Error):
                conn.close()
        if watched is not None:
            session_end.until_gone(watched)
        if slot is not None:
            slot.release()

    def session_fds(self) -> tuple[int, ...]:
        """The socket of this journal's session and the lock of its slot, when it holds one:
        what a claim helper hands its worker before its exec ends the session."""
        if self._conn is None or self._conn.closed or self._slot is None:
            return ()
        try:
            return (self._conn.fileno(), self._slot.fileno())
        except psycopg.Error:  # lost: the server ends the session by itself
            return ()

    @contextlib.contextmanager
    def _in_use(self) -> Iterator[None]:
        """One call (or several, nested): a transient journal lets its connection go after
        the outermost, so a worker waiting for its recipe holds none."""
        with self._lock:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
                if self._depth == 0 and self._sharing.transient:
                    self._let_go()

    @contextlib.contextmanager
    def held(self) -> Iterator[PostgresJournal]:
        """Keep one connection for every call inside (a claim and its reread, a reread of
        Goal and Run): a transient journal would otherwise connect for each."""
        with self._in_use():
            yield self

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> PostgresJournal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _connection(self) -> psycopg.Connection[Any]:
        """The connection, reconnected after a lost one (a server restart ends every session)."""
        if self._closed:
            raise JournalClosedError("journal is closed")
        if self._conn is not None and (self._conn.broken or self._conn.closed):
            self._let_go()
        if self._conn is None:
            slot = self._take_slot()  # may wait for one
            try:
                conn = psycopg.connect(self._conninfo, autocommit=True)
            except BaseException:
                if slot is not None:
                    slot.release()
                raise
            # psycopg prepares repeated statements itself and then answers any ROLLBACK with
            # DEALLOCATE ALL, which would drop the command statements (``_PREPARE``) too.
            conn.prepare_threshold = None
            self._conn, self._slot = conn, slot
            if self._unchecked:
                self._check_first(conn)
        return self._conn

    def _take_slot(self) -> Slot | None:
        """A slot of this process's connection limit (None: it has none)."""
        slots = self._sharing.slots
        if slots is None:
            return None
        try:
            return slots.acquire()
        except OSError as exc:  # its folder cannot be made or written (disk full, permissions)
            raise StorageError(
                f"cannot take a connection slot in {slots.folder}: {exc.strerror or exc}"
            ) from None

    def _check_first(self, conn: psycopg.Connection[Any]) -> None:
        """The checks an open by id left to the first connection (as ``connect`` makes them)."""
        try:
            found = _migrate(conn, self.schema, self.location, False)
            if found != self.journal_id:
                raise NotAJournalError(_another(self.location, self.journal_id or ""))
            if not self.read_only:
                _check_writable(conn, self.schema, self.location)
        except BaseException:
            self._let_go()
            raise
        self._unchecked = False

    @contextlib.contextmanager
    def _storage_errors(self) -> Iterator[None]:
        """psycopg's exceptions as StorageError, with the location redacted (no password)."""
        try:
            yield
        except psycopg.Error as exc:
            if self._conn is not None and self._conn.broken:
                self._let_go()
            raise _storage_error(exc, self.location) from exc

    # --- commands ------------------------------------------------------------------------------

    def execute(
        self,
        *,
        command_id: str,
        payload: Mapping[str, Any],
        expected: Mapping[str, int | None],
        decide: Decide,
    ) -> Outcome:
        """Run one command atomically (see ``store.journal.core.run_command`` for the order)."""
        if self._closed:
            raise JournalClosedError("journal is closed")
        if self.read_only:
            raise JournalReadOnlyError("journal is open read-only", **first_ids(expected))
        key = command_key(payload, expected)
        return self._retrying(lambda: self._execute_once(command_id, key, expected, decide))

    def execute_batch(self, commands: Sequence[Command]) -> list[Outcome | RefineError]:
        """Run ``commands`` in one transaction, each in a savepoint: its own receipt, events,
        NOTIFY and refusal (a refused command is rolled back to its savepoint, the others
        commit). A StorageError fails the whole batch, and nothing is written."""
        if self._closed:
            raise JournalClosedError("journal is closed")
        if self.read_only:
            raise JournalReadOnlyError("journal is open read-only")
        keys = [command_key(c.payload, c.expected) for c in commands]
        return self._retrying(lambda: self._execute_batch_once(commands, keys))

    def _retrying(self, once: Callable[[], _T]) -> _T:
        """``once()``, again on a new connection when the one it reused was lost (a command id
        makes a command that did commit replay, so it never applies twice), or once more when
        the session lost its prepared statements (DEALLOCATE ALL, DISCARD ALL)."""
        with self._in_use():
            reconnected = reprepared = False
            for attempt in range(_RETRIES):
                reused = self._conn is not None
                try:
                    with self._storage_errors():
                        return once()
                except StorageError as exc:
                    if not reconnected and self._dropped(reused) and not self._snapshots:
                        reconnected = True
                        continue
                    if not reprepared and isinstance(exc.__cause__, _UNPREPARED):
                        reprepared, self._cursor = True, None
                        continue
                    if not _transient(exc.__cause__) or attempt == _RETRIES - 1:
                        raise
            raise AssertionError("unreachable")

    def _execute_once(
        self, command_id: str, key: str, expected: Mapping[str, int | None], decide: Decide
    ) -> Outcome:
        # Two round trips (the decision, in Python, needs the locked state first): BEGIN with
        # the locks and the receipt; then the writes, NOTIFY and COMMIT (``write``). Each is one
        # simple-protocol query string (parameters quoted by psycopg): far less client work per
        # statement than the extended protocol's pipeline.
        conn = self._connection()
        tx = _PostgresCommand(self._command_cursor(conn), self._s, self.channel, command_id)
        try:
            outcome = run_command(tx, command_id, key, expected, decide)
            if not tx.wrote:  # a replay: it wrote nothing
                tx.cur.execute("COMMIT")
            return outcome
        except BaseException:
            _rollback(conn)
            raise

    def _execute_batch_once(
        self, commands: Sequence[Command], keys: Sequence[str]
    ) -> list[Outcome | RefineError]:
        conn = self._connection()
        cur = self._command_cursor(conn)
        results: list[Outcome | RefineError] = []
        try:
            cur.execute("BEGIN")
            for command, key in zip(commands, keys, strict=True):
                tx = _PostgresCommand(cur, self._s, self.channel, command.command_id, batch=True)
                result = run_batched(tx, command, key)
                if isinstance(result, RefineError):  # refused: this command writes nothing
                    cur.execute("ROLLBACK TO SAVEPOINT command; RELEASE SAVEPOINT command")
                elif not tx.wrote:  # a replay (a write releases its savepoint itself)
                    cur.execute("RELEASE SAVEPOINT command")
                results.append(result)
            cur.execute("COMMIT")
            return results
        except BaseException:
            _rollback(conn)
            raise

    def _command_cursor(self, conn: psycopg.Connection[Any]) -> psycopg.ClientCursor[Any]:
        """The connection's cursor for commands, made (and the command statements prepared)
        once per connection."""
        if self._cursor is None or self._cursor.connection is not conn:
            cursor = psycopg.ClientCursor(conn)
            launch = _LAUNCH_KEY.format(launch_class=LAUNCH_CLASS, schema=self.schema)
            linked = _LINKED.format(s=self._s)
            cursor.execute(_PREPARE.format(s=self._s, launch=launch, record=_RECORD, linked=linked))
            self._cursor = cursor
        return self._cursor

    # --- reads ---------------------------------------------------------------------------------

    def _rows(self, query: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """A read's rows (counted in ``reads``)."""
        self.reads += 1
        return self._query(query, args)

    def _prepared_rows(
        self, execute: str, args: Sequence[Any], *, generic: bool = False
    ) -> list[tuple[Any, ...]]:
        """A read by one of the connection's prepared statements (``_PREPARE``; counted in
        ``reads``), with a command's retries: a lost connection, a session that lost them.

        ``generic``: by the statement's generic plan, when the read is a transaction of its own.
        PostgreSQL keeps planning a statement afresh while its generic plan's estimate is worse
        than the custom plans' (a range read: ``sequence > $1`` is guessed a third of the table),
        though both are the same index scan; that planning was 40 % of the server's work for
        a follower's read on every commit (0.09 → 0.06 ms: ``SET LOCAL`` in the same message
        ends with it, and nothing else runs under it)."""
        self.reads += 1

        def once() -> list[tuple[Any, ...]]:
            conn = self._connection()
            cursor = self._command_cursor(conn)
            if generic and conn.info.transaction_status == _IDLE:
                cursor.execute(_GENERIC + execute, args)
                cursor.nextset()
                return cursor.fetchall()
            return cursor.execute(execute, args).fetchall()

        return self._retrying(once)

    def _query(self, query: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._in_use():
            for retry in (False, True):
                reused = self._conn is not None
                try:
                    with self._storage_errors():
                        return self._connection().execute(query.format(s=self._s), args).fetchall()
                except StorageError:
                    # A connection the server ended since its last use (a restart): one fresh
                    # try, except inside a snapshot (a new session would not see the same state).
                    if retry or not self._dropped(reused) or self._snapshots:
                        raise
            raise AssertionError("unreachable")

    def _dropped(self, reused: bool) -> bool:
        """The call failed because the connection it reused was lost (now forgotten)."""
        return reused and self._conn is None

    def load(self, aggregate_id: str) -> Stored | None:
        rows = self._rows(
            "SELECT aggregate_id, version, state FROM {s}.aggregates WHERE aggregate_id = %s",
            (aggregate_id,),
        )
        return stored_row(rows[0]) if rows else None

    def load_many(self, aggregate_ids: Sequence[str]) -> dict[str, Stored]:
        """The stored aggregates among ``aggregate_ids`` (missing ones are absent)."""
        if len(aggregate_ids) == 1:
            rows = self._prepared_rows("EXECUTE refine_load_one(%s)", (aggregate_ids[0],))
        else:
            rows = self._prepared_rows(
                "EXECUTE refine_load_many(%s::text[])", (list(aggregate_ids),)
            )
        return {str(row[0]): stored_row(row) for row in rows}

    def load_linked(
        self, aggregate_ids: Sequence[str], field: str, prefix: str
    ) -> tuple[dict[str, Stored], dict[str, Stored]]:
        """``Journal.load_linked`` in one statement, not four (``BEGIN``, two reads, ``COMMIT``):
        a dashboard's read of the Goals a commit touched, on every commit (issue 27's server
        ratio). The link is read off the state's text by a pattern that the model's canonical
        encoding fits (ids never need escaping); a state whose parsed field names another
        aggregate (text the model did not write) sends the whole read the plain way."""
        if not field.isidentifier():
            raise ValueError(f"not a field name: {field!r}")
        pattern = f'"{field}":"([^"\\\\]*)"'
        ids: str | list[str] = list(aggregate_ids)
        execute = "EXECUTE refine_load_linked(%s::text[], %s, %s)"
        if len(ids) == 1:
            ids, execute = ids[0], "EXECUTE refine_load_linked_one(%s, %s, %s)"
        rows = self._prepared_rows(execute, (ids, pattern, prefix))
        stored: dict[str, Stored] = {}
        linked: dict[str, Stored] = {}
        for row in rows:
            found = stored[str(row[0])] = stored_row(row[:3])
            link = linked_id(found, field, prefix)
            if link is None:
                continue
            if row[3] is None or prefix + row[3] != link:
                return super().load_linked(aggregate_ids, field, prefix)
            if row[4] is not None:
                linked[link] = stored_row((link, row[4], row[5]))
        return stored, linked

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

        ``contains``: only those whose id or stored state text contains it (case-insensitive),
        a coarse pre-filter the caller refines on the parsed state.
        """
        statuses = None if status is None else [status] if isinstance(status, str) else status
        columns = "aggregate_id, version, state" + (", last_sequence" if newest_first else "")
        sql, args = of_kind(POSTGRES, f"SELECT {columns} FROM {{s}}.aggregates", kind, statuses)
        sql, args = filtered_page(
            POSTGRES,
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
        return [stored_row(row) for row in self._rows(sql, args)]

    def state_fields(
        self,
        kind: str,
        names: Sequence[str],
        *,
        limit: int | None = None,
        before: tuple[int, str] | None = None,
    ) -> list[tuple[str, int, tuple[Any, ...]]]:
        """Aggregates newest first with some fields of each state (see ``Journal``). The states
        are parsed here, not by the server: its JSON functions cost more than the parse they
        save (100,000 Goal states: ``state::jsonb`` and the fields' array took 1.5 s of server
        CPU, sending the texts 0.1 s; the whole filter index built in 0.4 s of client CPU less
        with it, and 0.5–1 s more wall), and a fleet's server is shared by every node and
        dashboard."""
        check_field_names(names)  # the same names refused as by SQLite
        sql, args = of_kind(
            POSTGRES, "SELECT aggregate_id, last_sequence, state FROM {s}.aggregates", kind, None
        )
        sql, args = filtered_page(
            POSTGRES, sql, args, contains=None, node_id=None, after_id=None,
            newest_first=True, limit=limit, offset=0, before=before,
        )  # fmt: skip
        return [(r[0], int(r[1]), fields_of(r[2], names)) for r in self._rows(sql, args)]

    def count(self, kind: str, status: str | None = None) -> int:
        sql, args = of_kind(
            POSTGRES,
            "SELECT count(*) FROM {s}.aggregates",
            kind,
            None if status is None else [status],
        )
        return int(self._rows(sql, args)[0][0])

    def history(self, aggregate_id: str, after_sequence: int = 0, limit: int = 100) -> list[Event]:
        """One aggregate's events in commit order, after ``after_sequence``, at most ``limit``."""
        check_page(after_sequence, limit)
        rows = self._rows(
            "SELECT sequence, aggregate_id, version, type, data, committed_at FROM {s}.events"
            " WHERE aggregate_id = %s AND sequence > %s ORDER BY sequence LIMIT %s",
            (aggregate_id, after_sequence, limit),
        )
        return [event_row(row) for row in rows]

    def histories(self, aggregate_ids: Sequence[str]) -> dict[str, list[Event]]:
        """Each aggregate's whole history, all in one read (one round trip per page of ``refine
        check``, not one per aggregate: two million of them at a million Goals)."""
        found: dict[str, list[Event]] = {agg: [] for agg in aggregate_ids}
        rows = self._rows(
            "SELECT sequence, aggregate_id, version, type, data, committed_at FROM {s}.events"
            " WHERE aggregate_id = ANY(%s) ORDER BY aggregate_id, sequence",
            (list(found),),
        )
        for row in rows:
            found[row[1]].append(event_row(row))
        return found

    def events_after(self, sequence: int, limit: int = MAX_PAGE) -> list[Event]:
        """Every aggregate's events after ``sequence`` (an index range scan), oldest first."""
        return [event_row(row) for row in self.event_records(sequence, limit)]

    def event_records(
        self, after_sequence: int, limit: int = MAX_PAGE, types: Sequence[str] | None = None
    ) -> list[EventRecord]:
        """Events after ``after_sequence`` as stored (data unparsed), maybe only of ``types``."""
        check_page(after_sequence, limit)
        if types is None:  # a follower's read on every commit
            return self._prepared_rows(
                "EXECUTE refine_events_after(%s, %s)", (after_sequence, limit), generic=True
            )
        sql = f"SELECT {_RECORD} FROM {{s}}.events WHERE sequence > %s AND type = ANY(%s)"
        return self._rows(f"{sql} ORDER BY sequence LIMIT %s", (after_sequence, list(types), limit))

    def count_by_status_and_node(
        self, kind: str, statuses: Sequence[str] | None = None
    ) -> dict[tuple[str | None, str | None], int]:
        """Aggregates of ``kind`` per (status, node), maybe only of ``statuses`` (the Goals still
        moving: over their own index)."""
        select = "SELECT status, node_id, count(*) FROM {s}.aggregates"
        sql, args = of_kind(POSTGRES, select, kind, statuses)
        rows = self._rows(f"{sql} GROUP BY status, node_id", args)
        return {(row[0], row[1]): int(row[2]) for row in rows}

    def outbox(self, after_sequence: int = 0, limit: int = MAX_PAGE) -> list[tuple[int, str, str]]:
        """Outbox rows ``(sequence, aggregate_id, topic)`` after ``after_sequence``."""
        check_page(after_sequence, limit)
        rows = self._rows(
            "SELECT sequence, aggregate_id, topic FROM {s}.outbox WHERE sequence > %s"
            " ORDER BY sequence LIMIT %s",
            (after_sequence, limit),
        )
        return [(int(r[0]), str(r[1]), str(r[2])) for r in rows]

    def last_sequence(self) -> int:
        return int(self._rows("SELECT sequence FROM {s}.head")[0][0])

    def last_commit(self) -> tuple[int, float | None]:
        """The last event's sequence and commit time (0, None for an empty journal)."""
        rows = self._rows(
            "SELECT sequence, committed_at FROM {s}.events ORDER BY sequence DESC LIMIT 1"
        )
        return (int(rows[0][0]), float(rows[0][1])) if rows else (0, None)

    def data_version(self) -> int:
        """Changes when a command commits events: the cheap "anything new?" gate."""
        return self.last_sequence()

    def changes(self) -> _SequenceGate:
        """A new change gate on this open journal, for one consumer."""
        return _SequenceGate(self)

    def replaced(self) -> bool:
        """A server journal has no file that could be replaced under this handle."""
        return False

    file_replaced = replaced

    # --- node presence (DESIGN §14): observations beside the command journal, never in it ---

    def write_presence(self, beat: Beat) -> None:
        """Overwrite node ``beat.node_id``'s presence row, stamped with the server's clock: one
        statement of its own on this connection (none is opened for it), with no event, no
        sequence and no NOTIFY, so nobody following the journal wakes for a beat."""
        row = beat_row(beat)
        if self._closed:
            raise JournalClosedError("journal is closed")
        if self.read_only:
            raise JournalReadOnlyError("journal is open read-only")
        self._query(_WRITE_PRESENCE, [row[name] for name in _PRESENCE_ARGS])

    def presence(self) -> tuple[float, list[Presence]]:
        """Every node's presence row (by node id) and the server's clock now."""
        rows = self._rows(
            f"SELECT {PRESENCE_COLUMNS}, {_SERVER_NOW}, {_SERVER_START} FROM {{s}}.node_presence"
            f" RIGHT JOIN (SELECT) AS one ON true ORDER BY node_id"
        )
        now, up_since = float(rows[0][-2]), float(rows[0][-1])
        return now, [presence_row(row[:-2], up_since) for row in rows if row[0] is not None]

    def goal_nodes(self) -> list[str]:
        """Every node id a Goal names, sorted."""
        rows = self._rows(
            f"SELECT DISTINCT node_id FROM {{s}}.aggregates WHERE {GOAL_TERM} ORDER BY node_id"
        )
        return [str(row[0]) for row in rows if row[0] is not None]

    @property
    def local_dir(self) -> Path:
        """This machine's folder for the journal's node records and logs:
        ``$XDG_STATE_HOME/refine/<journal id>`` (else ``~/.local/state/refine/<journal id>``)."""
        return server_journal_dir(self.journal_id)

    def export_rows(self, table: str) -> Iterator[list[tuple[Any, ...]]]:
        """Every row of one stored table (``COPY_TABLES``' columns), in batches, in key order.
        Call inside :meth:`snapshot` (a server-side cursor needs its transaction)."""
        columns, key = copy_table(table)
        with self._in_use(), self._storage_errors():
            conn = self._connection()
            with conn.cursor(name=f"refine_export_{table}") as cur:
                cur.execute(f"SELECT {', '.join(columns)} FROM {self._s}.{table} ORDER BY {key}")
                while batch := cur.fetchmany(COPY_BATCH):
                    yield batch

    def import_rows(self, batches: Iterable[tuple[str, list[tuple[Any, ...]]]]) -> int:
        """Write a whole journal's rows into this empty one, in one transaction (``COPY``);
        returns the number of rows. TargetNotEmptyError (nothing written) when it holds any."""
        if self.read_only:
            raise JournalReadOnlyError("journal is open read-only")
        count = 0
        with self._in_use(), self._storage_errors():
            conn = self._connection()
            with conn.transaction():
                head = conn.execute(f"SELECT sequence FROM {self._s}.head FOR UPDATE").fetchone()
                if head != (0,) or any(
                    conn.execute(f"SELECT 1 FROM {self._s}.{table} LIMIT 1").fetchone()
                    for table, _, _ in COPY_TABLES
                ):
                    raise TargetNotEmptyError(f"journal {self.location} is not empty")
                last = 0
                for table, rows in batches:
                    columns, _ = copy_table(table)
                    if table == "outbox":  # a view of the events: it must agree with them
                        self._check_outbox_rows(conn, rows)
                        count += len(rows)
                        continue
                    with conn.cursor().copy(
                        f"COPY {self._s}.{table} ({', '.join(columns)}) FROM STDIN"
                    ) as copy:
                        for row in rows:
                            copy.write_row(row)
                    if table == "events" and rows:
                        last = max(last, int(rows[-1][0]))
                    count += len(rows)
                conn.execute(f"UPDATE {self._s}.head SET sequence = %s", (last,))
            self._vacuum_copied(conn)
        return count

    def _vacuum_copied(self, conn: psycopg.Connection[Any]) -> None:
        """Vacuum and analyze the tables a copy filled, now rather than when autovacuum gets to
        them. Without statistics a million copied Goals were scanned and sorted for a first
        page (4.8 s) instead of read along the primary key (1.4 ms); without the visibility
        map every count read the heap (the dashboard's Goal count at 100,000: 28–49 ms, 10,000
        pages, against 6.7 ms from the index alone). Best effort: the rows are in either way."""
        tables = ", ".join(f"{self._s}.{t}" for t, _, _ in COPY_TABLES if t != "outbox")
        if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            # Inside ``atomic``'s transaction, where VACUUM cannot run: statistics now (the
            # copy's check plans its reads by them: without, with JIT on, 0.3 s a page of
            # histories at 1M), the vacuum once that transaction commits.
            with contextlib.suppress(psycopg.Error), conn.transaction():  # a savepoint
                conn.execute(f"ANALYZE {tables}")
            self._vacuum_due = True
            return
        self._vacuum_due = False
        with contextlib.suppress(psycopg.Error):
            conn.execute(f"VACUUM (ANALYZE) {tables}")  # never inside a transaction

    def _check_outbox_rows(
        self, conn: psycopg.Connection[Any], rows: list[tuple[Any, ...]]
    ) -> None:
        """Refuse a copied outbox row that is not the one our view derives from its event."""
        if not rows:
            return
        low, high = rows[0][0], rows[-1][0]
        derived = conn.execute(
            f"SELECT sequence, aggregate_id, topic, published FROM {self._s}.outbox"
            " WHERE sequence BETWEEN %s AND %s ORDER BY sequence",
            (low, high),
        ).fetchall()
        if [tuple(r) for r in rows] != derived:
            raise InvalidInputError(
                f"the source's outbox rows {low}..{high} do not match its events: run refine check"
            )

    @contextlib.contextmanager
    def commits_held(self, aggregate_id: str | None = None) -> Iterator[None]:
        """Commands on ``aggregate_id`` (a Run) wait while the block runs, and reads inside see
        the newest commit; an exec inside releases the hold (``LAUNCH_CLASS``). The block keeps
        its connection, and never reconnects silently: a new session would not hold the lock.
        JournalLockedError when a command on it kept it past ``LAUNCH_WAIT_S``."""
        if aggregate_id is None:
            yield
            return
        key = (LAUNCH_CLASS, f"{self.schema}.{aggregate_id}")
        with self._in_use():
            self._take_launch_lock(key)
            self._snapshots += 1
            try:
                yield
            finally:
                with contextlib.suppress(StorageError):  # a lost session holds nothing
                    self._query("SELECT pg_advisory_unlock(%s, hashtext(%s))", key)
                self._snapshots -= 1  # after: a new session would be told it holds no lock

    def _take_launch_lock(self, key: tuple[int, str]) -> None:
        deadline = time.monotonic() + LAUNCH_WAIT_S
        delay = 0.001
        while not self._query("SELECT pg_try_advisory_lock(%s, hashtext(%s))", key)[0][0]:
            if time.monotonic() >= deadline:  # a command on it holds it shared meanwhile
                raise JournalLockedError(
                    f"journal is locked by another writer (a command on {key[1]} for"
                    f" {LAUNCH_WAIT_S:g} s)"
                )
            time.sleep(delay)
            delay = min(delay * 2, 0.05)

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[PostgresJournal]:
        """Several reads that see one consistent state of the journal."""
        with self._in_use(), self._storage_errors():
            conn = self._connection()
            if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                yield self
                return
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            self._snapshots += 1
            try:
                yield self
            finally:
                self._snapshots -= 1
                if not conn.broken and not conn.closed:
                    conn.execute("COMMIT")


def _rollback(conn: psycopg.Connection[Any]) -> None:
    """End a transaction that a refusal or a failed statement (which skipped the rest of its
    query string, COMMIT included) left open, so the connection is clean for what follows."""
    if not conn.broken and not conn.closed and conn.info.transaction_status != _IDLE:
        with contextlib.suppress(psycopg.Error):
            conn.execute("ROLLBACK")


class _SequenceGate:
    """ "Did anything change?": the head sequence moved since the previous call (one read)."""

    def __init__(self, journal: PostgresJournal) -> None:
        self.journal = journal
        self.seen: int | None = None

    def changed(self) -> bool:
        now = self.journal.last_sequence()
        moved, self.seen = now != self.seen, now
        return moved


class _PostgresCommand:
    """The storage steps of one command inside its transaction (see ``CommandTx``)."""

    def __init__(
        self,
        cur: psycopg.ClientCursor[Any],
        schema: str,
        channel: str,
        command_id: str,
        *,
        batch: bool = False,
    ) -> None:
        """``batch``: one command of ``execute_batch``, in a savepoint of its open transaction
        (which commits once, after the last command)."""
        self.cur = cur
        self._begin, self._end = ("BEGIN", "; COMMIT")
        if batch:
            self._begin, self._end = ("SAVEPOINT command", "; RELEASE SAVEPOINT command")
        self.s = schema
        self.channel = channel
        self.command_id = command_id
        self.wrote = False  # its write ran (in a batch: its savepoint released, not committed)
        self._receipt: tuple[str, str] | None = None
        self._nodes_before: dict[str, str | None] = {}  # each loaded aggregate's node

    def load(self, aggregate_ids: Sequence[str]) -> dict[str, Stored | None]:
        # Rows locked in id order (two commands never wait on each other in a cycle); then the
        # receipt, read after the locks are granted (each statement takes a fresh snapshot): it
        # shows a command this one waited for. One round trip, BEGIN included.
        cur = self.cur
        # One id (most commands) by equality: its generic plan is as cheap as a custom one, so
        # PostgreSQL plans it once (``= ANY`` of an array is planned again each time).
        one = len(aggregate_ids) == 1
        runs = [a for a in aggregate_ids if a.startswith("run:")]  # launches wait on Runs only
        cur.execute(
            f"{self._begin}; EXECUTE refine_launches(%s::text[]);"
            f" EXECUTE refine_lock{'_one' if one else ''}(%s); EXECUTE refine_receipt(%s)",
            (runs, aggregate_ids[0] if one else list(aggregate_ids), self.command_id),
        )
        cur.nextset()  # the launches' count
        cur.nextset()
        found = {str(row[0]): stored_row(row) for row in cur.fetchall()}
        self._nodes_before = {agg: text_field(st.state, "node_id") for agg, st in found.items()}
        cur.nextset()
        row = cur.fetchone()
        self._receipt = (str(row[0]), str(row[1])) if row else None
        return {agg: found.get(agg) for agg in aggregate_ids}

    def receipt(self, command_id: str) -> tuple[str, str] | None:
        assert command_id == self.command_id  # read with the locks by load()
        return self._receipt

    def events_of(self, aggregate_id: str, up_to_version: int) -> list[Event]:
        self.cur.execute(
            "SELECT sequence, aggregate_id, version, type, data, committed_at"
            f" FROM {self.s}.events WHERE aggregate_id = %s AND version <= %s ORDER BY sequence",
            (aggregate_id, up_to_version),
        )
        return [event_row(row) for row in self.cur.fetchall()]

    def write(self, writes: Writes) -> list[int]:
        """Every write, NOTIFY and COMMIT in one round trip: ``write_command`` (schema 3) takes
        the sequences from the head row, whose lock is held to commit (gap-free, commit order)."""
        rows = [
            [r.aggregate_id, r.kind, r.version, r.status, r.node_id, last, r.state, r.new]
            for r, last in zip(writes.rows, writes.last_events, strict=True)
        ]
        self.cur.execute(
            f"EXECUTE refine_write(%s, %s, %s, %s, %s, %s){self._end}",
            (
                writes.command_id,
                writes.key,
                writes.result,
                writes.now,
                self.channel,
                json.dumps([writes.events, rows, self._notice(writes)], ensure_ascii=False),
            ),
        )
        row = self.cur.fetchone()
        assert row is not None
        self.wrote = True
        last, n = int(row[0]), len(writes.events)
        return list(range(last - n + 1, last + 1))

    def _notice(self, writes: Writes) -> str:
        """The nodes this command touches, for its NOTIFY (``notice_suffix``)."""
        before = self._nodes_before
        return notice_suffix((before.get(r.aggregate_id), r.node_id) for r in writes.rows)


# --- schema ------------------------------------------------------------------------------------


def _migrate(conn: psycopg.Connection[Any], schema: str, location: str, initialize: bool) -> str:
    """Check (and, when allowed, create or migrate forward) the journal; returns its id."""
    version = _schema_version(conn, schema, location)
    if version == SCHEMA_VERSION:
        return _journal_id(conn, schema, location)
    if version > SCHEMA_VERSION:
        raise NotAJournalError(
            f"journal {location} has schema {version}, newer than {SCHEMA_VERSION}"
        )
    if not initialize:
        if version == 0:
            raise JournalMissingError(
                f"journal missing: {location} has no schema {schema} (create it with `refine init`)"
            )
        raise NotAJournalError(
            f"journal {location} has schema {version}: open it writable once to migrate"
        )
    s = quoted(schema)
    with conn.transaction():
        # One migrator at a time; the others wait here, then find the work done.
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"refine-migrate:{schema}",))
        version = _schema_version(conn, schema, location)
        if version == 0:
            conn.execute(f"CREATE SCHEMA IF NOT EXISTS {s}")
        for step in range(version + 1, SCHEMA_VERSION + 1):
            conn.execute(MIGRATIONS[step].format(s=s).encode())
            conn.execute(
                f"INSERT INTO {s}.schema_version (version, applied_at) VALUES (%s, %s)",
                (step, time.time()),
            )
        if version == 0:
            conn.execute(
                f"INSERT INTO {s}.journal (journal_id, application, created_at)"
                " VALUES (%s, %s, %s)",
                (str(uuid.uuid4()), APPLICATION, time.time()),
            )
    return _journal_id(conn, schema, location)


def _schema_version(conn: psycopg.Connection[Any], schema: str, location: str) -> int:
    """Our schema's version; 0 when the schema is absent or empty; NotAJournalError when it
    holds something that is not ours."""
    tables = {
        str(row[0])
        for row in conn.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = %s",
            (schema,),
        )
    }
    if not tables:
        kinds = _objects_in(conn, schema)
        if kinds:
            raise NotAJournalError(
                f"not a refine journal: {location}"
                f" (schema {schema} holds other data: {', '.join(kinds)})"
            )
        return 0
    if "schema_version" not in tables or "journal" not in tables:
        raise NotAJournalError(
            f"not a refine journal: {location} (schema {schema} holds other data)"
        )
    row = conn.execute(f"SELECT max(version) FROM {quoted(schema)}.schema_version").fetchone()
    return int(row[0]) if row and row[0] is not None else 0


# Every catalog of objects that live in a schema, by kind (tables, views, sequences and
# composite types are pg_class's, which _schema_version reads first): what a schema without
# relations may still hold. A domain, an enum or a range is a type.
_SCHEMA_OBJECTS = {
    "function": ("pg_proc", "pronamespace"),
    "type": ("pg_type", "typnamespace"),
    "operator": ("pg_operator", "oprnamespace"),
    "operator class": ("pg_opclass", "opcnamespace"),
    "operator family": ("pg_opfamily", "opfnamespace"),
    "collation": ("pg_collation", "collnamespace"),
    "conversion": ("pg_conversion", "connamespace"),
    "constraint": ("pg_constraint", "connamespace"),
    "statistics object": ("pg_statistic_ext", "stxnamespace"),
    "text search configuration": ("pg_ts_config", "cfgnamespace"),
    "text search dictionary": ("pg_ts_dict", "dictnamespace"),
    "text search parser": ("pg_ts_parser", "prsnamespace"),
    "text search template": ("pg_ts_template", "tmplnamespace"),
    "extension": ("pg_extension", "extnamespace"),
}
_OBJECTS_IN = " UNION ALL ".join(
    f"(SELECT '{kind}' FROM {catalog} WHERE {column} = n.oid LIMIT 1)"
    for kind, (catalog, column) in _SCHEMA_OBJECTS.items()
)


def _objects_in(conn: psycopg.Connection[Any], schema: str) -> list[str]:
    """The kinds of object ``schema`` holds besides relations (none: empty, or absent)."""
    rows = conn.execute(
        f"SELECT o.kind FROM pg_namespace n, LATERAL ({_OBJECTS_IN}) AS o(kind)"
        " WHERE n.nspname = %s",
        (schema,),
    ).fetchall()
    return [str(row[0]) for row in rows]


# What a command writes, as statements that change nothing: PostgreSQL checks the role's
# privileges for them all the same (the row locks of a command need UPDATE too).
_WRITE_PROBE = """
UPDATE {s}.head SET sequence = sequence WHERE false;
UPDATE {s}.aggregates SET version = version WHERE false;
INSERT INTO {s}.aggregates SELECT * FROM {s}.aggregates WHERE false;
INSERT INTO {s}.events SELECT * FROM {s}.events WHERE false;
INSERT INTO {s}.receipts SELECT * FROM {s}.receipts WHERE false;
"""


def _check_writable(conn: psycopg.Connection[Any], schema: str, location: str) -> None:
    """Refuse a writable open by a role that may not write the journal (a viewer): as a
    read-only file is on SQLite, rather than every command failing later (and a node's workers
    waiting for a journal that will never take their claims)."""
    try:
        conn.execute(_WRITE_PROBE.format(s=quoted(schema)).encode())
    except (pgerrors.InsufficientPrivilege, pgerrors.ReadOnlySqlTransaction) as exc:
        raise JournalNotPermittedError(
            f"journal not permitted: {location} exists, but this role may not write it"
            f" ({_first_line(exc)}): open it read-only (--read-only), or GRANT the role"
            " INSERT, UPDATE on its tables"
        ) from exc


def _another(location: str, journal_id: str) -> str:
    return f"not the journal that was opened: {location} holds another journal than {journal_id}"


def _journal_id(conn: psycopg.Connection[Any], schema: str, location: str) -> str:
    row = conn.execute(f"SELECT journal_id, application FROM {quoted(schema)}.journal").fetchone()
    if row is None or row[1] != APPLICATION:
        raise NotAJournalError(f"not a refine journal: {location} (schema {schema})")
    return str(row[0])


def _storage_error(exc: psycopg.Error, location: str) -> StorageError:
    """The StorageError subclass saying why, by SQLSTATE class (connection failures have none)."""
    why = f"{location}: {_first_line(exc)}"
    if isinstance(exc, pgerrors.LockNotAvailable):
        return JournalLockedError(f"journal is locked by another writer ({why})")
    if isinstance(exc, pgerrors.DiskFull):
        return DiskFullError(f"journal disk is full ({why})")
    if _denied(exc):
        return JournalNotPermittedError(f"journal not permitted: {why}")
    if _server_full(exc):
        return ServerFullError(f"journal server is at its connection limit ({why})")
    if isinstance(exc, psycopg.OperationalError):
        return StorageUnreachableError(f"journal unreachable: {why}")
    return StorageError(f"journal unavailable: {why}")


def _denied(exc: psycopg.Error) -> bool:
    """Refused for the role: no privilege (42501) or no authorization (class 28). Waiting does
    not change that. (libpq's connection failures carry no SQLSTATE: a wrong password at
    connect stays "unreachable", and is not retried by a worker's claim either.)"""
    state = exc.sqlstate or ""
    return state == "42501" or state.startswith("28")


# The server's words for SQLSTATE 53300 (too_many_connections), which libpq does not give a
# failed connection as a SQLSTATE: only its message says so (in English, the server's default).
_FULL_WORDS = (
    "too many clients already",
    "remaining connection slots are reserved",
    "too many connections for",
)


def _server_full(exc: psycopg.Error) -> bool:
    """The server refused a connection for want of room (53300), not for being down."""
    text = str(exc)
    return exc.sqlstate == "53300" or any(words in text for words in _FULL_WORDS)


def _transient(cause: BaseException | None) -> bool:
    """A lost race that a rerun of the whole command resolves (the rerun sees the winner)."""
    return isinstance(
        cause, pgerrors.UniqueViolation | pgerrors.DeadlockDetected | pgerrors.SerializationFailure
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
