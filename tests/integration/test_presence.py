"""Node presence in the journal (DESIGN §14): beats beside the command journal, never in it.

The contract part runs on every backend (tests/conftest.py): a beat, a restart, a clean exit,
the states the database's clock gives them, and that a beat adds no event, no sequence and no
wake-up. Then what is particular: PostgreSQL sends no NOTIFY for a beat and a viewer role reads
presence; an older SQLite journal read as it is has none; the listing of nodes and attempts.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import psycopg
import pytest

from store.errors import (
    InvalidInputError,
    JournalLockedError,
    JournalNotPermittedError,
    JournalReadOnlyError,
)
from store.goals import Goals
from store.journal.api import Journal
from store.journal.postgres import PostgresJournal, channel_for
from store.journal.presence import (
    DEFAULT_HEARTBEAT_S,
    HEARTBEAT_ENV,
    MISSED_BEATS,
    Beat,
    Presence,
    heartbeat_interval,
    iso_utc,
)
from store.ops.nodes import active_attempts, list_nodes, node_view
from tests.conftest import JournalFactory
from tests.helpers.cli import refine
from tests.helpers.old_schema import as_pg_schema, as_schema_3
from tests.helpers.postgres_server import PostgresServer
from tests.helpers.waits import wait_until


def beat(node_id: str = "n1", kind: str = "beat", interval_s: float = 5.0) -> Beat:
    return Beat(node_id, kind, "host-1", 4, "0.1.0", interval_s)  # type: ignore[arg-type]


def row(journal: Journal, node_id: str = "n1") -> Presence:
    _, rows = journal.presence()
    found = {r.node_id: r for r in rows}
    return found[node_id]


# --- the contract, on every backend ----------------------------------------------------------


def test_start_beat_and_clean_exit_are_one_row_per_node_stamped_by_the_database(
    journal: Journal,
) -> None:
    assert journal.presence()[1] == []
    journal.write_presence(beat("n1", "start"))
    journal.write_presence(beat("n2", "start"))
    started = row(journal)
    assert (started.host, started.capacity, started.version) == ("host-1", 4, "0.1.0")
    assert started.stopped_at is None and started.last_seen == started.started_at
    now, rows = journal.presence()
    assert [r.node_id for r in rows] == ["n1", "n2"]
    assert started.state(now) == "live"
    wait_until(lambda: journal.presence()[0] > started.last_seen, what="the database clock")
    journal.write_presence(beat("n1"))
    beaten = row(journal)
    assert beaten.last_seen > started.last_seen and beaten.started_at == started.started_at
    journal.write_presence(beat("n1", "stop"))
    stopped = row(journal)
    assert stopped.stopped_at == stopped.last_seen and stopped.state(now) == "stopped"
    journal.write_presence(beat("n1", "start"))  # the node runs again
    again = row(journal)
    assert again.stopped_at is None and again.started_at > started.started_at
    assert row(journal, "n2") == journal.presence()[1][1]  # the other node untouched


def test_a_node_is_silent_after_three_of_its_own_intervals_by_the_database_clock(
    journal: Journal,
) -> None:
    journal.write_presence(beat("fast", "start", interval_s=0.05))
    journal.write_presence(beat("slow", "start", interval_s=3600))
    fast = row(journal, "fast")
    wait_until(
        lambda: journal.presence()[0] - fast.last_seen > MISSED_BEATS * 0.05,
        what="three missed beats",
    )
    now, _ = journal.presence()
    assert row(journal, "fast").state(now) == "silent"
    assert row(journal, "slow").state(now) == "live"
    journal.write_presence(beat("fast", interval_s=0.05))  # a beat brings it back
    assert row(journal, "fast").state(journal.presence()[0]) == "live"


def test_a_beat_adds_no_event_no_sequence_and_wakes_no_change_source(
    journal_factory: JournalFactory,
) -> None:
    node, reader = journal_factory(), journal_factory(read_only=True)
    Goals(node).create(goal_id="g", title="G", node_id="n1", argv=["true"])
    changes = reader.changes()
    assert changes.changed()
    before = (reader.last_sequence(), reader.events_after(0), reader.aggregates("goal"))
    for kind in ("start", "beat", "beat", "stop"):
        node.write_presence(beat(kind=kind))  # type: ignore[arg-type]
        assert not changes.changed(), kind  # a worker, a node, a dashboard: nobody rereads
    assert (reader.last_sequence(), reader.events_after(0), reader.aggregates("goal")) == before
    assert row(reader).stopped_at is not None  # the reader sees the row itself
    Goals(node).create(goal_id="h", title="H", node_id="n1", argv=["true"])
    assert changes.changed()  # a command still does


def test_a_read_only_journal_reads_presence_and_refuses_to_beat(
    journal_factory: JournalFactory,
) -> None:
    journal_factory().write_presence(beat(kind="start"))
    viewer = journal_factory(read_only=True)
    assert row(viewer).node_id == "n1"
    with pytest.raises(JournalReadOnlyError):
        viewer.write_presence(beat())


def test_nodes_are_those_with_goals_or_beats_with_the_attempts_running_there(
    journal: Journal,
) -> None:
    goals = Goals(journal)
    for goal_id, node in (("a1", "a"), ("a2", "a"), ("b1", "b"), ("c1", "c")):
        goals.create(goal_id=goal_id, title=goal_id, node_id=node, argv=["true"])
    goals.start(goal_id="a1", node_id="a", worker="a/t1", token="t1")
    goals.start(goal_id="a2", node_id="a", worker="a/t2", token="t2")
    goals.start(goal_id="b1", node_id="b", worker="b/t3", token="t3")
    # A cancelled goal whose attempt has not ended yet still runs there.
    goals.cancel(goal_id="a2", reason="no longer needed", command_id="op:cancel:1", by="op")
    journal.write_presence(beat("a", "start"))
    journal.write_presence(beat("d", "start"))  # beats, has no goals
    journal.write_presence(beat("b", "stop"))
    nodes = {n.node_id: n for n in list_nodes(journal)}
    assert sorted(nodes) == ["a", "b", "c", "d"]
    assert {n: (v.state, v.running) for n, v in nodes.items()} == {
        "a": ("live", 2),
        "b": ("stopped", 1),
        "c": ("unknown", 0),  # has goals, never beat
        "d": ("live", 0),
    }
    a = nodes["a"].to_json()
    assert a["last_seen"] == iso_utc(row(journal, "a").last_seen)
    assert str(a["last_seen"]).endswith("Z") and (a["capacity"], a["host"]) == (4, "host-1")
    assert nodes["c"].to_json()["last_seen"] is None
    assert [x.goal.goal_id for x in active_attempts(journal, "a")] == ["a1", "a2"]
    assert node_view(journal, "zz") is None
    assert node_view(journal, "c") == nodes["c"]


def test_a_beat_no_node_would_write_is_refused(journal: Journal) -> None:
    good = beat()
    for bad in (
        Beat("bad id!", "beat", "h", 4, "v", 5.0),
        Beat("n1", "sleep", "h", 4, "v", 5.0),  # type: ignore[arg-type]
        Beat("n1", "beat", "h", 0, "v", 5.0),
        Beat("n1", "beat", "h", 4, "v", 0.0),
        Beat("n1", "beat", "", 4, "v", 5.0),
        Beat("n1", "beat", "h", 4, "v" * 256, 5.0),
    ):
        with pytest.raises(InvalidInputError):
            journal.write_presence(bad)
    assert journal.presence()[1] == []
    journal.write_presence(good)


def test_refine_nodes_shows_a_hosts_control_characters_as_escapes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "journal.db"
    with Journal.open(path) as j:
        j.write_presence(Beat("n1", "start", "evil\x1b[31mhost\u202e", 4, "0.1.0\x07", 5.0))
    code, out, _ = refine(capsys, path, "nodes")
    assert code == 0 and "\x1b" not in out and "\x07" not in out and "\u202e" not in out
    assert "evil\\x1b[31mhost" in out and "0.1.0\\x07" in out
    code, out, _ = refine(capsys, path, "nodes", "--json")
    assert json.loads(out)[0]["host"] == "evil\x1b[31mhost\u202e"  # --json is exact


def test_refine_nodes_state_lists_only_the_nodes_in_those_states(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--state silent,stopped`: what an operator of a fleet looks for; a state that is not
    one is refused as usage (exit 2, one line), nothing read."""
    path = tmp_path / "journal.db"
    with Journal.open(path) as j:
        j.write_presence(beat("up", "start"))
        j.write_presence(beat("gone", "start", interval_s=0.05))
        j.write_presence(beat("off", "stop"))
    wait_until(lambda: list_nodes_states(path)["gone"] == "silent")
    code, out, _ = refine(capsys, path, "nodes", "--state", "silent,stopped", "--json")
    assert code == 0 and sorted(n["node_id"] for n in json.loads(out)) == ["gone", "off"]
    code, out, _ = refine(capsys, path, "nodes", "--state", "live")
    assert code == 0 and [line.split()[0] for line in out.splitlines()] == ["NODE", "up"]
    for bad in ("dead", "", "live,"):
        code, out, err = refine(capsys, path, "nodes", "--state", bad)
        assert (code, out) == (2, "") and len(err.strip().splitlines()) == 1
        assert "give states among live, silent, stopped, unknown" in err


def list_nodes_states(path: Path) -> dict[str, str]:
    with Journal.open(path) as j:
        return {n.node_id: n.state for n in list_nodes(j)}


def test_the_heartbeat_interval_comes_from_the_flag_else_the_environment_else_5_s(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(HEARTBEAT_ENV, raising=False)
    assert heartbeat_interval() == DEFAULT_HEARTBEAT_S == 5.0
    monkeypatch.setenv(HEARTBEAT_ENV, "0.5")
    assert heartbeat_interval() == 0.5 and heartbeat_interval(2) == 2.0
    for bad in ("0", "-1", "abc", "1e9", "nan"):
        monkeypatch.setenv(HEARTBEAT_ENV, bad)
        with pytest.raises(InvalidInputError):
            heartbeat_interval()


# --- PostgreSQL --------------------------------------------------------------------------------


@pytest.mark.postgres
def test_a_beat_sends_no_notify_on_the_journal_channel(postgres_url: str) -> None:
    with (
        PostgresJournal.connect(postgres_url) as node,
        psycopg.connect(postgres_url, autocommit=True) as listener,
    ):
        listener.execute(f"LISTEN {channel_for(node.schema)}")
        for kind in ("start", "beat", "stop"):
            node.write_presence(beat(kind=kind))  # type: ignore[arg-type]
        assert list(listener.notifies(timeout=0.5)) == []
        Goals(node).create(goal_id="g", title="G", node_id="n1", argv=["true"])
        assert len(list(listener.notifies(timeout=5, stop_after=1))) == 1


@pytest.mark.postgres
def test_a_viewer_role_with_only_select_reads_presence(
    postgres_server: PostgresServer, postgres_url: str
) -> None:
    with PostgresJournal.connect(postgres_url) as j:
        j.write_presence(beat(kind="start"))
    dbname = postgres_url.rsplit("/", 1)[1]
    role = "refine_presence_viewer"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"DROP ROLE IF EXISTS {role}")
        conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'view-pw'")
        # The README's GRANTs for a viewer.
        conn.execute(f'GRANT CONNECT ON DATABASE "{dbname}" TO {role}')
        conn.execute(f"GRANT USAGE ON SCHEMA refine TO {role}")
        conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA refine TO {role}")
    viewer = postgres_server.url(dbname, user=role, password="view-pw")
    try:
        with PostgresJournal.connect(viewer, read_only=True) as ro:
            assert row(ro).node_id == "n1"
            assert [n.state for n in list_nodes(ro)] == ["live"]
        with pytest.raises(JournalNotPermittedError):  # the role may not write: not even opened
            PostgresJournal.connect(viewer)
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(f"DROP OWNED BY {role}")
            conn.execute(f"DROP ROLE {role}")


@pytest.mark.postgres
def test_a_viewer_granted_before_an_upgrade_reads_presence_by_the_default_privileges(
    postgres_server: PostgresServer, postgres_url: str
) -> None:
    """The README's viewer set-up, default privileges included, made on an older journal: the
    upgrade that adds node_presence leaves it readable to the viewer."""
    with PostgresJournal.connect(postgres_url) as j:
        Goals(j).create(goal_id="g", title="G", node_id="n1", argv=["true"])
    as_pg_schema(postgres_url, 3)  # before presence
    dbname = postgres_url.rsplit("/", 1)[1]
    role = "refine_presence_viewer"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"DROP ROLE IF EXISTS {role}")
        conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'view-pw'")
        conn.execute(f'GRANT CONNECT ON DATABASE "{dbname}" TO {role}')
        conn.execute(f"GRANT USAGE ON SCHEMA refine TO {role}")
        conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA refine TO {role}")
        conn.execute(
            "ALTER DEFAULT PRIVILEGES FOR ROLE current_user IN SCHEMA refine"
            f" GRANT SELECT ON TABLES TO {role}"
        )
    viewer = postgres_server.url(dbname, user=role, password="view-pw")
    try:
        with PostgresJournal.connect(postgres_url) as j:  # the upgrade (schema 5)
            j.write_presence(beat(kind="start"))
        with PostgresJournal.connect(viewer, read_only=True) as ro:
            assert [(n.node_id, n.state) for n in list_nodes(ro)] == [("n1", "live")]
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(f"DROP OWNED BY {role}")
            conn.execute(f"DROP ROLE {role}")


# --- SQLite ------------------------------------------------------------------------------------


def test_an_older_sqlite_journal_read_as_it_is_has_no_presence_and_migrates_to_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "j.db"
    with Journal.open(path) as j:
        Goals(j).create(goal_id="g", title="G", node_id="n1", argv=["true"])
    as_schema_3(path)
    with Journal.open(path, read_only=True) as old:
        now, rows = old.presence()
        assert rows == [] and now > 0
        assert [(n.node_id, n.state) for n in list_nodes(old)] == [("n1", "unknown")]
    with Journal.open(path) as j:  # the first writable open migrates
        j.write_presence(beat(kind="start"))
        assert row(j).state(j.presence()[0]) == "live"
    tables = sqlite3.connect(path).execute("SELECT name FROM sqlite_master WHERE type='table'")
    assert "node_presence" in {name for (name,) in tables}


def test_a_beat_waits_for_a_long_writer_at_most_its_interval_then_says_locked(
    tmp_path: Path,
) -> None:
    """A node's loop must not stall for the whole busy timeout behind another writer: the beat
    gives up (typed, the next one tries again), and commands still wait as long as before."""
    path = tmp_path / "j.db"
    with Journal.open(path, busy_timeout_ms=600_000) as node:  # commands wait 10 minutes
        holder = sqlite3.connect(path, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")  # a long writer holds the journal
        try:
            with pytest.raises(JournalLockedError):
                node.write_presence(beat(kind="start", interval_s=0.2))
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        node.write_presence(beat(kind="start", interval_s=0.2))
        assert row(node).interval_s == 0.2
