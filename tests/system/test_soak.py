"""The soak (issue 6), bounded for CI: two real nodes on one journal, random recipes (succeed,
fail, hang, ignore SIGTERM, fork grandchildren), random operator Stop / Cancel / Confirm cleanup /
Release, random SIGKILL of nodes and workers and restarts.

At the end: `refine check` is clean, every goal is terminal or held (the drain cancels the rest),
no run is left running, no process of ours is left, the decoys (processes outside our
records) are alive and never received a signal, and the dashboard, open all along, shows
exactly the journal's final state. The soak runs until its campaign is done (``MIN_GOALS``
goals, every kind of crash and operator action: ``Soak.campaign_done``), however long that takes
on the machine; ``REFINE_SOAK_SECONDS`` makes it run at least that long; ``python
scripts/soak.py`` runs the long one and prints the figures.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from refine_tui import cli
from store.journal.sqlite import Journal
from tests.helpers.soak_recipes import refine_json
from tests.helpers.soak_run import MIN_GOALS, cli_actions, run_soak

SECONDS = float(os.environ.get("REFINE_SOAK_SECONDS", "0"))
SEED = int(os.environ.get("REFINE_SOAK_SEED", "20261129"))


@pytest.mark.slow
async def test_soak_two_nodes_faults_and_operators(tmp_path: Path) -> None:
    from refine_tui.app import RefineApp
    from refine_tui.rows import RECENT_LIMIT

    path = tmp_path / "soak" / "journal.db"
    # The dashboard follows the whole soak (it starts before the journal exists).
    app = RefineApp(journal=path, node="n1", operator="watcher")
    async with app.run_test(size=(120, 40)) as pilot:
        figures = await asyncio.to_thread(
            run_soak, tmp_path, seconds=SECONDS, seed=SEED, drain_s=40.0
        )
        print("\n" + figures.text())
        with Journal.open(path, read_only=True) as journal:
            last = journal.last_sequence()
        deadline = asyncio.get_running_loop().time() + 20
        while app.header_state.last_sequence != last:
            assert asyncio.get_running_loop().time() < deadline, "the dashboard never caught up"
            await pilot.pause(0.05)
        await pilot.pause()
        goals = {g["goal_id"]: g for g in refine_json(path, "goals")}  # type: ignore[union-attr]
        runs = {r["run_id"]: r for r in refine_json(path, "runs")}  # type: ignore[union-attr]
        shown = dict(app.goal_rows)

    assert figures.violations == []
    assert figures.unsettled == []
    assert figures.still_running == []
    assert figures.decoys_alive and not any(figures.decoy_signals.values())
    assert set(figures.statuses) <= {"completed", "exhausted", "cancelled", "held"}
    # The campaign really happened: goals, crashes, restarts and every kind of operator action.
    assert figures.goals >= MIN_GOALS
    assert figures.kills["node"] >= 1 and figures.kills["worker"] >= 1 and figures.restarts >= 1
    assert {"stop", "cancel", "release"} <= set(figures.actions) and cli_actions(figures) >= 1
    assert cli.main(["--journal", str(path), "check"]) == 0
    # The dashboard never lies: every row it shows is the journal's final state.
    if len(goals) <= RECENT_LIMIT:
        assert set(shown) == set(goals)
    for goal_id, row in shown.items():
        goal, run = goals[goal_id], runs[goals[goal_id]["run_id"]]
        attempts = f"{len(run['attempts'])}/{run['budget']['max_attempts']}"
        assert (row.status, row.round, row.node_id, row.attempts) == (
            goal["status"],
            goal["round"],
            goal["node_id"],
            attempts,
        )
