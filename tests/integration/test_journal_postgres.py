"""The journal on PostgreSQL: what only a server journal has (schema, roles, URLs, a server that
goes away) and the ordering guarantee a reader of "events after N" relies on. A real server."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import psycopg
import pytest

import store.journal.postgres as journal_postgres
from store.errors import (
    CommandConflictError,
    InvalidInputError,
    JournalLockedError,
    JournalMissingError,
    JournalReadOnlyError,
    NotAJournalError,
    StorageError,
    StorageUnreachableError,
    VersionConflictError,
)
from store.journal.postgres import PostgresJournal, node_channel
from store.journal.sqlite import Change
from store.journal.url import redact
from store.model.goals import Goals
from store.ops.check import check_journal
from tests.helpers.old_schema import as_pg_schema
from tests.helpers.postgres_server import PASSWORD, PostgresServer


def create(agg: str):  # a decision that creates one aggregate
    def decide(loaded):
        assert loaded[agg] is None
        return [Change(agg, {"status": "queued"}, [("run.submitted", {"n": agg})])]

    return decide


def bump(loaded):  # a decision that changes every aggregate it read
    return [
        Change(agg, {"status": "running", "n": s.version}, [("run.bumped", {})])
        for agg, s in loaded.items()
    ]


def add(journal: PostgresJournal, agg: str, command_id: str | None = None) -> None:
    journal.execute(
        command_id=command_id or f"create:{agg}",
        payload={"op": "create", "agg": agg},
        expected={agg: None},
        decide=create(agg),
    )


def tables_in(url: str, schema: str) -> list[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s"
            " ORDER BY table_name",
            (schema,),
        ).fetchall()
    return [r[0] for r in rows]


@pytest.fixture
def journal(postgres_url: str) -> Iterator[PostgresJournal]:
    with PostgresJournal.connect(postgres_url) as j:
        yield j


def test_a_command_commits_state_receipt_events_outbox_and_notifies(
    journal: PostgresJournal, postgres_url: str
) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as listener:
        listener.execute("LISTEN refine_journal")
        add(journal, "run:a")
        add(journal, "run:b")
        notes = [n.payload for n in listener.notifies(timeout=5, stop_after=2)]
    assert notes == ["1", "2"]
    assert [e.sequence for e in journal.events_after(0)] == [1, 2]
    assert journal.outbox() == [(1, "run:a", "run.submitted"), (2, "run:b", "run.submitted")]
    assert journal.last_commit()[0] == 2 and journal.last_sequence() == 2
    again = journal.execute(
        command_id="create:run:a",
        payload={"op": "create", "agg": "run:a"},
        expected={"run:a": None},
        decide=create("run:a"),
    )
    assert again.replayed and again.states["run:a"].version == 1
    with pytest.raises(CommandConflictError):
        journal.execute(
            command_id="create:run:a", payload={"op": "x"}, expected={"run:a": None}, decide=bump
        )
    with pytest.raises(VersionConflictError):
        journal.execute(command_id="b", payload={}, expected={"run:a": 7}, decide=bump)
    assert journal.last_sequence() == 2 and len(journal.outbox()) == 2


def test_a_command_takes_two_round_trips_and_a_replay_two(journal: PostgresJournal) -> None:
    """BEGIN + locks + receipt, then write_command() + COMMIT: each one query string sent."""
    add(journal, "run:a")  # the first command also prepares the connection's statements
    add(journal, "run:b")
    sent: list[str] = []

    class Counting(psycopg.ClientCursor[Any]):
        def execute(self, query: Any, params: Any = None, **kw: Any) -> Any:
            sent.append(str(query))
            return super().execute(query, params, **kw)

    assert journal._conn is not None
    journal._cursor = Counting(journal._conn)
    expected = {"run:a": 1, "run:b": 1}
    journal.execute(command_id="c1", payload={}, expected=expected, decide=bump)
    assert len(sent) == 2 and sent[0].startswith("BEGIN") and sent[1].endswith("COMMIT")
    sent.clear()
    assert journal.execute(command_id="c1", payload={}, expected=expected, decide=bump).replayed
    assert len(sent) == 2 and sent[1] == "COMMIT"


def test_the_command_statements_outlive_rollbacks_and_a_deallocate(
    journal: PostgresJournal,
) -> None:
    """psycopg answers a ROLLBACK with DEALLOCATE ALL once it has prepared a statement of its
    own (a read repeated 5 times): a refused command then left the next one without its
    prepared statements. And a session that lost them prepares them again."""
    add(journal, "run:a")
    for _ in range(8):
        assert journal.load("run:a") is not None
    with pytest.raises(VersionConflictError):  # rolled back
        journal.execute(command_id="c1", payload={}, expected={"run:a": 7}, decide=bump)
    journal.execute(command_id="c2", payload={}, expected={"run:a": 1}, decide=bump)
    assert journal._conn is not None
    journal._conn.execute("DEALLOCATE ALL")
    journal.execute(command_id="c3", payload={}, expected={"run:a": 2}, decide=bump)
    assert journal.load("run:a").version == 3  # type: ignore[union-attr]


def test_a_followers_reads_are_prepared_once_per_session_and_outlive_a_deallocate(
    journal: PostgresJournal,
) -> None:
    """The reads a follower makes on every commit (the events after its cursor, the aggregates
    they touched) run as statements prepared once per connection; a session that lost them
    prepares them again, and the answers are the same."""
    add(journal, "run:a")
    add(journal, "run:b")
    records = journal.event_records(0)
    assert [(r[0], r[1]) for r in records] == [(1, "run:a"), (2, "run:b")]
    assert [e.aggregate_id for e in journal.events_after(1)] == ["run:b"]
    assert journal._conn is not None
    names = {
        row[0]
        for row in journal._conn.execute("SELECT name FROM pg_prepared_statements").fetchall()
    }
    assert {"refine_events_after", "refine_load_many"} <= names
    journal._conn.execute("DEALLOCATE ALL")
    assert journal.event_records(0) == records
    assert journal.event_records(0, limit=1) == records[:1]
    assert sorted(journal.load_many(["run:b", "run:a", "run:none"])) == ["run:a", "run:b"]
    assert journal.load_many([]) == {}


def test_a_read_of_one_id_is_planned_once_not_on_every_execution(
    journal: PostgresJournal,
) -> None:
    """A follower reads the one Goal a commit touched on every commit: by equality, whose plan
    PostgreSQL keeps (``= ANY`` of an array it plans again each time: most of such a read's
    server work). Counted in the server's own statistics, not timed."""
    for agg in ("goal:a", "goal:b"):
        add(journal, agg)
    for _ in range(12):
        assert list(journal.load_many(["goal:a"])) == ["goal:a"]
        assert list(journal.load_linked(["goal:b"], "n", "run:")[0]) == ["goal:b"]
    assert sorted(journal.load_many(["goal:a", "goal:b"])) == ["goal:a", "goal:b"]
    assert journal._conn is not None
    plans = {
        row[0]: (row[1], row[2])
        for row in journal._conn.execute(
            "SELECT name, generic_plans, custom_plans FROM pg_prepared_statements"
        ).fetchall()
    }
    for one in ("refine_load_one", "refine_load_linked_one"):
        generic, custom = plans[one]
        assert generic >= 7 and custom <= 5, (one, plans[one])
    assert plans["refine_load_many"] == (0, 1)  # two ids: the array's statement


def test_a_followers_events_after_is_planned_once_and_the_session_keeps_its_planning(
    journal: PostgresJournal,
) -> None:
    """The events after a cursor, read on every commit: PostgreSQL's generic plan of
    ``sequence > $1`` looks worse than a custom one (a third of the table, it guesses) though
    it is the same index scan, so it planned the read afresh each time. The read asks for the
    generic plan for itself alone (``SET LOCAL``); the session's other statements and a read
    inside a snapshot keep the server's own choice. Counted by the server, not timed."""
    for agg in ("goal:a", "goal:b", "goal:c"):
        add(journal, agg)
    for _ in range(12):
        assert [e.aggregate_id for e in journal.events_after(2)] == ["goal:c"]
    assert journal._conn is not None

    def plans() -> tuple[int, int]:
        assert journal._conn is not None
        row = journal._conn.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
            " WHERE name = 'refine_events_after'"
        ).fetchone()
        assert row is not None
        return int(row[0]), int(row[1])

    assert plans() == (12, 0)
    assert journal._conn.execute("SHOW plan_cache_mode").fetchone() == ("auto",)
    with journal.snapshot():  # a transaction of its own: SET LOCAL would outlive the read
        assert [e.aggregate_id for e in journal.events_after(1)] == ["goal:b", "goal:c"]
        assert journal._conn.execute("SHOW plan_cache_mode").fetchone() == ("auto",)
    assert plans() == (12, 1)
    assert [e.aggregate_id for e in journal.events_after(0, limit=2)] == ["goal:a", "goal:b"]
    assert plans() == (13, 1)
    journal._conn.execute("DEALLOCATE ALL")  # a session that lost it: prepared again, generic
    assert [e.aggregate_id for e in journal.events_after(0)] == ["goal:a", "goal:b", "goal:c"]
    assert plans() == (1, 0)


def test_a_database_without_a_journal_is_refused_and_nothing_is_created(
    postgres_url: str,
) -> None:
    with pytest.raises(JournalMissingError, match="refine init"):
        PostgresJournal.connect(postgres_url, create=False)
    with pytest.raises(JournalMissingError):
        PostgresJournal.connect(postgres_url, read_only=True)
    assert tables_in(postgres_url, "refine") == []
    with psycopg.connect(postgres_url) as conn:
        assert (
            conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = 'refine'").fetchone() is None
        )


def test_a_foreign_schema_is_never_touched_even_by_init(postgres_url: str) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA refine")
        conn.execute("CREATE TABLE refine.orders (id int)")
    for create_it in (True, False):
        with pytest.raises(NotAJournalError, match="other data"):
            PostgresJournal.connect(postgres_url, create=create_it)
    assert tables_in(postgres_url, "refine") == ["orders"]


def test_an_empty_schema_made_by_an_administrator_is_initialised(postgres_url: str) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA refine")
    with PostgresJournal.connect(postgres_url) as j:
        add(j, "run:a")
    assert "events" in tables_in(postgres_url, "refine")


def test_the_schema_is_chosen_in_the_url_and_journals_stay_apart(postgres_url: str) -> None:
    other = postgres_url + "?schema=team_b"
    with PostgresJournal.connect(postgres_url) as a, PostgresJournal.connect(other) as b:
        add(a, "run:a")
        add(b, "run:b")
        add(b, "run:c")
        assert [e.aggregate_id for e in a.events_after(0)] == ["run:a"]
        assert [e.aggregate_id for e in b.events_after(0)] == ["run:b", "run:c"]
        assert a.journal_id != b.journal_id and b.schema == "team_b"
        assert "schema=team_b" in b.location
    for bad in ("Team", "a-b", "x;drop", "1x"):
        with pytest.raises(InvalidInputError):
            PostgresJournal.connect(postgres_url, schema=bad)
        with pytest.raises(InvalidInputError):
            PostgresJournal.connect(postgres_url + "?schema=" + bad)


def test_a_newer_journal_is_refused_and_an_older_one_migrates_forward(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with PostgresJournal.connect(postgres_url) as j:
        add(j, "run:a")
        journal_id = j.journal_id
    current = journal_postgres.SCHEMA_VERSION
    monkeypatch.setattr(journal_postgres, "SCHEMA_VERSION", current + 1)
    monkeypatch.setitem(
        journal_postgres.MIGRATIONS, current + 1, "ALTER TABLE {s}.events ADD COLUMN note text"
    )
    with pytest.raises(NotAJournalError, match="migrate"):
        PostgresJournal.connect(postgres_url, read_only=True)
    with PostgresJournal.connect(postgres_url) as j:  # writable: migrated on open
        assert j.journal_id == journal_id and len(j.events_after(0)) == 1
    monkeypatch.setattr(journal_postgres, "SCHEMA_VERSION", current)
    with pytest.raises(NotAJournalError, match="newer"):
        PostgresJournal.connect(postgres_url)


def test_a_schema_1_journal_migrates_its_receipts_to_digests_and_still_replays(
    postgres_url: str,
) -> None:
    cmd = dict(command_id="c1", payload={"op": "s"}, expected={"run:a": None})
    with PostgresJournal.connect(postgres_url) as j:
        j.execute(**cmd, decide=create("run:a"))  # type: ignore[arg-type]
    as_pg_schema(postgres_url, 1)
    with psycopg.connect(postgres_url, autocommit=True) as conn:  # as schema 1 stored it
        conn.execute(
            "UPDATE refine.receipts SET payload = %s",
            ('{"expected":{"run:a":null},"payload":{"op":"s"}}',),
        )
    with PostgresJournal.connect(postgres_url) as j:
        again = j.execute(**cmd, decide=create("run:a"))  # type: ignore[arg-type]
        assert again.replayed and again.states["run:a"].state == {"status": "queued"}
        with pytest.raises(CommandConflictError):
            j.execute(**{**cmd, "payload": {"op": "t"}}, decide=create("run:a"))  # type: ignore[arg-type]
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        row = conn.execute("SELECT payload FROM refine.receipts").fetchone()
        assert row is not None and len(row[0]) == 32 and not row[0].startswith("{")


def test_a_schema_3_journal_migrates_to_the_outbox_view_and_the_goal_indexes(
    postgres_url: str,
) -> None:
    with PostgresJournal.connect(postgres_url) as j:
        goals = Goals(j)
        goals.create(goal_id="a", title="A", node_id="n1", argv=["true"])
        goals.create(goal_id="b", title="B", node_id="n2", argv=["true"])
        goals.start(goal_id="b", node_id="n2", worker="w", token="t")
        before = (j.outbox(), j.aggregates("goal", status="queued"), j.count("goal"))
    as_pg_schema(postgres_url, 3)  # the outbox a table of its own, the indexes over every kind
    with pytest.raises(NotAJournalError, match="migrate"):
        PostgresJournal.connect(postgres_url, read_only=True)
    with PostgresJournal.connect(postgres_url) as j:  # the writable open migrates, rows kept
        assert (j.outbox(), j.aggregates("goal", status="queued"), j.count("goal")) == before
        assert Goals(j).create(goal_id="a", title="A", node_id="n1", argv=["true"]).replayed
        Goals(j).create(goal_id="c", title="C", node_id="n1", argv=["true"])
        last = j.last_sequence()
        assert j.outbox()[-2:] == [
            (e.sequence, e.aggregate_id, e.type) for e in j.events_after(last - 2)
        ]
        assert check_journal(j).clean
    with psycopg.connect(postgres_url) as conn:
        kinds: dict[str, str] = dict(
            conn.execute(
                "SELECT c.relname, c.relkind FROM pg_class c JOIN pg_namespace n"
                " ON n.oid = c.relnamespace WHERE n.nspname = 'refine'"
            ).fetchall()
        )
    assert kinds["outbox"] == "v" and kinds["goals_active"] == "i"
    assert "aggregates_by_status" not in kinds and "aggregates_by_recency" not in kinds


@pytest.mark.parametrize("version", [3, 6])
def test_an_older_journal_migrates_to_notifying_each_nodes_channel(
    postgres_url: str, version: int
) -> None:
    """Schema 7: a writable open of a schema 6 (or 3) journal replaces write_command(), which
    then sends each commit to its node's channel too (a node listens there alone)."""
    with PostgresJournal.connect(postgres_url) as j:
        Goals(j).create(goal_id="a", title="A", node_id="n1", argv=["true"])
    as_pg_schema(postgres_url, version)
    with pytest.raises(NotAJournalError, match="open it writable once to migrate"):
        PostgresJournal.connect(postgres_url, read_only=True)
    with psycopg.connect(postgres_url, autocommit=True) as listener:
        listener.execute('LISTEN "refine_journal:n1"; LISTEN "refine_journal:*"')
        with PostgresJournal.connect(postgres_url) as j:  # migrated forward, rows kept
            assert Goals(j).create(goal_id="a", title="A", node_id="n1", argv=["true"]).replayed
            Goals(j).create(goal_id="b", title="B", node_id="n1", argv=["true"])
            last = j.last_sequence()
            assert check_journal(j).clean
        notes = [(n.channel, n.payload) for n in listener.notifies(timeout=10, stop_after=1)]
        versions = listener.execute("SELECT max(version) FROM refine.schema_version").fetchone()
    assert notes == [(node_channel("refine_journal", "n1"), f"{last} n1")]
    assert versions == (journal_postgres.SCHEMA_VERSION,) and journal_postgres.SCHEMA_VERSION >= 7
    with PostgresJournal.connect(postgres_url, read_only=True) as ro:
        assert ro.count("goal") == 2


def test_goal_lookups_read_the_partial_indexes(postgres_url: str) -> None:
    """The Goal look-ups can use the partial indexes (schema 4): with sequential scans off, each
    plan names the index (a query whose WHERE does not imply the index's could not use it)."""
    from store.journal.sqlite import ACTIVE_STATUSES

    with PostgresJournal.connect(postgres_url) as j:
        Goals(j).create(goal_id="a", title="A", node_id="n1", argv=["true"])
        statements: list[tuple[str, list[object]]] = []
        rows = j._rows

        def recording(sql: str, args: Sequence[object] = ()) -> list[tuple[object, ...]]:
            statements.append((sql.format(s=j.schema), list(args)))
            return rows(sql, args)

        j._rows = recording  # type: ignore[method-assign]
        j.aggregates("goal", status="queued", node_id="n1", limit=5)  # the node's scheduler
        j.aggregates("goal", status=list(ACTIVE_STATUSES), limit=1000)  # the first paint
        j.aggregates("goal", status=["completed", "failed"], newest_first=True, limit=200)
        j.aggregates("goal", newest_first=True, limit=2000, before=(9000, "goal:x"))  # the index
        j.count("goal")
    with psycopg.connect(postgres_url) as conn:
        conn.execute("SET enable_seqscan = off")
        plans = [
            " ".join(str(row[0]) for row in conn.execute("EXPLAIN " + sql, args))
            for sql, args in statements
        ]
    assert len(plans) == 5
    assert all("goals_active" in p for p in plans[:2]), plans
    assert all("goals_by_recency" in p for p in plans[2:]), plans


def test_a_viewer_role_with_only_select_reads_and_every_command_is_refused(
    postgres_server: PostgresServer, postgres_url: str
) -> None:
    with PostgresJournal.connect(postgres_url) as j:
        add(j, "run:a")
    dbname = postgres_url.rsplit("/", 1)[1]
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("DROP ROLE IF EXISTS refine_viewer")
        conn.execute("CREATE ROLE refine_viewer LOGIN PASSWORD 'view-pw'")
        # The README's GRANTs for a viewer, verbatim.
        conn.execute(f'GRANT CONNECT ON DATABASE "{dbname}" TO refine_viewer')
        conn.execute("GRANT USAGE ON SCHEMA refine TO refine_viewer")
        conn.execute("GRANT SELECT ON ALL TABLES IN SCHEMA refine TO refine_viewer")
    viewer = postgres_server.url(dbname, user="refine_viewer", password="view-pw")
    try:
        with PostgresJournal.connect(viewer, read_only=True) as ro:
            assert ro.load("run:a") is not None and ro.last_sequence() == 1
            with ro.snapshot():
                assert ro.count("run") == 1
            with pytest.raises(JournalReadOnlyError):  # even a replay
                add(ro, "run:a")
        # A writable open is refused: the role may not write (issue 21; a command on a handle
        # whose role lost the right is refused too: tests/test_postgres_schemas_and_roles.py).
        with pytest.raises(StorageError, match="not permitted"):
            PostgresJournal.connect(viewer)
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute("DROP OWNED BY refine_viewer")
            conn.execute("DROP ROLE refine_viewer")
    with PostgresJournal.connect(postgres_url) as j:
        assert j.last_sequence() == 1


def test_unreachable_servers_are_typed_and_the_password_never_shows(
    postgres_server: PostgresServer, postgres_url: str
) -> None:
    dbname = postgres_url.rsplit("/", 1)[1]
    wrong = postgres_server.url(dbname, user="postgres", password="wrong-" + PASSWORD)
    missing_db = postgres_server.url("no_such_database")
    closed_port = "postgresql://postgres:" + PASSWORD + "@127.0.0.1:1/x"
    for url in (wrong, missing_db, closed_port):
        with pytest.raises(StorageUnreachableError) as refused:
            PostgresJournal.connect(url, connect_timeout_s=3)
        assert refused.value.code == "STORAGE"
        assert PASSWORD not in str(refused.value) and "wrong-" not in str(refused.value)
    assert redact(wrong) == postgres_server.url(dbname, user="postgres")
    assert PASSWORD not in redact(postgres_url + "?password=" + PASSWORD)


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "refine_tui.cli", "--node", "n1", *args],
        capture_output=True, text=True, timeout=60, env={**os.environ, **(env or {})},
    )  # fmt: skip


def test_a_port_that_is_not_a_port_is_bad_input_not_an_unreachable_server(
    postgres_server: PostgresServer, postgres_url: str
) -> None:
    """Regression (issue 21.6): ``:notaport`` and ``:99999`` ended ``STORAGE`` (exit 3), libpq
    refusing them only when connecting, as if the server were down."""
    parts = urllib.parse.urlsplit(postgres_url)
    for port in ("notaport", "99999", "0", "-5432", "5432x"):
        url = postgres_url.replace(f":{parts.port}/", f":{port}/")
        for args in (("init",), ("goals",)):
            done = cli("--journal", url, *args)
            assert done.returncode == 2, (url, done.stderr)
            assert done.stderr.startswith("refine: INVALID_INPUT: not a usable journal URL: a port")
            assert PASSWORD not in done.stderr + done.stdout
    host_only = f"postgresql://{parts.hostname}/{parts.path.lstrip('/')}"
    done = cli("--journal", host_only, "init", env={"PGPORT": "notaport"})  # libpq's $PGPORT
    assert done.returncode == 2 and "a port must be a number" in done.stderr, done.stderr


def _lost_peer_settings(url: str) -> dict[str, str]:
    """What a journal's session and its socket have of the lost-peer settings, read back from
    the server (``SHOW``: the session's ``tcp_*``) and from libpq (the client's)."""
    with PostgresJournal.open(url, read_only=True) as journal:
        conn = journal._connection()
        shown = {
            name: str(conn.execute(f"SHOW tcp_{name.removeprefix('tcp_')}").fetchone()[0])
            for name in journal_postgres.LOST_PEER
        }
        client = {o.keyword.decode(): (o.val or b"").decode() for o in conn.pgconn.info}
    return {**{f"server {k}": v for k, v in shown.items()}, **{k: client[k] for k in shown}}


def test_a_journal_session_never_compiles_a_plan(postgres_url: str) -> None:
    """No JIT for our queries: each is a few index ranges, and a plan whose estimate passed
    jit_above_cost (a copy's tables before their statistics) paid 0.1–0.3 s to compile."""
    with PostgresJournal.open(postgres_url) as journal:
        assert journal._connection().execute("SHOW jit").fetchone() == ("off",)


def test_lost_peer_settings_default_on_both_ends_and_a_urls_own_values_win(
    postgres_url: str,
) -> None:
    """Both ends of every connection get the lost-peer settings (DESIGN §12): the defaults, or
    the values the URL gives for those libpq options (a whole number each), never anything
    else in the server's options."""
    PostgresJournal.open(postgres_url).close()  # the journal, made
    assert _lost_peer_settings(postgres_url) == {
        "server keepalives_idle": "15", "server keepalives_interval": "5",
        "server keepalives_count": "4", "server tcp_user_timeout": "15000",
        "keepalives_idle": "15", "keepalives_interval": "5", "keepalives_count": "4",
        "tcp_user_timeout": "15000",
    }  # fmt: skip
    own = f"{postgres_url}?keepalives_idle=3&keepalives_count=2&tcp_user_timeout=4000"
    assert _lost_peer_settings(own) == {
        "server keepalives_idle": "3", "server keepalives_interval": "5",
        "server keepalives_count": "2", "server tcp_user_timeout": "4000",
        "keepalives_idle": "3", "keepalives_interval": "5", "keepalives_count": "2",
        "tcp_user_timeout": "4000",
    }  # fmt: skip
    for bad in ("x", "-1", "1.5", "1 -c default_transaction_read_only=off", ""):
        query = urllib.parse.urlencode({"keepalives_idle": bad})
        with pytest.raises(InvalidInputError, match="keepalives_idle in a journal URL must be"):
            PostgresJournal.open(f"{postgres_url}?{query}")


def test_a_url_without_a_host_takes_the_server_from_libpqs_environment(
    postgres_url: str,
) -> None:
    """Regression (issue 21.7): ``postgresql:///DB`` with ``$PGHOST``, ``$PGPORT`` and ``$PGUSER``
    set works in psql; here it was ``INVALID_INPUT: … postgresql:/DB`` (the URL rebuilt without
    its empty host)."""
    parts = urllib.parse.urlsplit(postgres_url)
    dbname = parts.path.lstrip("/")
    env = {
        "PGHOST": parts.hostname or "", "PGPORT": str(parts.port),
        "PGUSER": urllib.parse.unquote(parts.username or ""),
        "PGPASSWORD": urllib.parse.unquote(parts.password or ""),
    }  # fmt: skip
    for url, schema in (
        (f"postgresql:///{dbname}", "refine"),
        (f"postgres:///{dbname}?schema=w1", "w1"),
    ):
        done = cli("--journal", url, "init", env=env)
        assert (done.returncode, done.stdout) == (0, f"journal ready: {url}\n"), done.stderr
        added = cli("--journal", url, "goal", "add", "--title", "t", "--", "true", env=env)
        assert added.returncode == 0, added.stderr
        with PostgresJournal.connect(postgres_url, schema=schema, create=False) as j:
            assert Goals(j).read("t") is not None  # in the database the environment names


async def test_wakeups_wake_the_consumer_when_the_first_connection_cannot_be_made() -> None:
    """Regression: a dashboard opened as the server went down was never woken (its listener
    retried without a word), so it said ``live`` for as long as the server stayed down."""
    import asyncio

    from store.journal.listen import ListenWakeUps

    wakeups = ListenWakeUps("postgresql://postgres@127.0.0.1:1/x")  # nothing listens there
    batches = wakeups.__aiter__()
    try:
        await asyncio.wait_for(batches.__anext__(), 10)  # at once: its own read says why
        assert wakeups.state == "reconnecting" and wakeups.connects == 0
    finally:
        wakeups.stop()


async def test_wakeups_connect_and_listen_while_the_consumers_loop_is_blocked(
    postgres_url: str,
) -> None:
    """Regression: the LISTEN connection ran on its consumer's event loop, so a loop busy in a
    synchronous journal call (a node's tick) left a connection attempt half-open, its startup
    packet unsent. During a server shutdown the child forked for that attempt waited for the
    packet (authentication_timeout, 60 s), and so did the shutdown: a restart stalled by a
    minute. The listener now connects and listens on a thread of its own."""
    import asyncio
    import time

    from store.journal.listen import ListenWakeUps

    def listeners() -> set[threading.Thread]:
        return {t for t in threading.enumerate() if t.name == "refine-listen"}

    def block_loop_until(condition: Callable[[], bool]) -> None:
        deadline = time.monotonic() + 30  # only a listener that needs the loop takes this long
        while not condition() and time.monotonic() < deadline:
            time.sleep(0.02)  # on the loop's thread: it runs nothing meanwhile

    before = listeners()
    wakeups = ListenWakeUps(postgres_url)
    first = asyncio.ensure_future(wakeups.__aiter__().__anext__())
    started: set[threading.Thread] = set()
    try:
        await asyncio.sleep(0)  # the iteration starts, then the loop is blocked
        block_loop_until(lambda: wakeups.connects > 0)
        assert wakeups.state == "live" and wakeups.connects == 1
        started = listeners() - before
        assert len(started) == 1
        with PostgresJournal.connect(postgres_url) as j:
            add(j, "run:a")
        block_loop_until(lambda: wakeups.last_notified > 0)
        assert wakeups.last_notified == 1
        await asyncio.wait_for(first, 10)  # the loop runs again: the consumer is woken
    finally:
        wakeups.stop()
    for thread in started:
        thread.join(10)  # stop() ends it promptly, closing its connection
        assert not thread.is_alive()


def test_events_after_n_never_skips_a_late_commit(postgres_url: str) -> None:
    """Concurrent writers (each its own connection) and a reader that must see every sequence,
    in order, with no gap that a slower transaction fills in later."""
    writers, per_writer = 4, 40
    errors: list[BaseException] = []
    done = threading.Event()
    seen: list[int] = []

    def write(n: int) -> None:
        try:
            with PostgresJournal.connect(postgres_url) as j:
                for i in range(per_writer):
                    agg = f"run:w{n}-{i}"
                    if i % 3 == 0:  # some commands touch two aggregates (two events)
                        j.execute(
                            command_id=f"c:{agg}",
                            payload={},
                            expected={agg: None, agg + "x": None},
                            decide=lambda loaded: [
                                Change(a, {"s": 1}, [("e", {})]) for a in sorted(loaded)
                            ],
                        )
                    else:
                        add(j, agg)
        except BaseException as exc:
            errors.append(exc)

    def read() -> None:
        try:
            with PostgresJournal.connect(postgres_url, read_only=True) as j:
                last = 0
                while not done.is_set() or j.last_sequence() > last:
                    for event in j.events_after(last):
                        assert event.sequence == last + 1, f"gap after {last}"
                        last = event.sequence
                        seen.append(last)
        except BaseException as exc:
            errors.append(exc)

    PostgresJournal.connect(postgres_url).close()
    reader = threading.Thread(target=read)
    reader.start()
    threads = [threading.Thread(target=write, args=(n,)) for n in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done.set()
    reader.join()
    assert not errors, errors
    total = writers * (per_writer + len(range(0, per_writer, 3)))
    assert seen == list(range(1, total + 1))


def test_concurrent_creates_of_one_aggregate_have_one_winner_and_replays(
    postgres_url: str,
) -> None:
    """Nothing to lock before a row exists: the loser's insert fails and its rerun sees the
    winner, exactly as if the two had been serialised (replay for the same command id)."""
    PostgresJournal.connect(postgres_url).close()
    results: list[object] = []

    def go(command_id: str) -> None:
        with PostgresJournal.connect(postgres_url) as j:
            try:
                out = j.execute(
                    command_id=command_id,
                    payload={"op": "create"},
                    expected={"run:z": None},
                    decide=create("run:z"),
                )
                results.append(out.replayed)
            except Exception as exc:
                results.append(type(exc).__name__)

    threads = [threading.Thread(target=go, args=("same",)) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(map(str, results)) == ["False"] + ["True"] * 5
    with PostgresJournal.connect(postgres_url) as j:
        assert j.last_sequence() == 1


def test_a_locked_row_is_journal_locked_and_the_same_handle_then_commits(
    postgres_url: str,
) -> None:
    """A command's statements go in one pipeline: an error in it (here the lock timeout) must
    still end the transaction, leaving the connection clean for the next command."""
    with PostgresJournal.connect(postgres_url, busy_timeout_ms=100) as j:
        add(j, "run:a")
        with psycopg.connect(postgres_url) as blocker:
            blocker.execute(
                "SELECT 1 FROM refine.aggregates WHERE aggregate_id = 'run:a' FOR UPDATE"
            )
            with pytest.raises(JournalLockedError):
                j.execute(command_id="b1", payload={}, expected={"run:a": 1}, decide=bump)
        assert j.last_sequence() == 1
        out = j.execute(command_id="b1", payload={}, expected={"run:a": 1}, decide=bump)
        assert not out.replayed and out.events[0].sequence == 2 and j.last_sequence() == 2


def test_a_write_that_fails_in_the_batch_writes_nothing_and_the_rerun_sees_why(
    postgres_url: str,
) -> None:
    """Another writer takes the command id while this one decides: the receipt insert fails
    in the batched writes, none of the batch commits, and the rerun refuses as a conflict."""
    with PostgresJournal.connect(postgres_url) as j:
        add(j, "run:a")

        def racing(loaded):
            with psycopg.connect(postgres_url, autocommit=True) as other:
                other.execute(
                    "INSERT INTO refine.receipts (command_id, payload, result, committed_at)"
                    " VALUES ('b1', 'other', '{}', 0) ON CONFLICT DO NOTHING"
                )
            return bump(loaded)

        with pytest.raises(CommandConflictError):
            j.execute(command_id="b1", payload={}, expected={"run:a": 1}, decide=racing)
        assert j.last_sequence() == 1 and len(j.outbox()) == 1
        assert j.load("run:a").version == 1  # type: ignore[union-attr]
        add(j, "run:b")
        assert j.last_sequence() == 2
