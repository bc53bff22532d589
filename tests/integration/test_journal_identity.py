"""Which file is our journal: foreign SQLite files are never changed, a journal reached through a
symlink is the same journal (watch folder, node folder, process records), each journal has an id
that its process records name. Real files, real `refine` processes, real workers.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from store.errors import StorageError
from store.host.processes import ProcessRecord, ProcessRegistry, same_process
from store.journal.sqlite import SCHEMA_VERSION, Journal
from store.journal.watch import ChangeFeed
from store.model.goals import Goals
from tests.helpers.node_env import HANG, PY, Env
from tests.helpers.old_schema import as_schema_3
from tests.helpers.waits import wait_until


def refine(journal: Path, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "REFINE_NODE": "n1", "REFINE_OPERATOR": "dana"}
    return subprocess.run(
        [PY, "-m", "refine_tui.cli", "--journal", str(journal), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=environ,
    )


def fingerprint(path: Path) -> tuple[str, bytes, list[str]]:
    data = path.read_bytes()
    return hashlib.sha256(data).hexdigest(), data[18:20], sorted(os.listdir(path.parent))


@pytest.fixture
def foreign(tmp_path: Path) -> Path:
    """Another application's SQLite file (rollback journal: header bytes 18–19 are 1, 1)."""
    path = tmp_path / "other-app.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE notes (body TEXT)")
    conn.execute("INSERT INTO notes VALUES ('keep me')")
    conn.commit()
    conn.close()
    assert path.read_bytes()[18:20] == b"\x01\x01"
    return path


def test_no_command_changes_a_foreign_sqlite_file(foreign: Path) -> None:
    before = fingerprint(foreign)
    commands = [
        ["init"],
        ["goal", "add", "--title", "T", "--id", "g", "--", "true"],
        ["cancel", "g", "--reason", "r"],
        ["release", "g"],
        ["stop", "g"],
        ["cleanup", "g.r1", "--epoch", "1"],
        ["goals"],
        ["check"],
    ]
    for argv in commands:
        done = refine(foreign, *argv)
        assert done.returncode == 3, (argv, done.stderr)
        assert "not a refine journal" in done.stderr
        assert fingerprint(foreign) == before, argv
    node = refine(foreign, "node", timeout=60)
    assert node.returncode == 3 and "not a refine journal" in node.stderr
    assert fingerprint(foreign) == before


def test_the_journal_api_and_the_feed_leave_a_foreign_file_alone(foreign: Path) -> None:
    before = fingerprint(foreign)
    for kwargs in ({}, {"create": False}, {"read_only": True}):
        with pytest.raises(Exception, match="not a refine journal"):
            Journal.open(foreign, **kwargs)  # type: ignore[arg-type]
        assert fingerprint(foreign) == before
    feed = ChangeFeed(foreign)
    with pytest.raises(Exception, match="not a refine journal"):
        feed.poll()
    feed.close()
    assert fingerprint(foreign) == before


async def test_the_dashboard_leaves_a_foreign_file_alone(foreign: Path) -> None:
    from refine_tui.app import RefineApp

    before = fingerprint(foreign)
    app = RefineApp(journal=foreign, node="n1")
    async with app.run_test() as pilot:
        for _ in range(20):
            await pilot.pause(0.05)
            if app.header_state.state == "broken":
                break
        await pilot.press("s", "c", "x", "R")
        await asyncio.sleep(0.2)
    assert fingerprint(foreign) == before


# --- the journal id ------------------------------------------------------------------------


def test_init_writes_a_journal_id_and_older_journals_get_one_on_first_writable_open(
    tmp_path: Path,
) -> None:
    path = tmp_path / "journal.db"
    with Journal.open(path) as journal:
        first = journal.journal_id
    assert first and len(first) == 36
    with Journal.open(path, read_only=True) as journal:
        assert journal.journal_id == first
    # A schema-1 journal (before the id): read-only opens leave it as it is ...
    as_schema_3(path)
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE meta")
    conn.execute("PRAGMA user_version = 1")
    conn.close()
    before = fingerprint(path)
    with Journal.open(path, read_only=True) as journal:
        assert journal.journal_id is None
    assert fingerprint(path)[0] == before[0]
    # ... the first writable open migrates it forward, once.
    with Journal.open(path, create=False) as journal:
        migrated = journal.journal_id
    assert migrated and migrated != first
    with Journal.open(path, create=False) as journal:
        assert journal.journal_id == migrated
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


# --- symlinks and process records (real nodes, workers and `refine` processes) ---------------


@pytest.fixture
def linked(tmp_path: Path) -> Iterator[tuple[Env, Path]]:
    """A journal at <tmp>/real/journal.db and a symlink to it at <tmp>/links/journal.db."""
    (tmp_path / "real").mkdir()
    (tmp_path / "links").mkdir()
    env = Env(tmp_path / "real")
    link = tmp_path / "links" / "journal.db"
    link.symlink_to(env.path)
    try:
        yield env, link
    finally:
        env.cleanup()


def start_node(env: Env, journal: Path, node_id: str = "n1") -> subprocess.Popen[bytes]:
    argv = [PY, "-m", "store.node.scheduler", "--journal", str(journal), "--node", node_id]
    proc = subprocess.Popen(argv, start_new_session=True)
    env.started.append(proc)
    return proc


def any_record(env: Env) -> bool:
    return any(env.dir.parent.glob("**/processes/*.json"))


async def test_a_dashboard_opened_through_a_symlink_follows_commits(
    linked: tuple[Env, Path],
) -> None:
    from refine_tui.app import RefineApp

    env, link = linked
    env.goal("first", HANG)
    app = RefineApp(journal=link, node="n9")
    async with app.run_test() as pilot:
        for _ in range(200):
            await pilot.pause(0.05)
            if "first" in app.goal_rows:
                break
        assert "first" in app.goal_rows
        done = refine(env.path, "goal", "add", "--title", "Later", "--id", "later", "--", "true")
        assert done.returncode == 0, done.stderr
        for _ in range(300):  # 15 s
            await pilot.pause(0.05)
            if "later" in app.goal_rows:
                break
        assert "later" in app.goal_rows, "the commit never reached the dashboard"


def test_a_node_started_through_a_symlink_keeps_its_records_where_the_real_path_finds_them(
    linked: tuple[Env, Path],
) -> None:
    env, link = linked
    start_node(env, link)
    env.goal("g", HANG)
    wait_until(lambda: env.status("g") == "running" and any_record(env), what="g running")
    rec = wait_until(lambda: env.running_record("g"), what="the record under the real folder")
    assert rec.journal_id == env.journal.journal_id
    # Confirm cleanup through the real path of a live attempt: refused, nothing written.
    before = env.journal.last_sequence()
    done = refine(env.path, "cleanup", "g.r1", "--epoch", "1")
    assert done.returncode == 1 and "PROCESS_ALIVE" in done.stderr, done.stderr
    assert env.journal.last_sequence() == before and same_process(rec)
    # Stop through the real path finds the record, stops the process and requeues.
    done = refine(env.path, "stop", "g", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["outcome"] == "requeued"
    assert not same_process(rec)


def test_cleanup_is_refused_while_the_worker_lives_even_without_its_record(env: Env) -> None:
    start_node(env, env.path)
    env.goal("g", HANG)
    rec = wait_until(lambda: env.running_record("g"), what="g's record")
    env.registry().remove(rec.run_id, rec.epoch)  # looked up in the wrong place, or not yet written
    before = env.journal.last_sequence()
    done = refine(env.path, "cleanup", "g.r1", "--epoch", "1")
    assert done.returncode == 1 and "PROCESS_ALIVE" in done.stderr, done.stderr
    done = refine(env.path, "stop", "g")
    assert done.returncode == 1 and "NO_PROCESS_RECORD" in done.stderr
    assert "try again in a moment" in done.stderr
    assert env.journal.last_sequence() == before and same_process(rec)


def test_a_record_of_another_journal_in_the_same_folder_is_never_acted_on(env: Env) -> None:
    start_node(env, env.path)
    env.goal("g", HANG)
    rec = wait_until(lambda: env.running_record("g"), what="g's record")
    # Another journal beside it, with a goal of the same id running on the same node name.
    other = env.dir / "other.db"
    with Journal.open(other) as journal:
        goals = Goals(journal)
        goals.create(goal_id="g", title="g", node_id="n1", argv=["true"])
        goals.start(goal_id="g", node_id="n1", worker="n1/elsewhere", token="elsewhere")
        assert ProcessRegistry(other, "n1", journal.journal_id).get("g.r1", 1) is None
    done = refine(other, "stop", "g")
    assert done.returncode == 1 and "NO_PROCESS_RECORD" in done.stderr, done.stderr
    assert same_process(rec), "a record of another journal led to a signal"


def test_two_journals_in_one_folder_keep_their_own_records_of_the_same_attempt(env: Env) -> None:
    """Both journals' attempt 1 of run g.r1 named one record file under nodes/n1/: the second
    worker's record replaced the first, and the first journal's Stop found none."""
    other = env.dir / "other.db"
    with Journal.open(other) as journal:
        argv = [PY, "-c", HANG, env.marker]
        Goals(journal).create(goal_id="g", title="g", node_id="n1", argv=argv)
        registry = ProcessRegistry.for_journal(journal, "n1")
    env.goal("g", HANG)
    start_node(env, env.path)
    start_node(env, other)
    mine = wait_until(lambda: env.running_record("g"), what="this journal's record")
    theirs = wait_until(lambda: registry.get("g.r1", 1), what="the other journal's record")
    assert (mine.run_id, mine.epoch) == (theirs.run_id, theirs.epoch) and mine.pid != theirs.pid
    assert env.running_record("g") == mine and registry.get("g.r1", 1) == theirs

    done = refine(env.path, "stop", "g", "--json")
    assert done.returncode == 0 and json.loads(done.stdout)["process"] == "exited", done.stderr
    assert not same_process(mine) and same_process(theirs)
    assert registry.get("g.r1", 1) == theirs  # its record survives this journal's tidy-up

    done = refine(other, "cancel", "g", "--reason", "r", "--json")
    assert done.returncode == 0 and json.loads(done.stdout)["process"] == "exited", done.stderr
    assert not same_process(theirs)


def test_an_older_log_of_another_journal_in_the_same_folder_is_never_shown(tmp_path: Path) -> None:
    """Logs do not name their journal: before the fix, an attempt with no record and no log of
    its own showed the other journal's old log of the same run id + epoch from nodes/n1/."""
    from refine_tui.rows import Reader
    from store.ops.operator import cleanup_evidence

    journals = [Journal.open(tmp_path / name) for name in ("a.db", "b.db")]
    try:
        for journal in journals:  # the same attempt g.r1/1 claimed in both, no record yet
            goals = Goals(journal)
            goals.create(goal_id="g", title="g", node_id="n1", argv=["true"])
            goals.start(goal_id="g", node_id="n1", worker="n1/gone", token="gone")
        a, b = journals
        # b's attempt as an older version left it: record and log in the shared nodes/n1/.
        shared = ProcessRegistry(b.location, "n1")
        old_log = shared.log_path("g.r1", 1)
        shared.record(
            ProcessRecord(
                node_id="n1",
                pid=2**22 - 1,
                create_time=1.0,
                pgid=2**22 - 1,
                run_id="g.r1",
                epoch=1,
                worker="n1/gone",
                argv=("true",),
                log_path=str(old_log),
                started_at=1.0,
                journal_id=b.journal_id,
            )
        )
        old_log.write_text("b's output\n")

        mine, theirs = Reader(a, "n1"), Reader(b, "n1")
        assert mine.log_path("g.r1", 1, "n1") == str(mine.registry.log_path("g.r1", 1))
        assert not mine.registry.find_log("g.r1", 1).exists()  # no log: the claim is starting
        assert cleanup_evidence(a, "g.r1", epoch=1, node="n1").log_tail == []
        # b still reads its own older log in place (nothing was moved).
        assert theirs.log_path("g.r1", 1, "n1") == str(old_log)
        assert cleanup_evidence(b, "g.r1", epoch=1, node="n1").log_tail == ["b's output"]
        shared.remove("g.r1", 1)  # b's old worker ended and removed its record: a still sees none
        assert not mine.registry.find_log("g.r1", 1).exists()
    finally:
        for journal in journals:
            journal.close()


# --- a journal in a read-only folder -------------------------------------------------------


@pytest.fixture
def frozen_folder(tmp_path: Path) -> Iterator[Path]:
    """A journal with one goal in a folder nobody may write (``chattr +i``: root too)."""
    folder = tmp_path / "snapshot"
    path = folder / "journal.db"
    with Journal.open(path) as journal:
        Goals(journal).create(goal_id="g", title="g", node_id="n1", argv=["true"])
    assert not Path(f"{path}-wal").exists()  # the last connection checkpointed it
    if subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not available here (needs root on ext4/xfs)")
    try:
        yield path
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=True)


def test_a_journal_in_a_read_only_folder_is_read_as_an_immutable_snapshot(
    frozen_folder: Path,
) -> None:
    before = fingerprint(frozen_folder)
    done = refine(frozen_folder, "goals", "--json")
    assert done.returncode == 0, done.stderr
    assert [g["goal_id"] for g in json.loads(done.stdout)] == ["g"]
    with Journal.open(frozen_folder, read_only=True) as journal:
        assert journal.immutable and journal.last_sequence() > 0
    with Journal.open(frozen_folder.parent / "journal.db", read_only=True) as journal:
        assert journal.journal_id
    done = refine(frozen_folder, "cancel", "g", "--reason", "r")
    assert done.returncode == 3, done.stderr  # writing stays impossible, in one line
    assert fingerprint(frozen_folder) == before


@pytest.fixture
def no_inode_left(tmp_path: Path) -> Iterator[Path]:
    """A journal on a writable tmpfs whose every inode is used (root only, as in test_faults)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    folder = tmp_path / "full"
    folder.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", "size=2m,nr_inodes=8", "tmpfs", str(folder)]
    done = subprocess.run(mount, capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        path = folder / "journal.db"
        with Journal.open(path) as journal:
            Goals(journal).create(goal_id="g", title="g", node_id="n1", argv=["true"])
        for i in range(100):  # use up the inodes: SQLite cannot create its ``-shm``
            try:
                (folder / f"filler-{i}").touch()
            except OSError:
                break
        yield path
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def test_a_writable_folder_out_of_inodes_is_not_taken_for_a_snapshot(no_inode_left: Path) -> None:
    """SQLite says "unable to open" here too, but anyone may write this folder once an inode is
    free: an immutable read would be stale for ever, so the open is refused, and works after."""
    assert os.access(no_inode_left.parent, os.W_OK)
    with pytest.raises(StorageError):
        Journal.open(no_inode_left, read_only=True)
    done = refine(no_inode_left, "goals")
    assert done.returncode == 3 and len(done.stderr.splitlines()) == 1, done.stderr
    for i in range(2):  # room for the ``-wal`` and the ``-shm``
        (no_inode_left.parent / f"filler-{i}").unlink()
    with Journal.open(no_inode_left, read_only=True) as journal:
        assert not journal.immutable and journal.last_sequence() > 0
