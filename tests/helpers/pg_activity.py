"""Who holds which connections on a PostgreSQL server, sampled in a thread (``pg_stat_activity``).

refine names each connection after its process (``store.journal.slots``): ``refine node N``,
``refine worker N``, ``refine`` for a command. ``ConnectionSampler`` counts, per sample, the
client connections of each node (its own and its workers') and of everyone, and keeps the peaks.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable

import psycopg

_QUERY = (
    "SELECT application_name, pid, backend_start::text, state, wait_event FROM pg_stat_activity"
    " WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
    " AND datname = current_database()"  # this journal's: other tests' nodes share the server
)


def node_of(application: str) -> str | None:
    """The node a connection belongs to, from its application_name (None: not a node's)."""
    for prefix in ("refine node ", "refine worker "):
        if application.startswith(prefix):
            return application.removeprefix(prefix)
    return None


class ConnectionSampler:
    """Samples the server's client connections every ``interval_s`` until ``stop``, counted
    per group (``group_of`` an application_name; by default its node)."""

    def __init__(
        self,
        url: str,
        interval_s: float = 0.02,
        group_of: Callable[[str], str | None] = node_of,
    ) -> None:
        self.url = url
        self.interval_s = interval_s
        self.group_of = group_of
        self.samples = 0
        self.peak_total = 0  # every client connection but the sampler's own
        self.peak_by_node: Counter[str] = Counter()
        # Each group's connections at its peak (application, pid, start, state, wait event): what
        # a failed bound shows, to tell a 6th connection held from a backend still exiting.
        self.peak_rows: dict[str, list[tuple[object, ...]]] = {}
        self._rows: dict[str, list[tuple[object, ...]]] = {}  # the last sample's, by group
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pg-sampler", daemon=True)

    def __enter__(self) -> ConnectionSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def now(self) -> Counter[str]:
        """One sample of its own: connections per node now (a separate connection)."""
        with psycopg.connect(self.url, autocommit=True) as conn:
            return self._count(conn)[0]

    def _run(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            while not self._stop.is_set():
                try:
                    by_node, total = self._count(conn)
                except psycopg.Error as exc:  # kept: a sampler that stopped seeing proves nothing
                    self.errors.append(str(exc))
                    return
                self.samples += 1
                self.peak_total = max(self.peak_total, total)
                for node, count in by_node.items():
                    if count > self.peak_by_node[node]:
                        self.peak_by_node[node] = count
                        self.peak_rows[node] = self._rows[node]
                self._stop.wait(self.interval_s)

    def _count(self, conn: psycopg.Connection) -> tuple[Counter[str], int]:
        rows = conn.execute(_QUERY).fetchall()
        by_node: Counter[str] = Counter()
        self._rows = {}
        for row in rows:
            node = self.group_of(row[0] or "")
            if node is not None:
                by_node[node] += 1
                self._rows.setdefault(node, []).append(tuple(row))
        return by_node, len(rows)
