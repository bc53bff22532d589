"""Which file is our journal: foreign SQLite files are never changed, a journal reached through a
symlink is the same journal (watch folder, node folder, process records), each journal has an id
that its process records name. Real files, real `refine` processes, real workers.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from store.journal import Journal
from store.watch import ChangeFeed

PY = sys.executable


def refine(journal: Path, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "REFINE_NODE": "n1", "REFINE_OPERATOR": "dana"}
    return subprocess.run(
        [PY, "-m", "refine_tui.cli", "--journal", str(journal), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
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
