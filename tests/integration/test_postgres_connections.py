"""Journal connections on PostgreSQL (issue 22 item 1, DESIGN §14): a server at its limit, and
workers that hold no connection while they wait, seeing a cancellation and reporting their end
after their node was SIGKILLed. Real server, real node, workers, recipes and signals."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from store.errors import NotAJournalError, ServerFullError
from store.journal.api import Journal
from store.journal.slots import KEPT, SLOTS_ENV, ConnectionSlots, Sharing, share, sharing
from store.model.goals import Goals
from store.ops import goal_wait
from store.ops.goal_wait import wait_for_status
from tests.conftest import own_server
from tests.helpers.node_env import HANG, WAIT_FOR_GO
from tests.helpers.pg_env import PgEnv
from tests.helpers.postgres_server import PostgresServer
from tests.helpers.waits import wait_until
from tests.integration.test_cli_wait import listening
from tests.integration.test_postgres_operation import PRINT_ENV

pytestmark = pytest.mark.postgres
SMALL = 8  # the small server's max_connections


@pytest.fixture(scope="module")
def small_server() -> Iterator[PostgresServer]:
    """A server of its own with room for only a few connections."""
    with own_server(max_connections=SMALL) as server:
        yield server


@pytest.fixture
def small(small_server: PostgresServer, tmp_path: Path) -> Iterator[PgEnv]:
    url = small_server.create_database()
    env = PgEnv(url, tmp_path)
    try:
        yield env
    finally:
        env.cleanup()
        small_server.drop_database(url)


@contextlib.contextmanager
def server_full(url: str) -> Iterator[list[psycopg.Connection]]:
    """Every connection the server has left, held by us (others are refused meanwhile).

    A client that just went (the ``refine init`` before) can leave its backend exiting for a
    moment, counted and then gone: the slot it frees is taken too, until a second passes in
    which the server had none left."""
    held: list[psycopg.Connection] = []
    try:
        settled = time.monotonic() + 1.0
        while time.monotonic() < settled:
            try:
                held.append(psycopg.connect(url, autocommit=True, connect_timeout=10))
                settled = time.monotonic() + 1.0
            except psycopg.OperationalError as exc:
                assert "too many clients" in str(exc)
                time.sleep(0.05)
        yield held
    finally:
        for conn in held:
            conn.close()


def test_commands_fail_typed_when_the_server_is_full_and_write_nothing(small: PgEnv) -> None:
    with server_full(small.url):
        with pytest.raises(ServerFullError, match=r"connection limit.*too many clients"):
            Journal.open(small.url, create=False)
        for args in (
            ("goals",),
            ("goals", "--json"),
            ("goal", "add", "--title", "t", "--id", "g1", "--", "true"),
            ("cancel", "g1", "--reason", "r"),
        ):
            small.refine(*args, code=3)
            out, err = small.outputs[-2:]
            if "--json" in args:  # a refusal is also a JSON object on stdout
                assert json.loads(out)["error"]["code"] == "STORAGE"
            else:
                assert out == ""
            assert err.count("\n") == 1, err  # one line, never a traceback
            assert err.startswith("refine: STORAGE: journal server is at its connection limit")
            assert "too many clients already" in err
    assert json.loads(small.refine("goals", "--json")) == []  # the add wrote nothing
    small.never_printed_a_password()


def test_a_node_waits_out_a_full_server_then_launches(small: PgEnv) -> None:
    """A worker that cannot connect to claim exits without claiming; its node launches again
    on its next round, and the goal runs once the server has room."""
    node = small.node()
    wait_until(
        lambda: _connections(small.url, "refine node n1") == 2, timeout=90, what="the node's two"
    )
    with server_full(small.url):
        small.goal("g1", HANG)  # through this test's own connection, made before
        wait_until(
            lambda: "connection limit" in _text(small.state_dir("n1") / "node.log"),
            what="a worker refused by the full server",
        )
        assert small.read("g1")[0] == "queued"  # no claim was made
        assert node.poll() is None
    wait_until(lambda: small.read("g1")[0] == "running", timeout=60, what="g1 running")
    small.never_printed_a_password()


async def test_a_wait_that_saw_its_answer_while_the_server_was_full_answers_once_there_is_room(
    small: PgEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`refine wait` saw the goal cancelled on its own connection, but the check that the
    journal there is still the one it read needs a new connection, refused by a full server:
    the change was taken as seen and never read again, and the wait ran to its timeout (CI,
    after a server restart). Now a look that ended in trouble is looked at again."""
    monkeypatch.setattr(goal_wait, "SAFETY_CHECK_S", 0.2)
    Goals(small.journal).create(goal_id="g", title="G", node_id="n1", argv=["true"])
    with Journal.open(small.url, read_only=True) as reader:
        waited = wait_for_status(reader, small.url, "g", {"cancelled"}, 60)
        waiting = asyncio.create_task(waited)
        await asyncio.to_thread(wait_until, lambda: listening(small.url), what="the wait listening")
        # No await from the cancel until the server is full: the wait's next look finds both.
        Goals(small.journal).cancel(command_id="op:cancel:g", goal_id="g", reason="r")
        with server_full(small.url):
            await asyncio.sleep(1.0)  # several looks, each unable to check the journal's id
            assert not waiting.done()
        assert (await asyncio.wait_for(waiting, 10)).status == "cancelled"


def test_a_worker_sees_a_cancel_and_reports_its_end_after_its_node_was_killed(
    pg: PgEnv,
) -> None:
    pg.goal("cancelled", HANG)
    pg.goal("finishing", WAIT_FOR_GO)
    node = pg.node()
    for goal in ("cancelled", "finishing"):
        wait_until(lambda g=goal: pg.running_record(g), timeout=90, what=f"{goal} running")
    wait_until(lambda: _connections(pg.url, "refine worker n1") == 0, what="idle workers")
    node.send_signal(signal.SIGKILL)  # its workers run on, with nobody to relay wake-ups
    node.wait(timeout=10)

    # A cancellation committed by another process: the worker looks by itself, stops its
    # recipe and reports the cancellation with its own cleanup.
    rec = pg.running_record("cancelled")
    assert rec is not None
    pg.refine("cancel", "cancelled", "--reason", "not needed", node="elsewhere")
    _, run = wait_until(
        lambda: (r := pg.read("cancelled"))[1].status == "cancelled" and r, what="cancelled"
    )
    assert run.attempts[-1].cleanup is not None
    assert run.attempts[-1].cleanup["confirmed_by"] == rec.worker
    wait_until(lambda: not _alive(rec.pid), what="the worker gone")

    # A recipe that ends by itself: reported completed without the node.
    (pg.dir / "go").touch()
    wait_until(lambda: pg.read("finishing")[0] == "completed", what="finishing completed")
    assert "clean" in pg.refine("check")
    pg.never_printed_a_password()


def test_no_slot_or_connection_is_held_while_the_recipe_runs(pg: PgEnv) -> None:
    """The claim helper claims, records the worker and rereads on one connection (a slot of the
    node's limit), hands that session and slot to its worker, and becomes the recipe by exec
    (which closes its own copies: close-on-exec); the worker ends the session and gives the
    slot back. So while the recipe runs no worker connection and no slot is held. The recipe
    is not told of the slots either (a `refine` it ran would take its node's workers' share)."""
    node = pg.node()
    pg.goals.create(
        goal_id="env", title="env", node_id="n1", argv=["sh", "-c", PRINT_ENV, pg.marker]
    )
    wait_until((pg.dir / "printed").exists, timeout=90, what="the recipe running")
    wait_until(lambda: _connections(pg.url, "refine worker n1") == 0, what="no worker connection")
    slots = ConnectionSlots(pg.registry().root / "connections", 5 - KEPT)
    wait_until(lambda: _all_free(slots), what="every worker slot free")
    assert node.poll() is None
    (pg.dir / "go").touch()
    wait_until(lambda: pg.read("env")[0] == "completed", timeout=60, what="the recipe completed")

    log = pg.registry().log_path("env.r1", 1).read_text()
    assert f"REFINE_TEST_MARK={pg.marker}" in log  # the environment was printed
    assert f"{SLOTS_ENV}=" not in log
    pg.never_printed_a_password()


def test_a_free_slot_never_has_a_worker_session_still_listed(pg: PgEnv) -> None:
    """Once in CI ``pg_stat_activity`` listed 6 connections for a node of 5: a slot was given
    back at the client's close (a worker's let-go, or its claim helper's exec), while the
    server still listed the backend, exiting. Now a slot goes back only after the server let go
    of its session. Checked while 12 short goals launch and report: with ``k`` worker slots
    taken here (the others may not connect meanwhile), at most ``3 - k`` worker sessions are
    listed, at every look."""
    slots = ConnectionSlots(pg.registry().root / "connections", 5 - KEPT)
    slots.folder.mkdir(parents=True, exist_ok=True, mode=0o700)  # as its node will
    for n in range(12):
        pg.goals.create(goal_id=f"q{n}", title="quick", node_id="n1", argv=["true"])
    pg.node()
    looks, over = 0, []
    with psycopg.connect(pg.url, autocommit=True) as watcher:
        done = time.monotonic() + 120
        while time.monotonic() < done:
            taken = [slot for i in range(slots.limit) if (slot := slots._try(i)) is not None]
            try:
                listed = _worker_sessions(watcher, "refine worker n1")
            finally:
                for slot in taken:
                    slot.release()
            looks += 1
            if listed > slots.limit - len(taken):
                over.append((len(taken), listed))
            if looks % 50 == 0 and all(pg.read(f"q{n}")[0] == "completed" for n in range(12)):
                break
    assert all(pg.read(f"q{n}")[0] == "completed" for n in range(12))
    assert looks > 100 and over == []


def _worker_sessions(conn: psycopg.Connection, application: str) -> int:
    """How many sessions of ``conn``'s database carry ``application`` as their name."""
    row = conn.execute(
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE datname = current_database() AND application_name = %s",
        (application,),
    ).fetchone()
    return int(row[0]) if row else 0


def _all_free(slots: ConnectionSlots) -> bool:
    """No slot is held now (each taken for a moment, then given back)."""
    taken = [slots._try(i) for i in range(slots.limit)]
    for slot in taken:
        if slot is not None:
            slot.release()
    return None not in taken


def _connections(url: str, application: str) -> int:
    """How many connections to ``url``'s database carry ``application`` as their name."""
    with psycopg.connect(url, autocommit=True) as conn:
        return _worker_sessions(conn, application)


def _text(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError), open(f"/proc/{pid}/stat") as f:
        return f.read().rpartition(")")[2].split()[0] != "Z"
    return False


@pytest.fixture
def transient(tmp_path: Path) -> Iterator[ConnectionSlots]:
    """This process connects as a worker does: through one slot, letting go after each call."""
    before = sharing()
    slots = ConnectionSlots(tmp_path / "connections", 1)
    share(Sharing(slots=slots, transient=True, application="refine worker t1"))
    try:
        yield slots
    finally:
        share(before)


def test_a_transient_journal_holds_no_connection_between_calls(
    postgres_url: str, transient: ConnectionSlots
) -> None:
    with Journal.open(postgres_url) as journal:
        assert _connections(postgres_url, "refine worker t1") == 0  # the open let go
        assert journal.count("goal") == 0
        assert _connections(postgres_url, "refine worker t1") == 0
        with journal.held():
            journal.count("goal")
            journal.last_sequence()
            assert _connections(postgres_url, "refine worker t1") == 1
            # Its one slot is taken meanwhile: another holder waits (here: cannot take it).
            assert transient._try(0) is None
        assert _connections(postgres_url, "refine worker t1") == 0
        slot = transient._try(0)
        assert slot is not None
        slot.release()


def test_a_transient_journal_gives_its_slot_back_after_the_server_let_go_of_its_session(
    postgres_url: str, transient: ConnectionSlots
) -> None:
    """Each call's session is gone from ``pg_stat_activity`` by the time the slot is free
    (given back at the client's close, ≈ 1 in 100 was still listed, exiting)."""
    with Journal.open(postgres_url) as journal, psycopg.connect(postgres_url) as watcher:
        for _ in range(150):
            journal.count("goal")
            assert _worker_sessions(watcher, "refine worker t1") == 0


def test_an_open_by_id_connects_only_when_used_and_refuses_another_journal(
    postgres_url: str, transient: ConnectionSlots
) -> None:
    with Journal.open(postgres_url) as first:
        journal_id = first.journal_id
    assert journal_id
    with Journal.open(postgres_url, create=False, journal_id=journal_id) as journal:
        assert journal.journal_id == journal_id
        assert journal.count("goal") == 0  # the first connection checked it: the same journal
    with Journal.open(postgres_url, create=False, journal_id="another") as journal:
        with pytest.raises(NotAJournalError, match="another journal than another"):
            journal.count("goal")
        assert _connections(postgres_url, "refine worker t1") == 0


def test_an_open_by_id_of_a_file_refuses_another_journal(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    with Journal.open(path) as journal:
        journal_id = journal.journal_id
    assert journal_id
    Journal.open(path, create=False, journal_id=journal_id).close()
    with pytest.raises(NotAJournalError, match="another journal"):
        Journal.open(path, create=False, journal_id="another")
