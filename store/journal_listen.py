"""Wake-ups for a PostgreSQL journal: ``LISTEN`` on a dedicated connection (DESIGN §7, §12).

Every command sends ``NOTIFY refine_journal, '<last sequence>'`` in its transaction, so a
notification arrives once the commit is visible. A wake-up is a hint, never data: the consumer
(``ChangeFeed``, the node) then reads "events after N" as on SQLite. A slow safety poll wakes
the consumer even without a notification (a missed one costs at most that long).

When the connection is lost (a server restart ends every session), or the first one cannot be
made, the consumer is woken at once, so its own read fails and says so; the listener
reconnects with a growing backoff and, once ``LISTEN`` is in place again, wakes the consumer
to catch up by sequence: nothing committed meanwhile is missed, and nothing is read twice (the
read starts after the last sequence the consumer has seen). ``state`` says ``live`` or
``reconnecting``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import psycopg

from store.journal_postgres import channel_for, connection_info

SAFETY_POLL_S = 5.0  # wake the consumer at least this often (a cheap "anything new?" read)
FIRST_BACKOFF_S = 0.2
MAX_BACKOFF_S = 5.0
CONNECT_TIMEOUT_S = 5


class ListenWakeUps:
    """Async iterator yielding ``None`` per notification batch, per safety poll, on a lost
    connection and after each (re)connection."""

    def __init__(
        self,
        location: str,
        *,
        poll_interval_s: float = SAFETY_POLL_S,
        max_backoff_s: float = MAX_BACKOFF_S,
    ) -> None:
        self._conninfo, schema = connection_info(location, connect_timeout_s=CONNECT_TIMEOUT_S)
        self.channel = channel_for(schema)  # a plain SQL name (checked): safe in LISTEN
        self.poll_interval_s = poll_interval_s
        self.max_backoff_s = max_backoff_s
        self.state = "connecting"  # then "live" | "reconnecting"
        self.last_notified = 0  # the highest sequence a notification carried
        self.connects = 0  # successful LISTENs (more than one: it reconnected)
        self._stop = asyncio.Event()
        self._wake = asyncio.Event()

    def __aiter__(self) -> AsyncIterator[None]:
        return self._batches()

    def stop(self) -> None:
        """End the iteration (call from the event loop's thread)."""
        self._stop.set()

    async def _batches(self) -> AsyncIterator[None]:
        delay = FIRST_BACKOFF_S
        while not self._stop.is_set():
            conn = await self._connect()
            if conn is None:
                first = self.state != "reconnecting"
                self.state = "reconnecting"
                if first:  # never connected yet: the consumer's own read says why (and retries)
                    yield None
                await self._wait(delay)
                delay = min(delay * 2, self.max_backoff_s)
                continue
            delay = FIRST_BACKOFF_S
            listener = asyncio.create_task(self._listen(conn))
            try:
                self.connects += 1
                self.state = "live"
                yield None  # (re)connected: read everything after the last sequence seen
                while not self._stop.is_set() and not listener.done():
                    await self._wait(self.poll_interval_s, listener)
                    if self._stop.is_set():
                        return
                    self._wake.clear()
                    yield None  # a notification, the safety poll, or the connection lost
            finally:
                listener.cancel()
                with contextlib.suppress(BaseException):
                    await listener
                with contextlib.suppress(psycopg.Error, OSError):
                    await conn.close()
            if not self._stop.is_set():
                self.state = "reconnecting"

    async def _connect(self) -> psycopg.AsyncConnection[Any] | None:
        try:
            conn = await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True)
        except (psycopg.Error, OSError):
            return None
        try:
            await conn.execute(f"LISTEN {self.channel}")
        except (psycopg.Error, OSError):
            with contextlib.suppress(psycopg.Error, OSError):
                await conn.close()
            return None
        return conn

    async def _listen(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Wake per notification until the connection fails (then this task ends)."""
        with contextlib.suppress(psycopg.Error, OSError):
            async for note in conn.notifies():
                with contextlib.suppress(ValueError):
                    self.last_notified = max(self.last_notified, int(note.payload))
                self._wake.set()

    async def _wait(self, timeout: float, listener: asyncio.Task[None] | None = None) -> None:
        """Until a notification, ``stop``, the listener's end, or ``timeout``."""
        waits = [asyncio.ensure_future(self._stop.wait()), asyncio.ensure_future(self._wake.wait())]
        try:
            await asyncio.wait(
                [*waits, *([listener] if listener else [])],
                timeout=timeout,
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            for task in waits:
                task.cancel()
