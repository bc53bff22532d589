"""The soak (issue 6), bounded for CI: two real nodes on one journal, random recipes (succeed,
fail, hang, ignore SIGTERM, fork grandchildren), random operator Stop / Cancel / Confirm cleanup /
Release, random SIGKILL of nodes and workers and restarts.

At the end: `refine check` is clean, every goal is terminal or held (the drain cancels the rest),
no run is left running, no process of ours is left, and the decoys (processes outside our
records) are alive and never received a signal. ``REFINE_SOAK_SECONDS`` makes it longer;
``python scripts/soak.py`` runs the long one and prints the figures.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers.soak_run import run_soak

from refine_tui import cli

SECONDS = float(os.environ.get("REFINE_SOAK_SECONDS", "45"))
SEED = int(os.environ.get("REFINE_SOAK_SEED", "20261129"))


@pytest.mark.slow
def test_soak_two_nodes_faults_and_operators(tmp_path: Path) -> None:
    figures = run_soak(tmp_path, seconds=SECONDS, seed=SEED, drain_s=40.0)
    print("\n" + figures.text())
    assert figures.violations == []
    assert figures.unsettled == []
    assert figures.still_running == []
    assert figures.decoys_alive and not any(figures.decoy_signals.values())
    assert set(figures.statuses) <= {"completed", "exhausted", "cancelled", "held"}
    # The campaign really happened: goals, crashes and every kind of operator action.
    assert figures.goals >= 20 and figures.kills["node"] >= 1 and figures.kills["worker"] >= 1
    assert {"stop", "cancel"} <= set(figures.actions)
    assert cli.main(["--journal", str(tmp_path / "soak" / "journal.db"), "check"]) == 0
