"""`refine wait GOAL --status S[,S…]`: woken by the journal's change source, typed refusals."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from store.errors import GoalTerminalError, JournalMissingError, WaitTimeoutError
from store.journal.sqlite import Journal
from store.model.goals import Goal, Goals
from store.ops import goal_wait
from store.ops.goal_wait import wait_for_status
from tests.helpers.cli import dump, refine
from tests.helpers.postgres_server import PASSWORD, PostgresServer
from tests.helpers.waits import wait_until


@pytest.fixture
def journal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    path = tmp_path / "journal.db"
    assert refine(capsys, path, "init")[0] == 0
    code, _, _ = refine(capsys, path, "goal", "add", "--title", "G", "--id", "g", "--", "true")
    assert code == 0
    return path


def test_a_status_already_reached_returns_at_once(journal: Path, capsys) -> None:
    assert refine(capsys, journal, "wait", "g", "--status", "running,queued") == (
        0,
        "g queued\n",
        "",
    )
    code, out, _ = refine(capsys, journal, "wait", "g", "--status", "queued", "--json")
    assert code == 0 and json.loads(out)["goal_id"] == "g" and json.loads(out)["status"] == "queued"


def test_timeout_is_a_typed_refusal_and_writes_nothing(journal: Path, capsys) -> None:
    before = dump(journal)
    code, out, err = refine(capsys, journal, "wait", "g", "--status", "running", "--timeout", "0.2")
    assert (code, out) == (4, "")  # "not yet": its own exit code (issue 24.10)
    assert err == "refine: WAIT_TIMEOUT: goal g is still queued after 0.2 s\n"
    assert dump(journal) == before


def test_a_terminal_status_not_wanted_refuses(journal: Path, capsys) -> None:
    assert refine(capsys, journal, "cancel", "g", "--reason", "not needed")[0] == 0
    code, _, err = refine(capsys, journal, "wait", "g", "--status", "running,completed")
    assert code == 1 and err.startswith("refine: GOAL_TERMINAL: goal g is cancelled")
    assert refine(capsys, journal, "wait", "g", "--status", "cancelled")[:2] == (0, "g cancelled\n")


@pytest.mark.parametrize(
    "args",
    [
        ("--status", "bogus"),
        ("--status", "running,"),
        ("--status", ""),
        ("--status", "running", "--timeout", "-1"),
        ("--status", "running", "--timeout", "nan"),
        (),
    ],
)
def test_bad_usage_exits_2(journal: Path, capsys, args: tuple[str, ...]) -> None:
    code, out, err = refine(capsys, journal, "wait", "g", *args)
    assert (code, out) == (2, "") and err.startswith("refine: USAGE: ") and err.count("\n") == 1


def test_unknown_goal_and_missing_journal(journal: Path, capsys) -> None:
    code, _, err = refine(capsys, journal, "wait", "nope", "--status", "running")
    assert code == 1 and err.startswith("refine: GOAL_NOT_FOUND:")
    missing = journal.parent / "missing.db"
    code, _, err = refine(capsys, missing, "wait", "g", "--status", "running")
    assert code == 3 and err.startswith("refine: STORAGE:") and not missing.exists()


async def test_woken_by_a_commit_not_by_the_safety_check(journal: Path, monkeypatch) -> None:
    """With the safety check an hour away, only the change source can end the wait."""
    monkeypatch.setattr(goal_wait, "SAFETY_CHECK_S", 3600.0)
    with Journal.open(journal, read_only=True) as reader, Journal.open(journal) as writer:
        waiting = asyncio.create_task(wait_for_status(reader, journal, "g", {"cancelled"}))
        await asyncio.sleep(0.3)  # the wait has read "queued" and listens
        assert not waiting.done()
        Goals(writer).cancel(command_id="op:cancel:test", goal_id="g", reason="r")
        assert (await asyncio.wait_for(waiting, 30)).status == "cancelled"


async def test_a_goal_that_ends_while_waiting_refuses(journal: Path, monkeypatch) -> None:
    monkeypatch.setattr(goal_wait, "SAFETY_CHECK_S", 3600.0)
    with Journal.open(journal, read_only=True) as reader:
        waiting = asyncio.create_task(wait_for_status(reader, journal, "g", {"running"}))
        await asyncio.sleep(0.3)
        cancel = [sys.executable, "-m", "refine_tui.cli", "--journal", str(journal)]
        subprocess.run([*cancel, "cancel", "g", "--reason", "r"], check=True, capture_output=True)
        with pytest.raises(GoalTerminalError):
            await asyncio.wait_for(waiting, 30)


def _remove(journal: Path) -> None:
    for end in ("", "-wal", "-shm"):
        journal.with_name(journal.name + end).unlink(missing_ok=True)


async def test_a_journal_restored_while_waiting_is_followed(journal: Path, tmp_path: Path) -> None:
    """The open file is deleted and a copy put in its place (a restore): the wait reads the
    journal now at the path, not the deleted file that can never change again."""
    with Journal.open(journal, read_only=True) as reader:
        shutil.copy(journal, tmp_path / "backup.db")
        _remove(journal)
        with pytest.raises(WaitTimeoutError, match="journal missing"):
            await wait_for_status(reader, journal, "g", {"cancelled"}, timeout_s=0.2)
        (tmp_path / "backup.db").rename(journal)
        with Journal.open(journal) as writer:
            Goals(writer).cancel(command_id="op:cancel:test", goal_id="g", reason="r")
        waited = await wait_for_status(reader, journal, "g", {"cancelled"}, timeout_s=30)
        assert waited.status == "cancelled"


async def test_a_server_restart_while_waiting_is_waited_out(
    postgres_server: PostgresServer, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`refine wait` ended STORAGE (exit 3) at a PostgreSQL restart; once the goal was read,
    the server going away is waited for (and said in the timeout), not the answer."""
    if not postgres_server.owned:
        pytest.skip("an external server ($REFINE_TEST_POSTGRES_URL) is not stopped by tests")
    monkeypatch.setattr(goal_wait, "SAFETY_CHECK_S", 0.2)  # looks while the server is down
    with Journal.open(postgres_url) as writer:
        Goals(writer).create(goal_id="g", title="G", node_id="n1", argv=["true"])
    with Journal.open(postgres_url, read_only=True) as reader:

        def waiting(timeout_s: float) -> asyncio.Task[Goal]:
            waited = wait_for_status(reader, postgres_url, "g", {"cancelled"}, timeout_s)
            return asyncio.create_task(waited)

        long, short = waiting(120), waiting(2.0)
        await asyncio.sleep(0.5)  # both have read "queued"
        await asyncio.to_thread(postgres_server.stop)
        try:
            with pytest.raises(WaitTimeoutError, match=r"still unknown \(journal unreachable\)"):
                await short
            assert not long.done()
        finally:
            await asyncio.to_thread(postgres_server.start_on_same_port)
        with Journal.open(postgres_url) as writer:
            Goals(writer).cancel(command_id="op:cancel:test", goal_id="g", reason="r")
        assert (await asyncio.wait_for(long, 60)).status == "cancelled"


# --- a journal dropped, re-created or restored under a wait ---------------------------------------


def listening(url: str) -> bool:
    """A `refine wait` listens: it has read the goal (the watcher starts after the first read)."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND query LIKE 'LISTEN%'"
        ).fetchone()
    return bool(row and row[0])


def run_sql(url: str, sql: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql)


def test_a_postgres_journal_dropped_and_recreated_while_waiting_ends_storage(
    postgres_url: str,
) -> None:
    """Dropped and made again by `refine init` (the goal added again, at the same sequence):
    the wait read the new journal's head as unchanged and waited forever on a goal of the old
    one. Now it sees the journal id change: STORAGE, exit 3, in one line, no password."""
    with Journal.open(postgres_url) as writer:
        Goals(writer).create(goal_id="g", title="G", node_id="n1", argv=["true"])
    waiting = subprocess.Popen(
        [sys.executable, "-m", "refine_tui.cli", "--journal", postgres_url,
         "wait", "g", "--status", "cancelled", "--timeout", "300"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        wait_until(lambda: listening(postgres_url), 60, "the wait to listen")
        run_sql(postgres_url, "DROP SCHEMA refine CASCADE")
        with Journal.open(postgres_url) as again:
            Goals(again).create(goal_id="g", title="G", node_id="n1", argv=["true"])
        out, err = waiting.communicate(timeout=60)
    finally:
        waiting.kill()
    assert (waiting.returncode, out) == (3, "")
    assert err.startswith("refine: STORAGE: journal replaced: ") and err.count("\n") == 1, err
    assert "another journal" in err and PASSWORD not in err


async def test_a_postgres_journal_moved_away_is_waited_for_and_followed_back(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Gone (renamed away, as a restore starts) is waited for, like a deleted SQLite file; back
    with the same journal id (restored), it is followed."""
    monkeypatch.setattr(goal_wait, "SAFETY_CHECK_S", 0.2)
    with Journal.open(postgres_url) as writer:
        Goals(writer).create(goal_id="g", title="G", node_id="n1", argv=["true"])
    with Journal.open(postgres_url, read_only=True) as reader:

        def waiting(timeout_s: float) -> asyncio.Task[Goal]:
            waited = wait_for_status(reader, postgres_url, "g", {"cancelled"}, timeout_s)
            return asyncio.create_task(waited)

        long, short = waiting(120), waiting(5.0)
        await asyncio.sleep(0.5)  # both have read "queued"
        run_sql(postgres_url, "ALTER SCHEMA refine RENAME TO refine_saved")
        with pytest.raises(WaitTimeoutError, match=r"still unknown \(journal missing\)"):
            await short
        assert not long.done()
        run_sql(postgres_url, "ALTER SCHEMA refine_saved RENAME TO refine")
        with Journal.open(postgres_url) as writer:
            Goals(writer).cancel(command_id="op:cancel:test", goal_id="g", reason="r")
        assert (await asyncio.wait_for(long, 60)).status == "cancelled"


async def test_a_sqlite_journal_made_again_while_waiting_ends_storage(
    journal: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same rule on SQLite: a restored file is followed (above), a new journal in its
    place (another id) ends the wait instead of answering with its goal of the same name."""
    monkeypatch.setattr(goal_wait, "SAFETY_CHECK_S", 0.2)
    with Journal.open(journal, read_only=True) as reader:
        waiting = asyncio.create_task(
            wait_for_status(reader, journal, "g", {"cancelled"}, timeout_s=120)
        )
        await asyncio.sleep(0.5)
        _remove(journal)
        with Journal.open(journal) as again:
            Goals(again).create(goal_id="g", title="G", node_id="n1", argv=["true"])
            Goals(again).cancel(command_id="op:cancel:test", goal_id="g", reason="r")
        with pytest.raises(JournalMissingError, match=r"journal replaced: .* another journal"):
            await asyncio.wait_for(waiting, 60)
