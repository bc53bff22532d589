"""The journal alone: atomic commands, replay, versions, read-only, paging, change detection.

The first part is the contract every backend meets: it takes journals from the
``journal`` / ``journal_factory`` fixtures (tests/conftest.py), so each backend registered
there runs it. The second part covers what only the SQLite backend has: files.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from store.errors import (
    BackendUnavailableError,
    CommandConflictError,
    CorruptRunError,
    DecisionError,
    DiskFullError,
    InvalidInputError,
    JournalClosedError,
    JournalLockedError,
    JournalMissingError,
    JournalReadOnlyError,
    NotAJournalError,
    StorageError,
    StorageUnreachableError,
    VersionConflictError,
)
from store.journal import api as journal_api
from store.journal.sqlite import SCHEMA_VERSION, Change, Journal, SqliteJournal
from store.model.execution import Execution
from store.model.goals import Goals
from store.ops.check import check_journal
from tests.conftest import JournalFactory
from tests.helpers.old_schema import as_schema_3


def submit(loaded):  # a minimal decision: create one aggregate
    assert loaded["run:a"] is None
    return [Change("run:a", {"status": "queued"}, [("run.submitted", {"run_id": "a"})])]


def create(aggregate_id: str, status: str = "queued", node_id: str = "n1"):
    def decide(loaded):
        state = {"status": status, "node_id": node_id, "title": aggregate_id.upper()}
        return [Change(aggregate_id, state, [("made", {"id": aggregate_id})])]

    return decide


def make(journal: Journal, aggregate_id: str, **kw: str) -> None:
    journal.execute(
        command_id="make-" + aggregate_id,
        payload={"id": aggregate_id, **kw},
        expected={aggregate_id: None},
        decide=create(aggregate_id, **kw),
    )


# --- the contract: every backend ------------------------------------------------------------------


def test_command_commits_state_receipt_events_and_outbox(journal: Journal) -> None:
    j = journal
    out = j.execute(command_id="c1", payload={"op": "s"}, expected={"run:a": None}, decide=submit)
    assert not out.replayed and out.states["run:a"].version == 1
    assert [e.sequence for e in j.events_after(0)] == [1]
    assert j.outbox() == [(1, "run:a", "run.submitted")]
    again = j.execute(command_id="c1", payload={"op": "s"}, expected={"run:a": None}, decide=submit)
    assert again.replayed and again.states == out.states
    assert j.last_sequence() == 1


def test_refusals_record_nothing(journal: Journal) -> None:
    j = journal
    j.execute(command_id="c1", payload={"op": "s"}, expected={"run:a": None}, decide=submit)
    with pytest.raises(CommandConflictError):
        j.execute(command_id="c1", payload={"op": "t"}, expected={"run:a": None}, decide=submit)
    with pytest.raises(VersionConflictError):
        j.execute(command_id="c2", payload={"op": "t"}, expected={"run:a": 3}, decide=submit)
    with pytest.raises(DecisionError):
        j.execute(
            command_id="c3",
            payload={"op": "t"},
            expected={"run:a": 1},
            decide=lambda loaded: 1 / 0,
        )
    with pytest.raises(DecisionError):  # a decision may change only what it read
        j.execute(
            command_id="c4",
            payload={"op": "t"},
            expected={"run:a": 1},
            decide=lambda loaded: [Change("run:b", {}, [])],
        )
    assert j.last_sequence() == 1 and len(j.outbox()) == 1
    assert j.load("run:a") is not None and j.load("run:a").version == 1


def test_read_only_refuses_even_a_replay(journal_factory: JournalFactory) -> None:
    j = journal_factory()
    j.execute(command_id="c1", payload={"op": "s"}, expected={"run:a": None}, decide=submit)
    ro = journal_factory(read_only=True)
    assert ro.read_only and not j.read_only
    with pytest.raises(JournalReadOnlyError):
        ro.execute(command_id="c1", payload={"op": "s"}, expected={"run:a": None}, decide=submit)
    assert ro.load("run:a").state == {"status": "queued"}


def test_closed_and_paging(journal: Journal) -> None:
    j = journal
    for bad in (-1, True, 1.5):
        with pytest.raises(InvalidInputError):
            j.history("run:a", after_sequence=bad)
    for bad in (0, 1001, False):
        with pytest.raises(InvalidInputError):
            j.history("run:a", limit=bad)
    assert not j.closed
    j.close()
    assert j.closed
    with pytest.raises(JournalClosedError):
        j.load("run:a")
    with pytest.raises(JournalClosedError):
        j.execute(command_id="c1", payload={}, expected={"run:a": None}, decide=submit)


def test_reads_by_id_kind_status_node_and_recency(journal: Journal) -> None:
    for agg, status, node in [
        ("goal:b", "queued", "n1"),
        ("goal:a", "running", "n2"),
        ("goal:c", "queued", "n2"),
        ("run:x", "queued", "n1"),
    ]:
        make(journal, agg, status=status, node_id=node)
    ids = lambda stored: [s.aggregate_id for s in stored]  # noqa: E731
    assert ids(journal.aggregates("goal")) == ["goal:a", "goal:b", "goal:c"]
    assert ids(journal.aggregates("goal", newest_first=True, limit=2)) == ["goal:c", "goal:a"]
    assert ids(journal.aggregates("goal", status="queued")) == ["goal:b", "goal:c"]
    assert ids(journal.aggregates("goal", status=["queued", "running"], node_id="n2")) == [
        "goal:a",
        "goal:c",
    ]
    assert ids(journal.aggregates("goal", contains="B")) == ["goal:b"]  # id or state text
    # The state's text, ASCII letters folded either way (state holds "status": "running").
    assert ids(journal.aggregates("goal", contains="RUNning")) == ["goal:a"]
    assert journal.count("goal") == 3 and journal.count("goal", "queued") == 2
    assert journal.count("run") == 1
    assert set(journal.load_many(["goal:a", "goal:zzz", "run:x"])) == {"goal:a", "run:x"}
    assert journal.load("goal:zzz") is None
    assert journal.load("goal:a").state["node_id"] == "n2"


def test_a_search_takes_every_character_of_its_needle_literally(journal: Journal) -> None:
    """SQLite looks for a needle with LIKE (it folds ASCII letters itself): its wildcards and
    escape character in the needle are plain characters, as in a substring."""
    for n, note in enumerate(["Up 50% today", "up 50x today", "a_b", "axb", "c\\d", "cd", "é_Ü"]):
        make(journal, f"goal:g{n}", node_id=note)
    found = lambda needle: [s.aggregate_id for s in journal.aggregates("goal", contains=needle)]  # noqa: E731
    assert found("UP 50%") == ["goal:g0"]
    assert found("a_b") == ["goal:g2"]
    assert found("c\\\\d") == ["goal:g4"]  # the state's JSON text holds the backslash escaped
    assert found("%") == ["goal:g0"] and found("b_") == []  # not b then any character
    for needle in ("é_Ü", "É_ü"):  # the coarse search finds it in any case (and maybe more)
        assert "goal:g6" in found(needle)
    assert found("G3") == ["goal:g3"]  # the id too, ASCII letters folded


def test_history_events_after_and_last_commit(journal: Journal) -> None:
    assert journal.last_commit() == (0, None) and journal.last_sequence() == 0
    assert journal.events_after(0) == []
    for agg in ("run:a", "run:b", "run:c"):
        make(journal, agg)
    journal.execute(
        command_id="again",
        payload={},
        expected={"run:a": 1},
        decide=lambda loaded: [Change("run:a", {"status": "done"}, [("x", {}), ("y", {"n": 1})])],
    )
    history = journal.history("run:a")
    assert [(e.sequence, e.version, e.type) for e in history] == [
        (1, 1, "made"),
        (4, 2, "x"),
        (5, 2, "y"),
    ]
    assert history[2].data == {"n": 1} and history[2].aggregate_id == "run:a"
    assert [e.sequence for e in journal.history("run:a", after_sequence=1, limit=1)] == [4]
    assert [e.sequence for e in journal.events_after(2, limit=2)] == [3, 4]
    sequence, at = journal.last_commit()
    assert sequence == 5 == journal.last_sequence() and at == history[-1].committed_at


def test_each_history_is_its_aggregates_events_in_order(journal: Journal) -> None:
    """Interleaved commands over several aggregates, some writing two events to one aggregate:
    every aggregate's history, whole and paged, is its slice of "events after", in order."""
    aggs = [f"run:h{n}" for n in range(4)]
    for step in range(12):
        agg = aggs[(step * 3) % 4]
        events = [("e", {"step": step})] + ([("f", {"step": step})] if step % 3 == 0 else [])
        journal.execute(
            command_id=f"h{step}",
            payload={"step": step},
            expected={agg: None},
            decide=lambda loaded, agg=agg, events=events: [Change(agg, {"n": 1}, events)],
        )
    everything = journal.events_after(0)
    for agg in aggs:
        mine = [e for e in everything if e.aggregate_id == agg]
        assert journal.history(agg, 0, 1000) == mine
        assert journal.history(agg, mine[1].sequence, 2) == mine[2:4]
        assert journal.history(agg, mine[-1].sequence) == []
    assert journal.history("run:none") == []


def test_snapshot_reads_one_state(journal: Journal) -> None:
    make(journal, "run:a")
    with journal.snapshot() as view:
        assert view.load("run:a") is not None and view.count("run") == 1
        with view.snapshot() as inner:  # nested: still the same view
            assert inner.last_sequence() == 1


def test_change_source_sees_other_handles_commits(journal_factory: JournalFactory) -> None:
    writer, reader = journal_factory(), journal_factory(read_only=True)
    changes = reader.changes()
    assert changes.changed()  # the first look always reads
    assert not changes.changed()
    make(writer, "run:a")
    assert changes.changed() and not changes.changed()
    assert reader.changes().changed()  # every consumer has its own gate
    assert not reader.replaced() and not writer.replaced()


def test_the_api_layers_accept_any_journal(journal: Journal) -> None:
    assert isinstance(journal, journal_api.Journal)
    assert Execution(journal).read("nothing") is None
    assert Goals(journal).journal is journal
    for not_a_journal in (object(), "journal.db", None):
        with pytest.raises(InvalidInputError):
            Execution(not_a_journal)  # type: ignore[arg-type]
        with pytest.raises(InvalidInputError):
            Goals(not_a_journal)  # type: ignore[arg-type]


def test_a_handle_follows_its_location(journal_location: str, journal: Journal) -> None:
    handle = journal_api.JournalHandle(journal_location, read_only=True)
    first = handle.get()
    assert handle.get() is first and first.read_only
    first.close()
    assert handle.get() is not first  # a closed handle is reopened
    handle.close()
    assert handle.journal is None


# --- typed storage errors and SQLite specifics ----------------------------------------------------


@pytest.mark.parametrize("location", [None, 123, b"/tmp/j.db", "", "j\x00.db", Path("j\x00.db")])
def test_a_location_that_is_no_path_is_invalid_input(
    location: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fuzzed input gives typed errors: not a TypeError or a ValueError from the system."""
    monkeypatch.chdir(tmp_path)  # "" would name the current folder
    for call in (lambda: Journal.open(location), lambda: Journal.watch(location)):  # type: ignore[arg-type]
        with pytest.raises(InvalidInputError, match="journal location"):
            call()
    assert list(tmp_path.iterdir()) == []


def test_bad_files_are_refused_by_type_and_left_alone(tmp_path: Path) -> None:
    with pytest.raises(JournalMissingError):
        Journal.open(tmp_path / "missing.db", read_only=True)
    with pytest.raises(JournalMissingError):
        Journal.open(tmp_path / "missing.db", create=False)
    assert not (tmp_path / "missing.db").exists()
    (tmp_path / "text.db").write_text("not sqlite " * 100)
    with pytest.raises(NotAJournalError):
        Journal.open(tmp_path / "text.db")
    assert (tmp_path / "text.db").read_text() == "not sqlite " * 100
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.close()
    with pytest.raises(NotAJournalError):
        Journal.open(other)
    with pytest.raises(NotAJournalError):
        Journal.open(tmp_path)  # a folder
    (tmp_path / "empty.db").touch()
    with pytest.raises(NotAJournalError):
        Journal.open(tmp_path / "empty.db", create=False)


def test_newer_schema_is_not_a_journal_we_can_read(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    Journal.open(path).close()
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    with pytest.raises(NotAJournalError, match="newer"):
        Journal.open(path)


def test_a_schema_2_journal_migrates_its_receipts_to_digests_and_still_replays(
    tmp_path: Path,
) -> None:
    path = tmp_path / "j.db"
    cmd = dict(command_id="c1", payload={"op": "s"}, expected={"run:a": None})
    with Journal.open(path) as j:
        j.execute(**cmd, decide=submit)  # type: ignore[arg-type]
    as_schema_3(path)
    conn = sqlite3.connect(path)  # as schema 2 stored it: the canonical text itself
    conn.execute(
        "UPDATE receipts SET payload = ?",
        ('{"expected":{"run:a":null},"payload":{"op":"s"}}',),
    )
    conn.execute("PRAGMA user_version = 2")
    conn.commit()
    conn.close()
    with Journal.open(path) as j:
        again = j.execute(**cmd, decide=submit)  # type: ignore[arg-type]
        assert again.replayed and again.states["run:a"].state == {"status": "queued"}
        with pytest.raises(CommandConflictError):
            j.execute(**{**cmd, "payload": {"op": "t"}}, decide=submit)  # type: ignore[arg-type]
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    (payload,) = conn.execute("SELECT payload FROM receipts").fetchone()
    assert len(payload) == 32 and not payload.startswith("{")
    conn.close()


def test_a_schema_3_journal_reads_as_it_is_and_migrates_to_the_outbox_view_and_chains(
    tmp_path: Path,
) -> None:
    path = tmp_path / "j.db"
    with Journal.open(path) as j:
        goals = Goals(j)
        goals.create(goal_id="a", title="A", node_id="n1", argv=["true"])
        goals.create(goal_id="b", title="B", node_id="n2", argv=["true"])
        goals.start(goal_id="b", node_id="n2", worker="w", token="t")
        before = (j.outbox(), j.aggregates("goal", status="queued"), j.count("goal"))
        histories = {agg: j.history(agg) for agg in ("goal:a", "goal:b", "run:b.r1")}
    as_schema_3(path)  # the outbox a table of its own, the indexes over every kind
    with Journal.open(path, read_only=True) as old:  # read as it is, not migrated
        assert (old.outbox(), old.aggregates("goal", status="queued"), old.count("goal")) == before
        assert {agg: old.history(agg) for agg in histories} == histories
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 3
    conn.close()
    with Journal.open(path) as j:  # the first writable open migrates, rows as they were
        assert (j.outbox(), j.aggregates("goal", status="queued"), j.count("goal")) == before
        assert {agg: j.history(agg) for agg in histories} == histories  # chained by migration
        again = Goals(j).create(goal_id="a", title="A", node_id="n1", argv=["true"])
        assert again.replayed
        Goals(j).create(goal_id="c", title="C", node_id="n1", argv=["true"])
        assert j.outbox()[-2:] == [(e.sequence, e.aggregate_id, e.type) for e in j.events_after(6)]
        assert check_journal(j).clean
    conn = sqlite3.connect(path)
    kinds = dict(conn.execute("SELECT name, type FROM sqlite_master WHERE name LIKE '%o%'"))
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 6
    assert kinds.get("outbox") == "view" and "aggregates_by_status" not in kinds
    assert "events_by_aggregate" not in kinds
    conn.close()


def test_goal_lookups_read_the_partial_indexes(tmp_path: Path) -> None:
    """The dashboard's and the node's Goal lookups stay index reads at 100k Goals although the
    indexes leave out Runs and settled Goals (schema 4): the queries repeat the indexes' terms."""
    from store.journal.sqlite import ACTIVE_STATUSES
    from store.model.goal import GOAL_STATUSES, TERMINAL_STATUSES

    assert set(ACTIVE_STATUSES) == set(GOAL_STATUSES) - TERMINAL_STATUSES
    with Journal.open(tmp_path / "j.db") as j:
        Goals(j).create(goal_id="a", title="A", node_id="n1", argv=["true"])
        conn = j._connection()
        statements: list[tuple[str, list[object]]] = []

        class Recording:  # the journal's connection, noting each statement
            def execute(self, sql: str, args: list[object] = []) -> sqlite3.Cursor:  # noqa: B006
                statements.append((sql, list(args)))
                return conn.execute(sql, args)

        j._conn = Recording()  # type: ignore[assignment]
        j.aggregates("goal", status="queued", node_id="n1", limit=5)  # the node's scheduler
        j.aggregates("goal", status=list(ACTIVE_STATUSES), limit=1000)  # the first paint
        j.aggregates("goal", status=sorted(TERMINAL_STATUSES), newest_first=True, limit=200)
        j.aggregates("goal", newest_first=True, limit=2000, before=(9000, "goal:x"))  # the index
        j.count("goal")
        j._conn = conn
        plans = [
            " ".join(row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, args))
            for sql, args in statements
        ]
    assert len(plans) == 5
    # Active Goals: a range of the (small) index of moving Goals; the rest by recency.
    assert all(p.startswith("SEARCH aggregates USING INDEX goals_active") for p in plans[:2])
    assert all("INDEX goals_by_recency" in p for p in plans[2:]), plans
    assert "COVERING INDEX goals_by_recency" in plans[4], plans  # the count reads no row


def test_pages_in_id_order_walk_the_primary_key(tmp_path: Path) -> None:
    """Issue 27: `refine goals` and `check` read a million Goals a page at a time by id. Each
    page is a range of the primary key; by the Goals' recency index, every page read and sorted
    every Goal (a thousand pages at a million: quadratic). A status page reads its ids from the
    status index (covering) before its rows."""
    with Journal.open(tmp_path / "j.db") as j:
        Goals(j).create(goal_id="a", title="A", node_id="n1", argv=["true"])
        conn = j._connection()
        statements: list[tuple[str, list[object]]] = []

        class Recording:  # the journal's connection, noting each statement
            def execute(self, sql: str, args: list[object] = []) -> sqlite3.Cursor:  # noqa: B006
                statements.append((sql, list(args)))
                return conn.execute(sql, args)

        j._conn = Recording()  # type: ignore[assignment]
        j.aggregates("goal", limit=1000)
        j.aggregates("goal", limit=1000, after_id="goal:a")
        j.aggregates("run", limit=500, after_id="run:a.r1")
        j.aggregates("goal", status="running", limit=1000, after_id="goal:a")
        j._conn = conn
        plans = [
            " ".join(row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, args))
            for sql, args in statements
        ]
    assert plans[0] == "SCAN aggregates", plans  # in key order, until the page is full
    assert all(p == "SEARCH aggregates USING PRIMARY KEY (aggregate_id>?)" for p in plans[1:3])
    assert "COVERING INDEX goals_active" in plans[3] and "PRIMARY KEY" in plans[3], plans


def test_a_folded_state_keeps_only_its_version_in_the_receipt_and_replays_by_fold(
    tmp_path: Path,
) -> None:
    path = tmp_path / "j.db"
    with Journal.open(path) as j:
        ex = Execution(j)
        BUDGET = {"max_attempts": 2, "attempt_timeout_ms": 60_000}
        pins = {"candidate_digest": "sha256:" + "ab" * 32, "recipe_revision": "r",
                "scenario_revision": "s"}  # fmt: skip
        first = ex.submit(command_id="s1", run_id="r1", pins=pins, budget=BUDGET)
        ex.claim(command_id="c1", run_id="r1", expected_version=1, worker="w1")
        conn = sqlite3.connect(path)
        assert conn.execute("SELECT result FROM receipts WHERE command_id = 's1'").fetchone() == (
            '{"run:r1":1}',
        )
        again = ex.submit(command_id="s1", run_id="r1", pins=pins, budget=BUDGET)
        assert again.replayed and again.run == first.run  # folded from version 1's events
        # Events that no longer fold are a corrupt record, never a replay of something else.
        conn.execute("UPDATE events SET data = '{}' WHERE version = 1")
        conn.commit()
        conn.close()
        with pytest.raises(CorruptRunError):
            ex.submit(command_id="s1", run_id="r1", pins=pins, budget=BUDGET)


def test_a_writer_holding_the_lock_is_journal_locked(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    with Journal.open(path) as j, Journal.open(path, busy_timeout_ms=50) as other:
        blocker = sqlite3.connect(path, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(JournalLockedError) as caught:
                other.execute(command_id="c", payload={}, expected={"run:a": None}, decide=submit)
            assert caught.value.code == "STORAGE" and isinstance(caught.value, StorageError)
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        assert j.last_sequence() == 0


def test_a_full_disk_is_disk_full_and_records_nothing(tmp_path: Path) -> None:
    with Journal.open(tmp_path / "j.db") as j:
        assert isinstance(j, SqliteJournal)
        pages = j._connection().execute("PRAGMA page_count").fetchone()[0]
        j._connection().execute(f"PRAGMA max_page_count = {pages}")  # no room to grow
        big = {"status": "queued", "blob": "x" * 100_000}
        with pytest.raises(DiskFullError):
            j.execute(
                command_id="c",
                payload={},
                expected={"run:a": None},
                decide=lambda loaded: [Change("run:a", big, [("run.submitted", {})])],
            )
        assert j.last_sequence() == 0 and j.load("run:a") is None


def test_a_replaced_file_is_refused_until_reopened(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    Journal.open(path).close()
    handle = journal_api.JournalHandle(path)
    old = handle.get()
    Journal.open(tmp_path / "new.db").close()
    os.replace(tmp_path / "new.db", path)
    assert old.replaced()
    with pytest.raises(JournalMissingError):
        old.execute(command_id="c", payload={}, expected={"run:a": None}, decide=submit)
    new = handle.get()
    assert new is not old and old.closed and not new.replaced()
    new.execute(command_id="c", payload={}, expected={"run:a": None}, decide=submit)
    handle.close()


def test_a_location_without_its_backend_is_a_typed_refusal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(journal_api.BACKENDS, "nosuch", ("store.no_such_backend", "Nothing"))
    with pytest.raises(BackendUnavailableError) as caught:
        Journal.open("nosuch://db.example/refine")
    assert caught.value.code == "STORAGE"
    with pytest.raises(BackendUnavailableError):
        Journal.watch("NoSuch://db.example/refine")


def test_storage_errors_keep_one_code() -> None:
    for cls in (
        JournalMissingError,
        JournalLockedError,
        NotAJournalError,
        StorageUnreachableError,
        DiskFullError,
        BackendUnavailableError,
    ):
        assert issubclass(cls, StorageError) and cls("x").code == "STORAGE"


def test_a_command_reads_once_and_writes_each_table_once(tmp_path: Path) -> None:
    """A command's aggregates, receipt and newest sequence come in one statement (the write
    lock is held from BEGIN IMMEDIATE); then one INSERT of its events, its row, its receipt.
    A replay stops after the read."""
    with Journal.open(tmp_path / "j.db") as journal:
        assert isinstance(journal, SqliteJournal)
        ex = Execution(journal)
        pins = {"candidate_digest": "sha256:" + "a" * 64, "recipe_revision": "v1",
                "scenario_revision": "s1"}  # fmt: skip
        budget = {"max_attempts": 2, "attempt_timeout_ms": 1000}
        ex.submit(command_id="s", run_id="r", pins=pins, budget=budget)
        seen: list[str] = []
        journal._connection().set_trace_callback(lambda sql: seen.append(sql.split()[0]))
        ex.claim(command_id="c", run_id="r", expected_version=1, worker="w")
        ex.complete(command_id="d", run_id="r", expected_version=2, epoch=1, evidence=[])
        assert seen == ["BEGIN", "SELECT", "INSERT", "UPDATE", "INSERT", "COMMIT"] * 2
        seen.clear()
        assert ex.complete(
            command_id="d", run_id="r", expected_version=2, epoch=1, evidence=[]
        ).replayed
        assert seen == ["BEGIN", "SELECT", "COMMIT"]
        assert [e.type for e in ex.history("r")] == [
            "run.submitted", "attempt.claimed", "attempt.completed", "run.completed"
        ]  # fmt: skip
        assert check_journal(journal).clean
