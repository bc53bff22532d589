"""The header's figures without a statement per commit: the count of Goals is counted once per
journal, then kept by the creations that come after what it counted (it stays exact, and a
commit landing between a read's poll and its count is not counted twice); the last commit is
the newest event the read polled. On a server each was the server's work, per dashboard, on
every commit."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from refine_tui.app import RefineApp
from store.journal.sqlite import Journal, SqliteJournal
from store.model.goals import Goals
from tests.helpers.dashboard import loaded
from tests.helpers.waits import until

NODE = "n1"


def create(path: Path, goal_id: str) -> None:
    with Journal.open(path) as journal:
        Goals(journal).create(goal_id=goal_id, title=goal_id, node_id="elsewhere", argv=["true"])


def goals_in(path: Path) -> int:
    """The Goals in the journal, counted by SQLite itself (not through the count watched)."""
    with sqlite3.connect(path) as db:
        return int(db.execute("SELECT count(*) FROM aggregates WHERE kind = 'goal'").fetchone()[0])


async def test_the_goal_total_stays_exact_counted_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "journal.db"
    for n in range(5):
        create(path, f"g{n}")
    counts: list[str] = []
    race: list[str] = []  # a Goal to commit just before the next count reads
    count = SqliteJournal.count

    def counting(journal: SqliteJournal, kind: str, status: str | None = None) -> int:
        if kind == "goal" and status is None:
            counts.append(kind)
            while race:
                create(path, race.pop())  # after the read's poll, before its count
        return count(journal, kind, status)

    monkeypatch.setattr(SqliteJournal, "count", counting)
    app = RefineApp(journal=path, node=NODE)
    async with app.run_test(size=(100, 30)) as pilot:
        await loaded(pilot)
        await until(pilot, lambda: app.header_state.total == 5)
        counted = len(counts)
        race.append("late")
        create(path, "a")  # its read counts, and "late" commits in between
        await until(pilot, lambda: "late" in app.goal_rows and "a" in app.goal_rows)
        assert app.header_state.total == 7 == goals_in(path)
        for n in range(10):
            create(path, f"more{n}")
            await until(pilot, lambda n=n: f"more{n}" in app.goal_rows)  # a read each
        assert app.header_state.total == 17 == goals_in(path)
        assert len(counts) - counted <= 1  # once, not once per new Goal


async def test_the_last_commit_shown_is_the_journals_without_asking_each_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "journal.db"
    create(path, "g0")
    asked: list[int] = []
    last_commit = SqliteJournal.last_commit

    def counting(journal: SqliteJournal) -> tuple[int, float | None]:
        asked.append(1)
        return last_commit(journal)

    monkeypatch.setattr(SqliteJournal, "last_commit", counting)
    app = RefineApp(journal=path, node=NODE)
    async with app.run_test(size=(100, 30)) as pilot:
        await loaded(pilot)
        before = len(asked)
        for n in range(10):
            create(path, f"more{n}")
            await until(pilot, lambda n=n: f"more{n}" in app.goal_rows)  # a read each
        with sqlite3.connect(path) as db:
            sequence, at = db.execute(
                "SELECT sequence, committed_at FROM events ORDER BY sequence DESC LIMIT 1"
            ).fetchone()
        await until(pilot, lambda: app.header_state.last_sequence == sequence)
        assert app.header_state.last_commit == at
        assert len(asked) - before <= 1
