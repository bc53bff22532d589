"""Schema names and roles on PostgreSQL (issue 21, items 4, 5, 8, 9), through the CLI where it
fits: a long schema name still fits its NOTIFY channel, a reserved word is a schema name like any
other, a schema holding another application's objects of any kind is never adopted, and a role
that may only read is refused before it writes rather than retried for an hour. A real server."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.sql import SQL, Identifier

import store.node.worker as worker
from store.errors import JournalNotPermittedError, NotAJournalError
from store.journal.api import Journal
from store.journal.listen import ListenWakeUps
from store.journal.postgres import PostgresJournal, channel_for, node_channel
from store.model.execution import Execution
from store.model.goals import Goals
from store.names import MAX_NAME
from tests.helpers.postgres_server import PASSWORD, PostgresServer
from tests.helpers.run_support import PINS, budget
from tests.helpers.waits import wait_until

PY = sys.executable
pytestmark = pytest.mark.postgres


def refine(url: str, *args: str, state: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``refine ARGS`` on the journal at ``url`` (by environment: it holds a password)."""
    env = {**os.environ, "REFINE_JOURNAL": url}
    env.pop("REFINE_STATE_DIR", None)
    extra = ["--state-dir", str(state)] if state is not None else []
    return subprocess.run(
        [PY, "-m", "refine_tui.cli", "--node", "n1", *extra, *args],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def one_line_refusal(done: subprocess.CompletedProcess[str], code: int, prefix: str) -> str:
    assert done.returncode == code, (done.stdout, done.stderr)
    assert done.stderr.startswith(f"refine: {prefix}: "), done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert PASSWORD not in done.stdout + done.stderr
    return done.stderr


def objects_in(url: str, schema: str) -> int:
    """Relations and functions in ``schema`` (what an init would have created)."""
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM pg_class c WHERE c.relnamespace = n.oid)"
            " + (SELECT count(*) FROM pg_proc p WHERE p.pronamespace = n.oid)"
            " FROM pg_namespace n WHERE n.nspname = %s",
            (schema,),
        ).fetchone()
    return 0 if row is None else int(row[0])


# --- item 4: a long schema name ----------------------------------------------------------------


@pytest.mark.parametrize("length", [49, 63])
async def test_a_schema_name_up_to_63_bytes_takes_commands_and_wakes_listeners(
    postgres_url: str, length: int
) -> None:
    """``refine_journal_<schema>`` passed PostgreSQL's 63-byte limit from 49 characters on:
    init said "journal ready", then every command failed (``channel name too long``)."""
    schema = ("s" * 40 + "_long_name_" + "x" * 20)[:length]
    url = f"{postgres_url}?schema={schema}"
    assert refine(url, "init").returncode == 0
    wakeups = ListenWakeUps(url)  # as a node or a dashboard listens
    first = asyncio.ensure_future(wakeups.__aiter__().__anext__())
    try:
        await asyncio.wait_for(first, 30)  # woken once LISTEN is in place
        assert wakeups.state == "live"
        added = await asyncio.to_thread(
            refine, url, "goal", "add", "--id", "g1", "--title", "G", "--", "true"
        )
        assert added.returncode == 0, added.stderr
        with PostgresJournal.connect(url, read_only=True) as journal:
            last = journal.last_sequence()
        for _ in range(300):  # a bound, not a timing: the notification comes within moments
            if wakeups.last_notified == last:
                break
            await asyncio.sleep(0.1)
        assert wakeups.last_notified == last > 0  # the listener was told of the commit
    finally:
        wakeups.stop()
    assert "g1" in refine(url, "goals").stdout
    assert len(channel_for(schema).encode()) <= 63


@pytest.mark.parametrize("schema", ["refine", "s" * 49, "s" * 63])
def test_the_server_sends_a_commit_to_the_channel_a_node_listens_to_for_any_name(
    postgres_url: str, schema: str
) -> None:
    """``write_command`` (schema 7) names a node's channel in SQL as ``node_channel`` does in
    Python for the node's listener, the digest of a name past 63 bytes included: each node is
    sent its own commits, and a commit that names no node goes to the all-nodes channel."""
    channel, long_node = channel_for(schema), "n" * MAX_NAME
    ours = [
        node_channel(channel, long_node),
        node_channel(channel, "a"),
        node_channel(channel, None),
    ]
    with (
        PostgresJournal.connect(f"{postgres_url}?schema={schema}") as journal,
        psycopg.connect(postgres_url, autocommit=True) as listener,
    ):
        for name in ours:
            listener.execute(SQL("LISTEN {}").format(Identifier(name)))
        goals, sent = Goals(journal), []
        for goal_id, node in [("g1", long_node), ("g2", "a"), ("g3", "b")]:  # b: not listened to
            goals.create(goal_id=goal_id, title="G", node_id=node, argv=["true"])
            sent.append(journal.last_sequence())
        Execution(journal).submit(command_id="solo", run_id="solo", pins=PINS, budget=budget())
        last = journal.last_sequence()
        got = [(n.channel, n.payload) for n in listener.notifies(timeout=10, stop_after=3)]
    assert got == [
        (ours[0], f"{sent[0]} {long_node}"),
        (ours[1], f"{sent[1]} a"),
        (ours[2], f"{last}"),  # a Run alone names no node: every node's
    ]


def test_long_schema_names_that_share_a_prefix_get_their_own_channels() -> None:
    a, b = "p" * 60 + "_aa", "p" * 60 + "_bb"
    assert channel_for(a) != channel_for(b)
    assert all(len(channel_for(s).encode()) <= 63 for s in (a, b))
    assert channel_for("refine") == "refine_journal"  # the README's LISTEN name stays
    assert channel_for("team_b") == "refine_journal_team_b"  # short names keep theirs


def test_a_schema_name_over_63_bytes_is_bad_input_and_creates_nothing(postgres_url: str) -> None:
    schema = "s" * 64
    done = refine(f"{postgres_url}?schema={schema}", "init")
    assert "schema" in one_line_refusal(done, 2, "INVALID_INPUT")
    with psycopg.connect(postgres_url) as conn:
        found = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname LIKE 'sss%'").fetchone()
    assert found is None


# --- item 5: reserved words as schema names ----------------------------------------------------


@pytest.mark.parametrize("schema", ["select", "user", "order"])
def test_a_reserved_word_is_a_schema_name_like_any_other(
    postgres_url: str, schema: str, tmp_path: Path
) -> None:
    url = f"{postgres_url}?schema={schema}"
    init = refine(url, "init")
    assert init.returncode == 0 and "journal ready" in init.stdout, init.stderr
    added = refine(url, "goal", "add", "--id", "g1", "--title", "G", "--", "true")
    assert added.returncode == 0, added.stderr
    assert "g1" in refine(url, "goals").stdout
    assert refine(url, "check").returncode == 0
    # Copied out (export) and back in under another reserved word (import).
    out = tmp_path / "copy.db"
    assert refine(url, "copy", url, str(out)).returncode == 0
    back = f"{postgres_url}?schema=table"
    copied = refine(back, "copy", str(out), back)
    assert copied.returncode == 0, copied.stderr
    assert "g1" in refine(back, "goals").stdout
    with PostgresJournal.connect(url) as journal:
        assert journal.schema == schema and journal.last_sequence() >= 1


def test_a_node_runs_a_goal_in_a_schema_named_by_a_reserved_word(
    postgres_url: str, tmp_path: Path
) -> None:
    """The whole path: the node's LISTEN, the worker's claim and report, by ``?schema=user``."""
    url = f"{postgres_url}?schema=user"
    assert refine(url, "init").returncode == 0
    added = refine(url, "goal", "add", "--id", "g1", "--title", "G", "--", "true")
    assert added.returncode == 0, added.stderr
    env = {**os.environ, "REFINE_JOURNAL": url}
    env.pop("REFINE_STATE_DIR", None)
    log = open(tmp_path / "node.out", "wb")  # noqa: SIM115
    node = subprocess.Popen(
        [PY, "-m", "refine_tui.cli", "--node", "n1", "--state-dir", str(tmp_path / "state"),
         "node"],
        env=env, stdout=log, stderr=log, start_new_session=True,
    )  # fmt: skip
    log.close()
    try:
        wait_until(lambda: goal_status(url) == "completed", 60, "the goal completed")
    finally:
        os.killpg(node.pid, signal.SIGTERM)
        node.wait(timeout=30)
    assert PASSWORD not in (tmp_path / "node.out").read_text(errors="replace")


# --- item 8: a schema holding another application's objects ------------------------------------

FOREIGN_OBJECTS = {
    "function": "CREATE FUNCTION refine.answer() RETURNS int LANGUAGE sql AS 'SELECT 42'",
    "enum type": "CREATE TYPE refine.mood AS ENUM ('calm')",
    "domain": "CREATE DOMAIN refine.positive AS integer CHECK (VALUE > 0)",
    "operator": "CREATE OPERATOR refine.=== (LEFTARG = integer, RIGHTARG = integer,"
    " FUNCTION = int4eq)",
    "collation": 'CREATE COLLATION refine.bytes FROM "C"',
    "conversion": "CREATE CONVERSION refine.latin FOR 'LATIN1' TO 'UTF8' FROM iso8859_1_to_utf8",
    "text search configuration": "CREATE TEXT SEARCH CONFIGURATION refine.plain (COPY = simple)",
    "operator family": "CREATE OPERATOR FAMILY refine.fam USING btree",
    "sequence": "CREATE SEQUENCE refine.counter",
    "extension": "CREATE EXTENSION citext SCHEMA refine",  # contrib: Debian's postgresql has it
}


@pytest.mark.parametrize("kind", list(FOREIGN_OBJECTS))
def test_init_never_adopts_a_schema_holding_another_applications_objects(
    postgres_url: str, kind: str
) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA refine")
        conn.execute(FOREIGN_OBJECTS[kind])
    before = objects_in(postgres_url, "refine")
    done = refine(postgres_url, "init")
    assert "not a refine journal" in one_line_refusal(done, 3, "STORAGE")
    assert "journal ready" not in done.stdout
    for create in (True, False):
        with pytest.raises(NotAJournalError, match="other data"):
            PostgresJournal.connect(postgres_url, create=create)
    assert objects_in(postgres_url, "refine") == before  # nothing was created there


# --- item 9: a role that may only read ---------------------------------------------------------


@pytest.fixture
def viewer(postgres_server: PostgresServer, postgres_url: str) -> Iterator[str]:
    """A journal with one queued goal for node n1, and the URL of a viewer role made with the
    README's GRANTs (SELECT only)."""
    with Journal.open(postgres_url) as journal:
        Goals(journal).create(goal_id="g1", title="G", node_id="n1", argv=["true"])
    dbname = postgres_url.rsplit("/", 1)[1]
    role = f"viewer_{dbname}"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'view-pw'")
        conn.execute(f'GRANT CONNECT ON DATABASE "{dbname}" TO {role}')
        conn.execute(f"GRANT USAGE ON SCHEMA refine TO {role}")
        conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA refine TO {role}")
    try:
        yield postgres_server.url(dbname, user=role, password="view-pw")
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(f"DROP OWNED BY {role}")  # its grants, here and on the database
        with postgres_server.admin() as conn:
            conn.execute(f"DROP ROLE {role}")


def goal_status(url: str, goal_id: str = "g1") -> str:
    with Journal.open(url, read_only=True, create=False) as journal:
        goal = Goals(journal).read(goal_id)
    assert goal is not None
    return goal.status


def test_init_by_a_viewer_says_the_journal_exists_but_it_cannot_write(viewer: str) -> None:
    done = refine(viewer, "init")
    line = one_line_refusal(done, 3, "STORAGE")
    assert "journal ready" not in done.stdout
    assert "exists" in line and "may not write" in line and "permission denied" in line
    assert refine(viewer, "goals").returncode == 0  # reading stays allowed


def test_a_node_refuses_to_start_with_a_role_that_may_not_write(
    viewer: str, postgres_url: str, tmp_path: Path
) -> None:
    """It ran, and its workers retried "permission denied" for an hour after it exited."""
    done = refine(viewer, "node", state=tmp_path / "state")
    assert "may not write" in one_line_refusal(done, 3, "STORAGE")
    assert goal_status(postgres_url) == "queued"
    assert not list((tmp_path / "state").rglob("*.json"))  # no worker was recorded


def test_a_worker_with_a_role_that_may_not_write_gives_up_at_once(
    viewer: str, postgres_url: str
) -> None:
    """As the node launches it; it used to wait for the journal (REPORT_PATIENCE_S: an hour)."""
    env = {**os.environ, "REFINE_JOURNAL": viewer}
    done = subprocess.run(
        [PY, "-m", "store.node.worker", "--node", "n1", "--goal", "g1", "--token", "t1"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == worker.EXIT_UNAVAILABLE, done.stderr
    assert done.stderr.count("\n") == 1 and "may not write" in done.stderr, done.stderr
    assert PASSWORD not in done.stderr
    assert goal_status(postgres_url) == "queued"


def test_a_claim_refused_for_permission_is_not_retried(
    viewer: str,
    postgres_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """A role whose write permission went away after the journal was opened: the claim gives up
    with one line, it does not wait for the journal (an hour; a few seconds here). The claim runs
    in a forked helper: its line is read from the file descriptors."""
    monkeypatch.setattr(worker, "REPORT_PATIENCE_S", 3.0)
    # The claim helper opens the journal by its location, which never carries the password:
    # the password comes as libpq's conventions say (here $PGPASSWORD).
    monkeypatch.setenv("PGPASSWORD", viewer.split("//", 1)[1].split("@", 1)[0].split(":", 1)[1])
    role = viewer.split("//", 1)[1].split(":", 1)[0]
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"GRANT INSERT, UPDATE ON ALL TABLES IN SCHEMA refine TO {role}")
    with Journal.open(viewer, create=False) as journal:
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(f"REVOKE INSERT, UPDATE ON ALL TABLES IN SCHEMA refine FROM {role}")
        capfd.readouterr()
        code = worker.run_worker(journal, node_id="n1", goal_id="g1", token="t1")
    err = capfd.readouterr().err
    assert code == worker.EXIT_UNAVAILABLE
    assert err.count("\n") == 1 and "waits for the journal" not in err, err
    assert "permission denied" in err
    assert goal_status(postgres_url) == "queued"


def test_a_writable_open_by_a_viewer_is_refused_in_type(viewer: str) -> None:
    with pytest.raises(JournalNotPermittedError, match="may not write"):
        PostgresJournal.connect(viewer, create=False)
    with PostgresJournal.connect(viewer, read_only=True) as journal:
        assert journal.last_sequence() >= 1
        # A follower's reads are statements the viewer's session prepares (as a command's).
        records = journal.event_records(0)
        assert records and records[-1][0] == journal.last_sequence()
        goal = records[0][1]
        assert list(journal.load_many([goal, "goal:none"])) == [goal]
