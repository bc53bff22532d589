"""`refine check`: a clean journal passes; a tampered one is reported with its sequences."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from store.journal.sqlite import Journal
from store.model.goals import Goals
from store.ops.check import check_journal


def make_journal(path: Path) -> None:
    with Journal.open(path) as journal:
        goals = Goals(journal)
        goals.create(goal_id="build", title="Build", node_id="n1", argv=["true"], max_attempts=2)
        goals.start(goal_id="build", node_id="n1", worker="w1", token="t1")
        goals.settle(
            goal_id="build",
            run_id="build.r1",
            epoch=1,
            outcome="failed",
            reason="exit 1",
            evidence=["exit:1"],
        )
        goals.create(goal_id="old", title="Old", node_id="n1", argv=["true"])
        goals.cancel(goal_id="old", reason="not wanted", command_id="op:cancel:1")


def test_clean_journal_is_clean(tmp_path: Path) -> None:
    make_journal(tmp_path / "j.db")
    with Journal.open(tmp_path / "j.db", read_only=True) as journal:
        report = check_journal(journal)
    assert report.clean, report.text()
    assert (report.goals, report.runs) == (2, 2)


def test_tampered_state_is_reported_with_sequences(tmp_path: Path) -> None:
    make_journal(tmp_path / "j.db")
    with sqlite3.connect(tmp_path / "j.db") as raw:  # a state that no event explains
        raw.execute(
            "UPDATE aggregates SET state = json_set(state, '$.title', 'Forged')"
            " WHERE aggregate_id = 'goal:build'"
        )
    with Journal.open(tmp_path / "j.db", read_only=True) as journal:
        report = check_journal(journal)
    assert not report.clean
    [violation] = report.violations
    assert violation.aggregate_id == "goal:build" and violation.sequences
    assert "fold" in violation.message


def test_claim_after_cancel_is_a_violation(tmp_path: Path) -> None:
    make_journal(tmp_path / "j.db")
    with sqlite3.connect(tmp_path / "j.db") as raw:  # forge a goal.started after the cancel
        seq = raw.execute("SELECT max(sequence) FROM events").fetchone()[0] + 1
        raw.execute(
            "INSERT INTO events VALUES (?, 'goal:old', 3, 'goal.started', '{}', 0, 'x', NULL)",
            (seq,),
        )
    with Journal.open(tmp_path / "j.db", read_only=True) as journal:
        messages = [v.message for v in check_journal(journal).violations]
    assert any("after goal.cancelled" in m for m in messages), messages


def test_an_earlier_rounds_open_run_is_a_violation(tmp_path: Path) -> None:
    with Journal.open(tmp_path / "j.db") as journal:
        goals = Goals(journal)
        goals.create(goal_id="moved", title="Moved", node_id="n1", argv=["true"])
        goals.reassign(goal_id="moved", node_id="n2", expected_version=1)
        assert check_journal(journal).clean
    with sqlite3.connect(tmp_path / "j.db") as raw:  # reopen round 1's run behind the model
        raw.execute(
            "UPDATE aggregates SET status = 'queued',"
            " state = json_set(json_remove(state, '$.cancel_reason'), '$.status', 'queued')"
            " WHERE aggregate_id = 'run:moved.r1'"
        )
    with Journal.open(tmp_path / "j.db", read_only=True) as journal:
        messages = [v.message for v in check_journal(journal).violations]
    assert "run of earlier round 1 is queued" in messages, messages


def test_run_claim_after_goal_cancel_is_a_violation(tmp_path: Path) -> None:
    make_journal(tmp_path / "j.db")
    with sqlite3.connect(tmp_path / "j.db") as raw:  # forge a claim on the cancelled goal's run
        seq = raw.execute("SELECT max(sequence) FROM events").fetchone()[0] + 1
        raw.execute(
            "INSERT INTO events VALUES (?, 'run:old.r1', 3, 'attempt.claimed', '{}', 0, 'x', NULL)",
            (seq,),
        )
    with Journal.open(tmp_path / "j.db", read_only=True) as journal:
        violations = check_journal(journal).violations
    assert any(
        v.aggregate_id == "goal:old"
        and seq in v.sequences
        and "after the goal's cancel" in v.message
        for v in violations
    ), violations


def test_an_outbox_that_disagrees_with_the_events_is_a_violation(postgres_url: str) -> None:
    """An outbox kept as a table of its own (PostgreSQL before schema 4; today a view of the
    events on both backends): a missing and a changed row are each reported (a row without an
    event: the foreign key)."""
    import psycopg

    from store.journal.postgres import PostgresJournal
    from tests.helpers.old_schema import as_pg_schema

    with PostgresJournal.connect(postgres_url) as journal:
        goals = Goals(journal)
        goals.create(goal_id="a", title="A", node_id="n1", argv=["true"])
        goals.create(goal_id="b", title="B", node_id="n1", argv=["true"])
        assert check_journal(journal).clean
        as_pg_schema(postgres_url, 3)  # under the open journal: its reads see the table
        with psycopg.connect(postgres_url, autocommit=True) as raw:
            raw.execute("DELETE FROM refine.outbox WHERE sequence = 1")
            raw.execute("UPDATE refine.outbox SET topic = 'forged' WHERE sequence = 3")
        report = check_journal(journal)
    found = {(v.aggregate_id, v.sequences, v.message) for v in report.violations}
    assert found == {
        ("outbox", (1,), "events without an outbox row"),
        ("outbox", (3,), "outbox rows that differ from their event"),
    }


def test_a_broken_chain_of_events_is_a_violation(tmp_path: Path) -> None:
    """SQLite finds one aggregate's events through each event's ``prev``: a broken link hides
    the older ones from its history, and check says which."""
    make_journal(tmp_path / "j.db")
    with sqlite3.connect(tmp_path / "j.db") as raw:
        last = raw.execute("SELECT last_sequence FROM aggregates WHERE aggregate_id = 'goal:build'")
        (head,) = last.fetchone()
        raw.execute("UPDATE events SET prev = NULL WHERE sequence = ?", (head,))
    with Journal.open(tmp_path / "j.db", read_only=True) as journal:
        older = [e.sequence for e in journal.events_after(0) if e.aggregate_id == "goal:build"]
        report = check_journal(journal)
    [violation] = report.violations
    assert violation.aggregate_id == "goal:build"
    assert violation.message == "its history differs from its events"
    assert violation.sequences == tuple(older[:-1])


def test_records_that_are_not_objects_are_reported_not_a_crash(tmp_path: Path) -> None:
    """Stored states and event data that are not JSON objects are violations, never an error."""
    make_journal(tmp_path / "j.db")
    with sqlite3.connect(tmp_path / "j.db") as raw:
        raw.execute("UPDATE aggregates SET state = 'null' WHERE aggregate_id = 'run:build.r1'")
        raw.execute("UPDATE aggregates SET state = '[1]' WHERE aggregate_id = 'goal:old'")
        raw.execute("UPDATE events SET data = '{not json' WHERE sequence = 1")
        raw.execute("UPDATE events SET data = '5' WHERE sequence = 2")
    with Journal.open(tmp_path / "j.db", read_only=True) as journal:
        report = check_journal(journal)
        assert journal.events_after(0)[0].data == {"unreadable": "{not json"}
    found = {(v.aggregate_id, v.message) for v in report.violations}
    assert ("goal:build", "event data is not a JSON object") in found
    assert ("run:build.r1", "event data is not a JSON object") in found
    assert any(v.aggregate_id == "goal:old" and "refused" in v.message for v in report.violations)
    assert any(
        v.aggregate_id == "run:build.r1" and "refused" in v.message for v in report.violations
    )


class PageCounter:
    """A real journal, its reads counted: what check asks for and how much it gets back."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self.unbounded: list[str] = []  # reads of a whole table at once
        self.largest = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self.journal, name)

    def aggregates(self, kind: str, **options: object) -> list:
        if options.get("limit") is None:
            self.unbounded.append(kind)
        rows = self.journal.aggregates(kind, **options)  # type: ignore[arg-type]
        self.largest = max(self.largest, len(rows))
        return rows


def test_a_clean_journal_is_checked_in_pages(tmp_path: Path, monkeypatch) -> None:
    """Issue 27: memory stays flat at a million Goals: no table is read whole, aggregates come
    a page at a time, and progress counts up to every event and aggregate."""
    import store.ops.check as check

    monkeypatch.setattr(check, "PAGE", 2)
    make_journal(tmp_path / "j.db")
    with Journal.open(tmp_path / "j.db") as journal:
        goals = Goals(journal)
        for n in range(5):
            goals.create(goal_id=f"more{n}", title="More", node_id="n1", argv=["true"])
    seen: list[tuple[int, int]] = []
    with Journal.open(tmp_path / "j.db", read_only=True) as journal:
        counted = PageCounter(journal)
        report = check_journal(counted, lambda done, total: seen.append((done, total)))  # type: ignore[arg-type]
        events = journal.last_sequence()
    assert report.clean, report.text()
    assert (report.goals, report.runs, report.events) == (7, 7, events)
    assert counted.unbounded == [] and counted.largest == 2
    assert seen[-1] == (events + 14, events + 14)
    assert [done for done, _ in seen] == sorted(done for done, _ in seen)


@pytest.mark.postgres
def test_a_page_of_aggregates_costs_the_same_reads_however_many_it_holds(postgres_url: str) -> None:
    """On PostgreSQL a read is a round trip: a page's histories (and its cancelled Goals' Runs')
    come in one read each, not one per aggregate (two million at a million Goals)."""
    from store.journal.postgres import PostgresJournal

    def reads_to_check(goal_count: int) -> int:
        with PostgresJournal.connect(postgres_url) as journal:
            goals = Goals(journal)
            for n in range(journal.count("goal"), goal_count):
                goals.create(goal_id=f"g{n}", title="G", node_id="n1", argv=["true"])
                if n % 2:
                    goals.cancel(goal_id=f"g{n}", reason="not wanted", command_id=f"op:cancel:{n}")
            before = journal.reads
            report = check_journal(journal)
            assert report.clean and report.goals == goal_count, report.text()
            return journal.reads - before

    few, many = reads_to_check(4), reads_to_check(40)  # each one page, and one page of events
    assert few == many, (few, many)


def test_events_of_an_aggregate_never_stored_are_found_by_counting(tmp_path: Path) -> None:
    """Paged, check proves each event is in its aggregate's history by adding up the
    histories: an aggregate whose row is gone leaves its events in none of them."""
    make_journal(tmp_path / "j.db")
    with sqlite3.connect(tmp_path / "j.db") as raw:
        raw.execute("UPDATE events SET aggregate_id = 'goal:ghost' WHERE sequence = 1")
    with Journal.open(tmp_path / "j.db", read_only=True) as journal:
        report = check_journal(journal)
    assert not report.clean
    assert any(v.aggregate_id == "goal:ghost" for v in report.violations), report.text()
