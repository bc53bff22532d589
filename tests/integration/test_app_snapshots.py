"""SVG snapshots of the dashboard (pytest-textual-snapshot). Update: --snapshot-update.

Everything time-dependent is frozen: commit times are rewritten to a fixed base in the test
journal, the app's clock is fixed, the time zone is UTC and the input cursor does not blink.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual.widgets import Input

from refine_tui.app import RefineApp
from refine_tui.demo import populate

NODE = "n1"
BASE = 1_795_000_000.0  # commits are spread from here, one second apart
NOW = BASE + 3600 + 754  # the frozen clock: running goals show fixed elapsed times


@pytest.fixture
def frozen_journal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    monkeypatch.chdir(tmp_path)  # the header shows the path as given: keep it short and stable
    populate(tmp_path / "journal.db", node=NODE, live=False)
    with sqlite3.connect(tmp_path / "journal.db") as db:  # fixture only: freeze commit times
        db.execute("UPDATE events SET committed_at = ? + sequence", (BASE,))
    yield "journal.db"
    monkeypatch.delenv("TZ")
    time.tzset()


def app_for(path: str, **kw: object) -> RefineApp:
    return RefineApp(journal=path, node=NODE, clock=lambda: NOW, **kw)  # type: ignore[arg-type]


def until(condition: Callable[[Pilot], bool]) -> Callable[[Pilot], object]:
    async def wait(pilot: Pilot) -> None:
        for _ in range(750):  # up to 15 s on a busy box
            if condition(pilot):
                break
            await pilot.pause(0.02)
        for widget in pilot.app.screen.query(Input):
            widget.cursor_blink = False
        await pilot.pause(0.1)

    return wait


def loaded(pilot: Pilot) -> bool:
    return len(pilot.app.goal_rows) == 8 and pilot.app.header_state.state == "live"


def test_goals_80x24(snap_compare, frozen_journal: str) -> None:
    assert snap_compare(app_for(frozen_journal), terminal_size=(80, 24), run_before=until(loaded))


def test_goals_with_history_140x40(snap_compare, frozen_journal: str) -> None:
    async def run_before(pilot: Pilot) -> None:
        await until(loaded)(pilot)
        pilot.app.query_one("#goals").select("unit-tests")
        await pilot.press("h")
        await until(lambda p: p.app.query_one("#detail").line_count >= 6)(pilot)

    assert snap_compare(app_for(frozen_journal), terminal_size=(140, 40), run_before=run_before)


def test_attempts_80x24(snap_compare, frozen_journal: str) -> None:
    async def run_before(pilot: Pilot) -> None:
        await until(loaded)(pilot)
        pilot.app.query_one("#goals").select("unit-tests")
        await pilot.press("enter")
        await until(lambda p: bool(p.app.query_one("#runs").keys()))(pilot)
        await pilot.press("enter")
        await until(lambda p: len(p.app.query_one("#attempts").keys()) == 2)(pilot)

    assert snap_compare(app_for(frozen_journal), terminal_size=(80, 24), run_before=run_before)


def test_cancel_modal_80x24(snap_compare, frozen_journal: str) -> None:
    async def run_before(pilot: Pilot) -> None:
        await until(loaded)(pilot)
        pilot.app.query_one("#goals").select("migrate-db")
        await pilot.press("c")
        await until(lambda p: p.app.screen.query("#reason").first() is not None)(pilot)
        await pilot.press("enter")  # an empty reason is refused in words

    assert snap_compare(app_for(frozen_journal), terminal_size=(80, 24), run_before=run_before)


def test_read_only_80x24(snap_compare, frozen_journal: str) -> None:
    app = app_for(frozen_journal, read_only=True)
    assert snap_compare(app, terminal_size=(80, 24), run_before=until(loaded))


def test_missing_journal_80x24(snap_compare, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    app = app_for("gone/journal.db")
    assert snap_compare(
        app,
        terminal_size=(80, 24),
        run_before=until(lambda p: p.app.header_state.state == "missing"),
    )
