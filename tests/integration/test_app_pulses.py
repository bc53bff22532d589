"""Pulses above the Goals table (DESIGN §17), through Pilot: they count what the journal holds
for the last hour, follow a new completion, and are drawn (all zero) for a new journal."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from textual.app import App, ComposeResult
from textual.widgets import Label, Sparkline

import refine_tui.app
from refine_tui.app import RefineApp
from refine_tui.widgets.pulses import Pulses
from store.journal.sqlite import Journal
from store.model.goals import Goals
from store.ops.pulses import read_pulses
from tests.helpers.dashboard import commit_in_process, loaded
from tests.helpers.waits import until

SIZE = (100, 30)


def total(app: RefineApp, kind: str) -> int:
    return sum(app.dashboard.query_one(f"#pulse-{kind}", Sparkline).data or [])


def expected(path: Path) -> dict[str, int]:
    with Journal.open(path, read_only=True) as journal:
        series = read_pulses(journal, time.time()).series(time.time())
    return {kind: sum(counts) for kind, counts in series.items()}


async def test_pulses_count_the_last_hour_and_follow_a_completion(journal_path: Path) -> None:
    want = expected(journal_path)
    # The demo: 7 claims; build-docs, lint, unit-tests' second: completed; 4 failed or interrupted
    assert want["starts"] > 0 and want["completions"] == 3 and want["failures"] > 0
    app = RefineApp(journal=journal_path, node="n1")
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await until(pilot, lambda: {k: total(app, k) for k in want} == want)
        now = app.dashboard.query_one("#pulse-completions-now", Label)
        assert "completed" in str(now.render())
        commit_in_process(
            journal_path,
            "goals.create(goal_id='quick', title='q', argv=['true'], node_id='n1')\n"
            "s = goals.start(goal_id='quick', node_id='n1', worker='w', token='t')\n"
            "g = goals.read('quick')\n"
            "goals.settle(goal_id='quick', run_id=g.run_id, epoch=s.attempt.epoch,"
            " outcome='completed')\n",
        )
        await until(pilot, lambda: total(app, "completions") == 4)
        assert total(app, "starts") == want["starts"] + 1


async def test_pulses_are_drawn_empty_for_a_new_journal(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    Journal.open(path).close()
    app = RefineApp(journal=path, node="n1")
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.header_state.state == "live")
        await until(pilot, lambda: app.dashboard.pulses_line.series != {})
        assert app.dashboard.pulses_line.display
        assert all(total(app, k) == 0 for k in ("starts", "completions", "failures"))


async def test_pulses_hide_on_a_short_terminal(journal_path: Path) -> None:
    app = RefineApp(journal=journal_path, node="n1")
    async with app.run_test(size=(60, 16)) as pilot:
        await loaded(pilot)
        await pilot.pause(1.2)
        assert not app.dashboard.pulses_line.display


def two_goals(path: Path) -> None:
    """alpha: one attempt, completed; beta: three attempts, each failed (exhausted); gamma:
    queued, never started (yet)."""
    with Journal.open(path) as journal:
        goals = Goals(journal)
        for gid in ("alpha", "beta", "gamma"):
            goals.create(goal_id=gid, title=f"{gid} job", node_id="n1", argv=["true"])
        goals.start(goal_id="alpha", node_id="n1", worker="w", token="t1")
        goals.settle(goal_id="alpha", run_id="alpha.r1", epoch=1, outcome="completed")
        for epoch in (1, 2, 3):
            goals.start(goal_id="beta", node_id="n1", worker="w", token=f"t{epoch}")
            goals.settle(
                goal_id="beta", run_id="beta.r1", epoch=epoch, outcome="failed", reason="exit 1"
            )


def counted(app: RefineApp) -> dict[str, int]:
    return {k: total(app, k) for k in ("starts", "completions", "failures")}


async def test_the_filter_narrows_the_pulses_to_the_goals_it_shows(tmp_path: Path) -> None:
    path = tmp_path / "two.db"
    two_goals(path)
    app = RefineApp(journal=path, node="n1")
    narrowed = lambda: app.dashboard.query_one("#pulse-narrowed", Label).display  # noqa: E731
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await until(pilot, lambda: counted(app) == {"starts": 4, "completions": 1, "failures": 3})
        assert not narrowed()
        await pilot.press("slash", *"alpha", "enter")
        await until(pilot, lambda: counted(app) == {"starts": 1, "completions": 1, "failures": 0})
        assert narrowed() and app.header_state.filter == "alpha"
        # gamma, which the filter does not show, runs and completes: the pulses do not move.
        commit_in_process(
            path,
            "s = goals.start(goal_id='gamma', node_id='n1', worker='w', token='t')\n"
            "goals.settle(goal_id='gamma', run_id='gamma.r1', epoch=s.attempt.epoch,"
            " outcome='completed')\n",
        )
        with Journal.open(path, read_only=True) as journal:
            last = journal.last_sequence()
        await until(pilot, lambda: app.header_state.last_sequence == last)
        await pilot.pause(1.2)  # a tick: what the read brought is drawn
        assert counted(app) == {"starts": 1, "completions": 1, "failures": 0}
        await pilot.press("escape")  # clears the filter: the totals again, gamma's included
        await until(pilot, lambda: counted(app) == {"starts": 5, "completions": 2, "failures": 3})
        assert not narrowed()


async def test_without_pulses_none_are_read_or_drawn(journal_path: Path) -> None:
    """``RefineApp(pulses=False)`` (``refine tui --no-pulses``): no line, no reads for it."""
    app = RefineApp(journal=journal_path, node="n1", pulses=False)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await pilot.pause(1.2)  # a tick
        assert not app.dashboard.pulses_line.display
        assert app.live.pulses is None and app.dashboard.pulses_line.series == {}


def test_read_pulses_stops_at_the_sequence_a_reader_has_seen(tmp_path: Path) -> None:
    """The dashboard reads the hour after its first rows: commits made meanwhile come with its
    next poll, and are counted once (then), not also by that read."""
    path = tmp_path / "two.db"
    two_goals(path)
    with Journal.open(path, read_only=True) as journal:
        claims = [e for e in journal.events_after(0) if e.type == "attempt.claimed"]
        upto = claims[1].sequence  # alpha's claim and beta's first
        now = time.time()
        seen = read_pulses(journal, now, upto=upto).series(now)
        every = read_pulses(journal, now).series(now)
    assert sum(seen["starts"]) == 2 and sum(seen["completions"]) == 1
    assert sum(every["starts"]) == 4 and sum(every["failures"]) == 3


class PulsesApp(App[None]):
    CSS_PATH = str(Path(refine_tui.app.__file__).with_name("app.tcss"))

    def compose(self) -> ComposeResult:
        yield Pulses(id="pulses")


async def test_a_new_count_of_the_same_width_repaints_without_a_layout() -> None:
    """Each minute moves every series on: a layout of the screen (and a repaint of all of it)
    only when a count's words change width, not for every new count."""
    app = PulsesApp()
    layouts: list[bool] = []
    async with app.run_test(size=(100, 3)) as pilot:
        pulses = app.query_one(Pulses)
        now = app.query_one("#pulse-starts-now", Label)
        refresh = now.refresh

        def refreshing(*regions: Any, **flags: Any) -> Any:
            layouts.append(bool(flags.get("layout")))
            return refresh(*regions, **flags)

        now.refresh = refreshing  # type: ignore[method-assign]
        zero = {kind: [0] * 60 for kind in ("starts", "completions", "failures")}
        pulses.show(zero)
        await pilot.pause()
        layouts.clear()
        sparkline = app.query_one("#pulse-starts", Sparkline).region
        pulses.show({**zero, "starts": [0] * 59 + [7]})
        await pilot.pause()
        assert "started   7/m" in str(now.render())
        assert layouts and not any(layouts)  # repainted, no layout
        layouts.clear()
        pulses.show({**zero, "starts": [0] * 59 + [1234]})  # wider: the sparkline moves right
        await pilot.pause()
        assert "started 1234/m" in str(now.render()) and layouts[0]
        assert app.query_one("#pulse-starts", Sparkline).region.x == sparkline.x + 1
