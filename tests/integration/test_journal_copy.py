"""`refine copy` at the store level: SQLite → PostgreSQL → SQLite keeps every row as stored."""

from __future__ import annotations

import fcntl
import json
import re
import resource
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from store.errors import InvalidInputError, TargetNotEmptyError
from store.journal.core import COPY_TABLES
from store.journal.postgres import PostgresJournal
from store.journal.sqlite import Change, Journal
from store.journal.url import redact
from store.model.goals import Goals
from store.ops.copy_target import remove_stale_copies
from store.ops.journal_copy import copy_journal
from tests.helpers.old_schema import as_pg_schema
from tests.helpers.postgres_server import PASSWORD
from tests.helpers.soak_recipes import ROOT
from tests.helpers.waits import wait_until


def rows_of(journal: Any) -> dict[str, list[tuple[Any, ...]]]:
    with journal.snapshot():
        return {
            table: [tuple(r) for batch in journal.export_rows(table) for r in batch]
            for table, _, _ in COPY_TABLES
        }


def busy_journal(path: Path) -> Journal:
    journal = Journal.open(path)
    goals = Goals(journal)
    for n in range(30):
        goals.create(goal_id=f"g{n}", title=f"Goal «{n}»", node_id="n1", argv=["true", str(n)])
    for n in range(0, 30, 3):
        started = goals.start(goal_id=f"g{n}", node_id="n1", worker="w", token=f"t{n}")
        if n % 2:
            goals.settle(goal_id=f"g{n}", run_id=started.run.run_id, epoch=1, outcome="completed")
    goals.cancel(goal_id="g1", reason="not needed", command_id="op:cancel:1")
    return journal


def test_sqlite_to_postgres_to_sqlite_keeps_every_row(tmp_path: Path, postgres_url: str) -> None:
    seen: list[tuple[int, int]] = []
    with busy_journal(tmp_path / "a.db") as first, PostgresJournal.connect(postgres_url) as pg:
        report = copy_journal(first, pg, progress=lambda done, total: seen.append((done, total)))
        assert report.check.clean and report.events == first.last_sequence()
        assert seen[-1] == (report.events, report.events)
        assert rows_of(pg) == rows_of(first)
        assert pg.last_commit() == first.last_commit()
        assert never_analyzed(postgres_url) == []  # the planner knows the copied tables
        assert not_all_visible(postgres_url) == []  # counts need not read the heap
        with Journal.open(tmp_path / "b.db") as back:
            assert copy_journal(pg, back).check.clean
            assert rows_of(back) == rows_of(first)
        # The copy carries on where the source stopped: the next sequence follows on.
        pg.execute(
            command_id="after",
            payload={},
            expected={"run:after": None},
            decide=lambda loaded: [Change("run:after", {}, [("e", {}), ("f", {})])],
        )
        assert pg.last_sequence() == first.last_sequence() + 2


def not_all_visible(url: str) -> list[str]:
    """The journal's tables with pages the visibility map does not know all visible (only a
    vacuum marks them: until then an index-only scan reads the heap too)."""
    return copied_tables_where(url, "c.relallvisible < c.relpages")


def never_analyzed(url: str) -> list[str]:
    """The journal's tables the planner has no statistics for (``reltuples`` -1: never
    analyzed, as ``COPY`` leaves them)."""
    return copied_tables_where(url, "c.reltuples < 0")


def copied_tables_where(url: str, condition: str) -> list[str]:
    """The tables a copy fills whose ``pg_class`` row meets ``condition``."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            f" WHERE n.nspname = 'refine' AND c.relkind = 'r' AND {condition}"
            " AND c.relname IN ('events', 'aggregates', 'receipts')"
        ).fetchall()
    return [str(row[0]) for row in rows]


def test_a_non_empty_target_is_refused_and_left_as_it_was(
    tmp_path: Path, postgres_url: str
) -> None:
    with busy_journal(tmp_path / "a.db") as source, Journal.open(tmp_path / "b.db") as target:
        Goals(target).create(goal_id="mine", title="Mine", node_id="n1", argv=["true"])
        before = rows_of(target)
        with pytest.raises(TargetNotEmptyError):
            copy_journal(source, target)
        assert rows_of(target) == before
        with PostgresJournal.connect(postgres_url) as pg:
            copy_journal(source, pg)
            with pytest.raises(TargetNotEmptyError):
                copy_journal(target, pg)
            assert rows_of(pg) == rows_of(source)


def refine(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "refine_tui.cli", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_refine_copy_round_trips_and_checks_on_postgres(tmp_path: Path, postgres_url: str) -> None:
    first, back = str(tmp_path / "a.db"), str(tmp_path / "b.db")
    busy_journal(tmp_path / "a.db").close()
    outputs = []
    there = refine("copy", first, postgres_url)
    outputs.append(there)
    assert there.returncode == 0, there.stderr
    assert "clean" in there.stdout and redact(postgres_url) in there.stdout
    checked = refine("--journal", postgres_url, "check", "--json")
    outputs.append(checked)
    assert checked.returncode == 0 and json.loads(checked.stdout)["clean"]
    home = refine("copy", postgres_url, back, "--json")
    outputs.append(home)
    assert home.returncode == 0 and json.loads(home.stdout)["check"]["clean"]
    listed = [refine("--journal", j, "goals", "--json") for j in (first, back)]
    assert listed[0].stdout == listed[1].stdout and len(json.loads(listed[0].stdout)) == 30
    again = refine("copy", first, postgres_url)
    outputs.append(again)
    assert again.returncode == 1 and again.stderr.count("\n") == 1
    assert "TARGET_NOT_EMPTY" in again.stderr
    missing = refine("copy", str(tmp_path / "nothing.db"), str(tmp_path / "c.db"))
    assert missing.returncode == 3 and not (tmp_path / "c.db").exists()
    for done in outputs:
        assert PASSWORD not in done.stdout + done.stderr


def test_refine_init_on_a_url_creates_the_schema_and_no_local_file(
    tmp_path: Path, postgres_url: str
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "refine_tui.cli", "--journal", postgres_url, "init", "--json"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert PASSWORD not in done.stdout + done.stderr
    assert json.loads(done.stdout)["journal"] == redact(postgres_url)
    assert list(tmp_path.iterdir()) == []  # no SQLite file named after the URL
    with PostgresJournal.connect(postgres_url, create=False) as journal:
        assert journal.last_sequence() == 0


def test_an_outbox_row_that_is_not_its_events_is_refused_on_the_way_into_sqlite(
    tmp_path: Path, postgres_url: str
) -> None:
    """SQLite's outbox is a view of the events: a copied row must be the one it derives."""
    import psycopg

    with busy_journal(tmp_path / "a.db") as source, PostgresJournal.connect(postgres_url) as pg:
        copy_journal(source, pg)
    with PostgresJournal.connect(postgres_url) as pg, Journal.open(tmp_path / "b.db") as back:
        as_pg_schema(postgres_url, 3)  # under the open source: an outbox table of its own
        with psycopg.connect(postgres_url, autocommit=True) as raw:
            raw.execute("UPDATE refine.outbox SET topic = 'forged' WHERE sequence = 2")
        with pytest.raises(InvalidInputError, match="outbox"):
            copy_journal(pg, back)
        assert back.last_sequence() == 0  # nothing written


def _small_files() -> None:
    """In the child: files may grow to 48 KiB (EFBIG past it, a full disk without a mount)."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (48 * 1024, 48 * 1024))


def test_a_copy_that_fails_leaves_no_new_journal_behind(tmp_path: Path) -> None:
    source, target = tmp_path / "a.db", tmp_path / "new.db"
    with busy_journal(source) as journal:
        for n in range(200):
            Goals(journal).create(goal_id=f"more{n}", title="More", node_id="n1", argv=["true"])
    failed = subprocess.run(
        [sys.executable, "-m", "refine_tui.cli", "copy", str(source), str(target)],
        cwd=ROOT, capture_output=True, text=True, timeout=120, preexec_fn=_small_files,
    )  # fmt: skip
    assert failed.returncode == 3 and failed.stderr.startswith("refine: STORAGE:")
    # An empty journal left at the target would pass for a copy (check: clean, 0 goals).
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith("new.db")]
    done = refine("copy", str(source), str(target))
    assert done.returncode == 0, done.stderr


# --- a copy ended by a signal, and copies racing for one new file ---------------------------------


def big_journal(folder: Path, goals: int = 3000) -> Path:
    """A real journal (bench's cached builder) whose copy takes long enough to be signalled."""
    from bench.common import journal_with

    folder.mkdir()
    return journal_with(goals, folder)


def start_copy(source: Path, target: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "refine_tui.cli", "copy", str(source), target, "--json"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def temp_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".copying-" in p.name)


def sqlite_copy_under_way(folder: Path) -> bool:
    """Rows are going into the copy: a write-ahead log in ``folder`` has passed 1 MiB."""
    return any(p.name.endswith("-wal") and p.stat().st_size > 1 << 20 for p in folder.iterdir())


def postgres_copy_under_way(url: str) -> bool:
    """Rows are going into the new schema: a COPY of a batch is running (PostgreSQL's view)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_progress_copy").fetchone()
    return bool(row and row[0])


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_copy_to_postgres_ended_by_a_signal_leaves_no_journal(
    tmp_path: Path, postgres_url: str, signum: int
) -> None:
    """It left an empty journal (the schema committed before the rows) that `goals` accepted;
    now the schema is created in the copy's transaction: nothing survives the copy."""
    source = big_journal(tmp_path / "source")
    copying = start_copy(source, postgres_url)
    wait_until(lambda: postgres_copy_under_way(postgres_url), 120, "the COPY", step=0.005)
    copying.send_signal(signum)
    _, err = copying.communicate(timeout=120)
    assert copying.returncode == (128 + signum if signum == signal.SIGTERM else -signum)
    assert err == "" and PASSWORD not in err
    goals = refine("--journal", postgres_url, "goals")
    assert goals.returncode == 3 and "journal missing" in goals.stderr
    again = refine("copy", str(source), postgres_url, "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["check"]["clean"], again.stderr
    assert never_analyzed(postgres_url) == not_all_visible(postgres_url) == []  # once committed


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_copy_to_a_new_file_ended_by_a_signal_leaves_no_journal(
    tmp_path: Path, signum: int
) -> None:
    """SIGTERM left an empty journal at the target (SIGINT was handled). Now the copy is built
    under a hidden temporary name: SIGTERM removes it; SIGKILL leaves only that file, which
    no command takes for the journal and the next copy to the target removes."""
    source, target = big_journal(tmp_path / "source"), tmp_path / "new.db"
    copying = start_copy(source, str(target))
    wait_until(lambda: sqlite_copy_under_way(tmp_path), 120, "rows going into the copy")
    copying.send_signal(signum)
    _, err = copying.communicate(timeout=120)
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith("new.db")]
    goals = refine("--journal", str(target), "goals")
    assert goals.returncode == 3 and "journal missing" in goals.stderr
    left = temp_files(tmp_path)
    if signum == signal.SIGTERM:
        assert (copying.returncode, err, left) == (128 + signum, "", [])
    else:
        assert copying.returncode == -signum
        assert re.fullmatch(r"\.new\.db\.copying-[0-9a-f]{8}", left[0]), left
    again = refine("copy", str(source), str(target), "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["check"]["clean"], again.stderr
    assert temp_files(tmp_path) == []  # the killed copy's file is gone with this one's


def test_four_copies_into_one_new_file_one_wins_and_the_others_refuse(tmp_path: Path) -> None:
    """A losing copy deleted the winner's file after it reported success; others ended
    `INTERNAL: FileNotFoundError`. Now the file is created by a link that never replaces."""
    source, target = big_journal(tmp_path / "source", 1000), tmp_path / "new.db"
    copies = [start_copy(source, str(target)) for _ in range(4)]
    ended = [(c.wait(timeout=300), *c.communicate()) for c in copies]
    assert sorted(code for code, _, _ in ended) == [0, 1, 1, 1], ended
    for code, out, err in ended:
        if code == 0:
            assert json.loads(out)["check"]["clean"] and err == ""
        else:
            assert json.loads(out)["error"]["code"] == "TARGET_NOT_EMPTY"  # --json's refusal
            assert err.count("\n") == 1
            assert err.startswith("refine: TARGET_NOT_EMPTY: ") and str(target) in err
    assert [p.name for p in tmp_path.iterdir() if p.is_file()] == ["new.db"]  # no temp left
    listed = [refine("--journal", str(j), "goals", "--json").stdout for j in (source, target)]
    assert listed[0] == listed[1] and len(json.loads(listed[0])) == 1000


def test_a_live_copys_file_is_never_taken_for_a_dead_ones(tmp_path: Path) -> None:
    """`remove_stale_copies` removes a temporary file no process holds locked, and only it."""
    target = tmp_path / "new.db"
    dead, live, newborn = (tmp_path / f".new.db.copying-{n * 8}" for n in "abc")
    for temp in (dead, live):
        temp.write_bytes(b"SQLite format 3\0")
    Path(f"{dead}-wal").write_bytes(b"x")
    newborn.touch()  # its copy has just made it (empty) and locks it next
    other = tmp_path / ".other.db.copying-dddddddd"  # a copy to another target
    other.write_bytes(b"x")
    with live.open("rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        assert remove_stale_copies(target) == [dead]
    assert temp_files(tmp_path) == sorted(p.name for p in (live, newborn, other))
