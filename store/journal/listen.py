"""Wake-ups for a PostgreSQL journal: ``LISTEN`` on a dedicated connection (DESIGN §7, §12).

Every command sends ``NOTIFY refine_journal, '<last sequence> <node> …'`` in its transaction
(the nodes it touches, when it can say: ``postgres.notice_suffix``), so a notification arrives
once the commit is visible. A wake-up is a hint, never data: the consumer (``ChangeFeed``, the
node) then reads "events after N" as on SQLite. A slow safety poll wakes the consumer even
without a notification (a missed one costs at most that long). A dashboard (no ``node_id``)
listens to that channel and wakes on every commit.

A node listens for itself (``node_id``): on a journal of schema 7 and later, to its own channel
and the all-nodes one only (``postgres.node_channel``; the server sends the same notification
there), so the server sends it nothing of other nodes' commits (``received`` counts what it
was sent). On an older journal (read at each connection) it listens to the journal's channel
as before: a notification that names other nodes only is counted (``skipped``) and wakes
nobody. A commit that names no node wakes every node, as do the safety poll and every
(re)connection: what it was not told of concerned other nodes, and what it may have missed
while the connection was down is read by sequence then.

When the connection is lost (a server restart ends every session), or the first one cannot be
made, the consumer is woken at once, so its own read fails and says so; the listener
reconnects with a growing backoff and, once ``LISTEN`` is in place again, wakes the consumer
to catch up by sequence: nothing committed meanwhile is missed, and nothing is read twice (the
read starts after the last sequence the consumer has seen). ``state`` says ``live`` or
``reconnecting``.

The connection lives in a daemon thread of its own (a blocking psycopg connection), never on
the consumer's event loop: a loop busy in a synchronous journal call (a node's tick) would
leave a connection attempt half-open, its startup packet unsent, and while a server shuts down
the child it forks for that attempt waits for the packet (``authentication_timeout``, 60 s)
and the shutdown waits for the child: a restart stalled by a minute.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import threading
from collections.abc import AsyncIterator
from typing import Any

import psycopg
from psycopg.sql import SQL, Identifier

from store.journal.postgres import (
    channel_for,
    connection_info,
    node_channel,
    quoted,
    read_notice,
)

SAFETY_POLL_S = 5.0  # wake the consumer at least this often (a cheap "anything new?" read)
FIRST_BACKOFF_S = 0.2
MAX_BACKOFF_S = 5.0
CONNECT_TIMEOUT_S = 5
NODE_CHANNELS = 7  # the schema from which commits are sent to each node's channel


class ListenWakeUps:
    """Async iterator yielding ``None`` per notification batch, per safety poll, on a lost
    connection and after each (re)connection."""

    def __init__(
        self,
        location: str,
        *,
        node_id: str | None = None,
        poll_interval_s: float | None = None,
        max_backoff_s: float = MAX_BACKOFF_S,
    ) -> None:
        """``node_id``: wake only for commits that may concern that node (see above)."""
        self._conninfo, self._schema = connection_info(
            location, connect_timeout_s=CONNECT_TIMEOUT_S
        )
        self.channel = channel_for(self._schema)  # the journal's: every commit
        self.node_id = node_id
        self.listening: tuple[str, ...] = ()  # the channels of the last (re)connection
        self.poll_interval_s = SAFETY_POLL_S if poll_interval_s is None else poll_interval_s
        self.max_backoff_s = max_backoff_s
        self.state = "connecting"  # then "live" | "reconnecting" (set by the thread)
        self.last_notified = 0  # the highest sequence a notification carried
        self.received = 0  # notifications the server sent this listener
        self.skipped = 0  # of those, the ones that named other nodes only (woke nobody)
        self.connects = 0  # successful LISTENs (more than one: it reconnected)
        self._halt = threading.Event()  # stop: the iteration and the thread end
        self._wake = asyncio.Event()  # the consumer's: set on its loop, by the thread
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()  # guards _kick (the thread closes it as it ends)
        self._kick: tuple[int, int] | None = None  # a pipe: stop() interrupts the thread's wait

    def __aiter__(self) -> AsyncIterator[None]:
        return self._batches()

    def stop(self) -> None:
        """End the iteration, and the thread (it closes its connection)."""
        self._halt.set()
        self._interrupt()
        self._wake_consumer()

    async def _batches(self) -> AsyncIterator[None]:
        if self._halt.is_set():
            return
        self._loop = asyncio.get_running_loop()
        self._kick = os.pipe()
        threading.Thread(target=self._run, name="refine-listen", daemon=True).start()
        try:
            while True:
                timeout = self.poll_interval_s if self.state == "live" else None
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout)
                if self._halt.is_set():
                    return
                self._wake.clear()
                yield None  # a (re)connection, notifications, the safety poll, a lost connection
        finally:
            self._halt.set()
            self._interrupt()

    # --- the thread ----------------------------------------------------------------------------

    def _run(self) -> None:
        assert self._kick is not None
        kick = self._kick[0]
        delay = FIRST_BACKOFF_S
        try:
            while not self._halt.is_set():
                conn = self._connect()
                if conn is None:
                    if self.state != "reconnecting":  # never connected: its own read says why
                        self.state = "reconnecting"
                        self._wake_consumer()
                    self._halt.wait(delay)
                    delay = min(delay * 2, self.max_backoff_s)
                    continue
                delay = FIRST_BACKOFF_S
                try:
                    self.connects += 1
                    self.state = "live"
                    self._wake_consumer()  # read everything after the last sequence seen
                    self._listen(conn, kick)
                finally:
                    with contextlib.suppress(psycopg.Error, OSError):
                        conn.close()
                if not self._halt.is_set():
                    self.state = "reconnecting"
                    self._wake_consumer()  # lost: the consumer's own read says so
        finally:
            with self._lock:
                assert self._kick is not None
                for fd in self._kick:
                    os.close(fd)
                self._kick = None

    def _connect(self) -> psycopg.Connection[Any] | None:
        try:
            conn = psycopg.Connection.connect(self._conninfo, autocommit=True)
        except (psycopg.Error, OSError):
            return None
        try:
            channels = self._channels(conn)
            for channel in channels:
                conn.execute(SQL("LISTEN {}").format(Identifier(channel)))
        except (psycopg.Error, OSError):
            with contextlib.suppress(psycopg.Error, OSError):
                conn.close()
            return None
        self.listening = channels
        return conn

    def _channels(self, conn: psycopg.Connection[Any]) -> tuple[str, ...]:
        """What to LISTEN to: a node's own and the all-nodes channel where the journal's
        ``write_command`` sends there (schema 7); else, and for a dashboard, the journal's."""
        if self.node_id is None or self._version(conn) < NODE_CHANNELS:
            return (self.channel,)
        return (node_channel(self.channel, self.node_id), node_channel(self.channel, None))

    def _version(self, conn: psycopg.Connection[Any]) -> int:
        """The journal's schema version; 0 when it cannot be read (no journal yet, a role that
        may not read it): the journal's channel then, which every schema notifies."""
        try:
            row = conn.execute(
                f"SELECT max(version) FROM {quoted(self._schema)}.schema_version"
            ).fetchone()
        except psycopg.DatabaseError:  # autocommit: the session is usable after a failed one
            return 0
        return int(row[0]) if row and row[0] is not None else 0

    def _listen(self, conn: psycopg.Connection[Any], kick: int) -> None:
        """Wake per batch of notifications until the connection fails or ``stop``."""
        ready = select.poll()  # not select.select: a node's descriptors may pass 1024
        ready.register(kick, select.POLLIN)
        with contextlib.suppress(psycopg.Error, OSError):
            ready.register(conn.fileno(), select.POLLIN)
            while not self._halt.is_set() and not conn.broken:
                woke = False
                for note in conn.notifies(timeout=0):  # what arrived (raises once it is lost)
                    self.received += 1
                    last, nodes = read_notice(note.payload)
                    if last is not None:
                        self.last_notified = max(self.last_notified, last)
                    if self.node_id is None or nodes is None or self.node_id in nodes:
                        woke = True
                    else:
                        self.skipped += 1
                if woke:
                    self._wake_consumer()
                ready.poll()  # until data or a lost connection, or stop()

    def _wake_consumer(self) -> None:
        """Set the consumer's event on its loop (from any thread)."""
        loop = self._loop
        if loop is None:
            return
        try:
            loop.call_soon_threadsafe(self._wake.set)
        except RuntimeError:  # the loop is closed: nobody is left to wake
            self._halt.set()

    def _interrupt(self) -> None:
        with self._lock:
            if self._kick is not None:
                os.write(self._kick[1], b"x")
