"""A follower of a PostgreSQL journal reads once per look (issue 27 item 2's fan-out).

On a server the change gate is a statement of its own (``SELECT sequence FROM head``), as
dear as the read it gates, and a follower's wake-ups there are commits' notifications. So the
dashboard's feed (``ChangeFeed``) and ``refine events`` (``EventStream``) read the events at
once: one statement a look, not two. Counted by the handle (``PostgresJournal.reads``), never
timed.
"""

from __future__ import annotations

import pytest

from store.journal.api import Journal
from store.journal.postgres import PostgresJournal
from store.journal.watch import ChangeFeed
from store.model.goals import Goals
from store.ops.event_stream import EventStream

pytestmark = pytest.mark.postgres
COMMITS = 5


def _commit(url: str, n: int) -> None:
    with Journal.open(url) as journal:
        Goals(journal).create(goal_id=f"g{n}", title=f"goal {n}", node_id="n1", argv=["true"])


def test_the_dashboard_feed_reads_once_per_commit(postgres_url: str) -> None:
    Journal.open(postgres_url).close()  # the journal, created
    feed = ChangeFeed(postgres_url)
    try:
        feed.poll()
        journal = feed.journal
        assert isinstance(journal, PostgresJournal)
        before = journal.reads
        seen = []
        for n in range(COMMITS):
            _commit(postgres_url, n)
            seen += feed.poll()
        assert {e.aggregate_id for e in seen} >= {f"goal:g{n}" for n in range(COMMITS)}
        assert journal.reads - before == COMMITS  # one events read a commit, no gate
    finally:
        feed.close()


def test_the_event_stream_reads_once_per_commit(postgres_url: str) -> None:
    Journal.open(postgres_url).close()
    stream = EventStream(postgres_url)
    try:
        list(stream.pages())
        journal = stream._handle.get()
        assert isinstance(journal, PostgresJournal)
        before = journal.reads
        for n in range(COMMITS):
            _commit(postgres_url, n)
            pages = list(stream.pages())
            assert [e.event.aggregate_id for page in pages for e in page][:1] == [f"goal:g{n}"]
        assert journal.reads - before == COMMITS
    finally:
        stream.close()
