"""Alerts at the dashboard (issue 25 part 3, DESIGN §16): a goal that becomes exhausted and an
attempt that becomes `needs cleanup` notify once and ring the bell (not with `quiet`); what was
already so when the dashboard opened (the demo journal has both) raises nothing."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

import refine_tui.alerts
import refine_tui.app
import refine_tui.dashboard
import refine_tui.live
from refine_tui.app import RefineApp
from refine_tui.demo import _finish
from refine_tui.textual_private import notifications
from store.journal.presence import MISSED_BEATS, Beat
from store.journal.sqlite import Journal
from store.model.goals import Goals
from tests.helpers.dashboard import end, loaded
from tests.helpers.waits import until
from tests.integration.test_app import start_loop_goal

NODE = "n1"
SIZE = (100, 30)
FAST_S = 0.05  # a heartbeat interval that goes silent at once
B_S = 0.5  # node b's: live 1.5 s after a beat, then silent
LOOK_S = 0.25  # the dashboard's look at presence (5 s as shipped), well inside b's live window


class BellCounting(RefineApp):
    CSS_PATH = str(Path(refine_tui.app.__file__).with_name("app.tcss"))  # not beside this file

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.bells = 0
        self.said: list[str] = []  # every alert, also those whose notification timed out

    def bell(self) -> None:
        self.bells += 1

    def notify(self, message: str, *, title: str = "", **options: Any) -> None:
        if title == "Alert":
            self.said.append(message)
        super().notify(message, title=title, **options)


def alerts(app: RefineApp) -> list[str]:
    return [n.message for n in notifications(app) if n.title == "Alert"]


def exhaust(path: Path, goal_id: str) -> None:
    with Journal.open(path) as journal:
        goals = Goals(journal)
        goals.create(
            goal_id=goal_id, title="flaky deploy", argv=["false"], node_id="n9", max_attempts=2
        )
        _finish(goals, goal_id, "w-x", [("failed", "exit 1")] * 2)


async def test_a_goal_becoming_exhausted_alerts_once_and_rings(journal_path: Path) -> None:
    app = BellCounting(journal=journal_path, node=NODE)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await pilot.pause(0.5)
        assert alerts(app) == [] and app.bells == 0  # deploy-stage was exhausted already
        exhaust(journal_path, "deploy-prod")
        await until(pilot, lambda: "deploy-prod" in app.goal_rows)
        await until(pilot, lambda: app.goal_rows["deploy-prod"].status == "exhausted")
        await until(pilot, lambda: len(alerts(app)) == 1)
        assert "goal deploy-prod is exhausted" in alerts(app)[0] and app.bells == 1
        await pilot.press("r")  # a full reload sees it again: said once
        await until(pilot, lambda: any("reloaded" in n.message for n in notifications(app)))
        assert len(alerts(app)) == 1 and app.bells == 1


async def test_many_goals_exhausted_together_are_one_alert_and_one_ring(
    journal_path: Path,
) -> None:
    """A bad deploy: five goals exhausted at once (committed while paused, when nothing is
    read: the resume reads them in one go) are one notification naming them, and one ring."""
    app = BellCounting(journal=journal_path, node=NODE)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await pilot.press("p")
        for n in range(5):
            exhaust(journal_path, f"deploy-{n}")
        await pilot.press("p")
        await until(pilot, lambda: len(app.said) == 1)
        assert app.said == [
            "5 goals are exhausted: deploy-0, deploy-1, deploy-2, deploy-3, deploy-4"
        ]
        await pilot.pause(refine_tui.alerts.GATHER_S + 0.2)
        assert len(app.said) == 1 and app.bells == 1


async def test_a_trickle_of_failures_is_said_at_a_pace_not_a_toast_each(journal_path: Path) -> None:
    """A goal exhausted every 0.3 s: a toast each (15 s each) stacked over the table, and the
    rack showed them 10 s late behind the older ones (found in tmux, one failure a second).
    The first is said at once; those raised within the pace after it, together, one ring."""
    app = BellCounting(journal=journal_path, node=NODE)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        exhaust(journal_path, "trickle-0")
        await until(pilot, lambda: len(app.said) == 1)
        for n in range(1, 6):
            exhaust(journal_path, f"trickle-{n}")
            await until(pilot, lambda n=n: f"trickle-{n}" in app.goal_rows)
            await pilot.pause(0.3)
        assert len(app.said) == 1  # the rest wait for the pace
        await until(pilot, lambda: len(app.said) == 2, timeout=refine_tui.alerts.PACE_S + 5)
        first, rest = app.said
        assert first.startswith("goal trickle-0 is exhausted")
        assert (
            rest == "5 goals are exhausted: trickle-1, trickle-2, trickle-3, trickle-4, trickle-5"
        )
        assert app.bells == 2


async def test_quiet_alerts_without_the_bell(journal_path: Path) -> None:
    app = BellCounting(journal=journal_path, node=NODE, quiet=True)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        exhaust(journal_path, "deploy-prod")
        await until(pilot, lambda: len(alerts(app)) == 1)
        assert app.bells == 0


async def test_an_attempt_needing_cleanup_alerts_once(
    journal_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dashboard looks at this node's processes every second here (5 s as shipped)."""
    monkeypatch.setattr(refine_tui.dashboard, "OBSERVE_INTERVAL_S", 1.0)
    proc = start_loop_goal(journal_path)
    app = BellCounting(journal=journal_path, node=NODE)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await loaded(pilot)
            assert app.goal_rows["nightly-report"].needs_cleanup  # already so: no alert
            assert not app.goal_rows["loop"].needs_cleanup
            end(proc)  # dies without a commit
            await until(pilot, lambda: app.goal_rows["loop"].needs_cleanup, timeout=15)
            await until(pilot, lambda: len(alerts(app)) == 1)
            assert "needs cleanup" in alerts(app)[0] and "loop" in alerts(app)[0]
            assert app.bells == 1
            await pilot.pause(refine_tui.dashboard.OBSERVE_INTERVAL_S + 1)  # another round: once
            assert len(alerts(app)) == 1 and app.bells == 1
    finally:
        end(proc)


def beat(path: Path, node_id: str, interval_s: float, kind: str = "start") -> None:
    with Journal.open(path) as journal:
        journal.write_presence(Beat(node_id, kind, f"host-{node_id}", 4, "0.1.0", interval_s))  # type: ignore[arg-type]


async def test_a_node_going_silent_alerts_once_and_rings(
    journal_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Node b beats, then stops beating: one alert naming it, one bell; a node silent before
    the dashboard opened (gone) raises nothing; b beating again and going silent again is a
    new silence. The dashboard looks at presence every LOOK_S here (5 s as shipped)."""
    monkeypatch.setattr(refine_tui.live, "PRESENCE_READ_S", LOOK_S)
    beat(journal_path, "gone", FAST_S)
    time.sleep(FAST_S * (MISSED_BEATS + 1))  # silent before the dashboard opens
    app = BellCounting(journal=journal_path, node=NODE)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        states = app.dashboard.alerts.node_states
        for said in (1, 2):
            deadline = time.monotonic() + 20
            while states.get("b") != "live":  # b beats until the dashboard has seen it live
                assert time.monotonic() < deadline, "node b never seen live"
                beat(journal_path, "b", B_S)
                await pilot.pause(LOOK_S)
            assert states["gone"] == "silent"
            # No more beats: silent 3 intervals after the last one, seen at the next look.
            await until(pilot, lambda n=said: len(app.said) == n, timeout=20)
            assert app.bells == said
            assert "node b (host-b) went silent" in app.said[-1]
            assert not any("gone" in a for a in app.said)
            # Another look: the same silence, not said again.
            await pilot.pause(refine_tui.live.PRESENCE_READ_S + 1)
            assert len(app.said) == said and app.bells == said
