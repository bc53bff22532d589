"""Turn a current SQLite journal back into the shape an older schema stored, to test migrations."""

from __future__ import annotations

import sqlite3
from pathlib import Path

# Schema 3 as it stood: a table of outbox rows beside the events, indexes over every kind, the
# events indexed by aggregate rather than chained, no node presence (schema 6).
_SCHEMA_3_SHAPE = """
DROP TABLE node_presence;
ALTER TABLE events DROP COLUMN prev;
CREATE INDEX events_by_aggregate ON events(aggregate_id, sequence);
DROP INDEX goals_active;
DROP INDEX goals_by_recency;
DROP VIEW outbox;
CREATE INDEX aggregates_by_status ON aggregates(kind, status, node_id);
CREATE INDEX aggregates_by_recency ON aggregates(kind, last_sequence);
CREATE TABLE outbox (
    sequence      INTEGER PRIMARY KEY REFERENCES events(sequence),
    aggregate_id  TEXT NOT NULL,
    topic         TEXT NOT NULL,
    published     INTEGER NOT NULL DEFAULT 0
);
INSERT INTO outbox (sequence, aggregate_id, topic) SELECT sequence, aggregate_id, type FROM events;
PRAGMA user_version = 3;
"""


def as_schema_3(path: Path) -> None:
    """Rewrite the journal at ``path`` (closed, current schema) as schema 3 stored its rows."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.executescript(_SCHEMA_3_SHAPE)
    finally:
        conn.close()


# PostgreSQL's schema 3 as it stood (in the schema ``refine``): the same outbox table and indexes,
# and write_command() writing the outbox rows too; no node presence (schema 5).
_PG_SCHEMA_3_SHAPE = """
DROP TABLE refine.node_presence;
DROP INDEX refine.goals_active;
DROP INDEX refine.goals_by_recency;
DROP VIEW refine.outbox;
CREATE INDEX aggregates_by_status ON refine.aggregates (kind, status, node_id);
CREATE INDEX aggregates_by_recency ON refine.aggregates (kind, last_sequence);
CREATE TABLE refine.outbox (
    sequence      bigint PRIMARY KEY REFERENCES refine.events (sequence),
    aggregate_id  text NOT NULL,
    topic         text NOT NULL,
    published     integer NOT NULL DEFAULT 0
);
INSERT INTO refine.outbox (sequence, aggregate_id, topic)
    SELECT sequence, aggregate_id, type FROM refine.events;
DELETE FROM refine.schema_version WHERE version > 3;
"""


def as_pg_schema(url: str, version: int) -> None:
    """Rewrite the PostgreSQL journal at ``url`` (current schema, in ``refine``) as schema
    ``version`` (1–3, or 6: its write_command() notified the journal's channel alone) stored
    the same rows."""
    import psycopg

    from store.journal.postgres import _WRITE_COMMAND_3, _WRITE_COMMAND_6

    with psycopg.connect(url, autocommit=True) as conn, conn.transaction():
        if version == 6:
            conn.execute(_WRITE_COMMAND_6.format(s="refine").encode())
            conn.execute("DELETE FROM refine.schema_version WHERE version > 6")
            return
        conn.execute(_PG_SCHEMA_3_SHAPE.encode())
        conn.execute(_WRITE_COMMAND_3.format(s="refine").encode())
        if version < 3:
            conn.execute("DROP FUNCTION refine.write_command")
            conn.execute("DELETE FROM refine.schema_version WHERE version > %s", (version,))
