"""The attempt timeline (issue 26, DESIGN §17) through Pilot: `t` on a Goal shows each attempt
with its outcome, in order, on one axis with the long idle gap collapsed; the running attempt
grows as the clock moves; from a Run only that Run's attempts (a cancellation's included);
a new attempt committed meanwhile appears."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from refine_tui.app import RefineApp
from refine_tui.screens.timeline import TimelineScreen
from refine_tui.textual_private import notifications
from store.journal.sqlite import Journal
from store.model.goals import Goals
from tests.helpers.dashboard import loaded, select
from tests.helpers.waits import until

NODE = "n1"
T0 = 1_795_000_000.0  # commit times are rewritten from here (fixture only)
H = 3600.0


def at(path: Path, when: float, act: Callable[[Goals], object]) -> None:
    """Commit ``act`` through the Goals API, then date its events ``when``."""
    with Journal.open(path) as journal:
        seen = journal.last_commit()[0]
        act(Goals(journal))
    with sqlite3.connect(path) as db:
        db.execute("UPDATE events SET committed_at = ? WHERE sequence > ?", (when, seen))


def start(goal_id: str, token: str) -> Callable[[Goals], object]:
    return lambda g: g.start(goal_id=goal_id, node_id="n2", worker=f"w-{token}", token=token)


def settle(goal_id: str, epoch: int, outcome: str, reason: str | None) -> Callable[[Goals], object]:
    def act(goals: Goals) -> None:
        goal = goals.read(goal_id)
        assert goal is not None
        goals.settle(
            goal_id=goal_id, run_id=goal.run_id, epoch=epoch, outcome=outcome, reason=reason
        )

    return act


def interrupt(goals: Goals) -> None:
    goal = goals.read("story")
    run = goals.journal.load("run:story.r1")
    assert goal is not None and run is not None
    goals.interrupt(
        goal_id="story",
        run_id=goal.run_id,
        epoch=1,
        goal_version=goal.version,
        run_version=run.version,
        confirmed_by="dana@n1",
        method="sigterm",
        command_id="op:stop:story",
    )


def story(path: Path, t0: float = T0) -> None:
    """Goal story: interrupted, failed half a minute later, running after three idle hours.
    Goal halted: failed, then cancelled while its second attempt ran."""
    at(
        path,
        t0,
        lambda g: g.create(goal_id="story", title="s", argv=["true"], node_id="n2", max_attempts=5),
    )
    at(path, t0, start("story", "a"))
    at(path, t0 + 100, interrupt)
    at(path, t0 + 130, start("story", "b"))
    at(path, t0 + 200, settle("story", 2, "failed", "exit 1"))
    at(path, t0 + 3 * H, start("story", "c"))
    at(path, t0, lambda g: g.create(goal_id="halted", title="h", argv=["true"], node_id="n2"))
    at(path, t0, start("halted", "d"))
    at(path, t0 + 60, settle("halted", 1, "failed", "exit 2"))
    at(path, t0 + 70, start("halted", "e"))
    at(path, t0 + 90, lambda g: g.cancel(goal_id="halted", reason="not needed", command_id="op:c"))
    at(path, t0 + 95, settle("halted", 2, "cancelled", None))


def journal_with_story(tmp_path: Path) -> Path:
    path = tmp_path / "journal.db"
    story(path)
    return path


def notes(app: RefineApp) -> list[str]:
    return [n.message for n in notifications(app)]


def timeline(app: RefineApp) -> TimelineScreen:
    screen = app.screen
    assert isinstance(screen, TimelineScreen)
    return screen


def shown(app: RefineApp) -> list[str]:
    """The chart's lines as drawn now."""
    return str(timeline(app).chart.render()).splitlines()


async def open_timeline(pilot, *keys: str) -> TimelineScreen:
    await pilot.press(*keys, "t")
    await until(pilot, lambda: isinstance(pilot.app.screen, TimelineScreen))
    await until(pilot, lambda: timeline(pilot.app).read_once)
    await pilot.pause()
    return timeline(pilot.app)


@pytest.mark.parametrize("size", [(80, 24), (200, 50)])
async def test_the_timeline_shows_each_attempt_in_order_and_the_running_one_grows(
    tmp_path: Path, size: tuple[int, int]
) -> None:
    path = journal_with_story(tmp_path)
    now = [T0 + 3 * H + 50]
    app = RefineApp(journal=path, node=NODE, clock=lambda: now[0])
    async with app.run_test(size=size) as pilot:
        await loaded(pilot)
        await select(pilot, "story")
        screen = await open_timeline(pilot)
        lines = shown(app)
        assert [line[:20].split()[:3] for line in lines[:3]] == [
            ["R1", "#1", "interrupted"],
            ["R1", "#2", "failed"],
            ["R1", "#3", "running"],
        ]
        assert "⋯ 2h56m ⋯" in lines[3]  # the idle gap, collapsed and marked
        assert all(len(line) == screen.chart.size.width for line in lines[:4])  # whole
        assert lines[4].rstrip().endswith(" now")
        laid = screen.chart.laid
        assert laid is not None
        grown = laid.bars[-1].x1 - laid.bars[-1].x0
        now[0] += 450  # the clock moves: the running bar grows at the next tick
        await until(pilot, lambda: (b := screen.chart.laid.bars[-1]).x1 - b.x0 > grown)
        assert "8m20s" in shown(app)[2]
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, TimelineScreen))
        assert app.follower.wants.timeline is None


async def test_from_a_run_the_timeline_shows_its_attempts_and_a_cancellation(
    tmp_path: Path,
) -> None:
    path = journal_with_story(tmp_path)
    app = RefineApp(journal=path, node=NODE, clock=lambda: T0 + 100)
    async with app.run_test(size=(100, 30)) as pilot:
        await loaded(pilot)
        await select(pilot, "halted")
        await pilot.press("enter")
        await until(pilot, lambda: bool(app.query_one("#runs").keys()))
        screen = await open_timeline(pilot)
        assert screen.key == ("halted", "halted.r1")
        outcomes = [(b.span.epoch, b.span.outcome) for b in screen.chart.laid.bars]
        assert outcomes == [(1, "failed"), (2, "cancelled")]
        assert "cancelled" in shown(app)[1] and "░" in shown(app)[1]


async def test_a_new_attempt_appears_on_the_open_timeline(tmp_path: Path) -> None:
    path = journal_with_story(tmp_path)
    app = RefineApp(journal=path, node=NODE, clock=lambda: T0 + 3 * H + 50)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        await select(pilot, "story")
        screen = await open_timeline(pilot)
        at(path, T0 + 3 * H + 20, settle("story", 3, "failed", "exit 3"))
        at(path, T0 + 3 * H + 30, start("story", "f"))
        await until(pilot, lambda: len(screen.chart.spans) == 4)
        outcomes = [b.span.outcome for b in screen.chart.laid.bars]
        assert outcomes == ["interrupted", "failed", "failed", "running"]


async def test_t_says_why_where_it_does_not_apply(tmp_path: Path) -> None:
    path = journal_with_story(tmp_path)
    app = RefineApp(journal=path, node=NODE)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        await pilot.press("w", "t")  # the Workers view: no Goal there
        await until(pilot, lambda: any("Timeline:" in n for n in notes(app)))
        assert not isinstance(app.screen, TimelineScreen)
