"""Turn a current SQLite journal back into the shape an older schema stored, to test migrations."""

from __future__ import annotations

import sqlite3
from pathlib import Path

# Schema 3 as it stood: a table of outbox rows beside the events and indexes over every kind.
_SCHEMA_3_SHAPE = """
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
    """Rewrite the journal at ``path`` (closed, schema 4) as schema 3 stored the same rows."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.executescript(_SCHEMA_3_SHAPE)
    finally:
        conn.close()
