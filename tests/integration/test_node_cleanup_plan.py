"""What confirming a whole node will do, said before anything is written (DESIGN §14, the
walkthrough's "30 attempts of node b7 (silent since 10:42:07): 27 goals will be requeued, 3
held"): the counts by each Goal's ending, and the refusals `refine cleanup --node` makes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from refine_tui.app import RefineApp
from refine_tui.screens.confirm import ConfirmModal
from refine_tui.textual_private import notifications
from refine_tui.widgets.keyed_table import KeyedTable
from store.errors import NodeLiveError, NodeNotFoundError, NodeUnseenError
from store.journal.presence import MISSED_BEATS, Beat
from store.journal.sqlite import Journal
from store.model.goals import Goals
from store.ops.node_cleanup import cleanup_node, plan_node_cleanup
from store.ops.operator import confirm_cleanup
from tests.helpers.dashboard import loaded
from tests.helpers.registry import record_worker
from tests.helpers.soak_recipes import unique_token
from tests.helpers.waits import until

FAST_S = 0.05  # a heartbeat interval that goes silent at once


def beat(journal: Journal, node_id: str, interval_s: float = 3600) -> None:
    journal.write_presence(Beat(node_id, "start", "host-b7", 4, "0.1.0", interval_s))


def running(goals: Goals, goal_id: str, *, redelivery: str = "safe", attempts: int = 3) -> None:
    goals.create(
        goal_id=goal_id,
        title=goal_id,
        node_id="b7",
        argv=["sleep", "600"],
        max_attempts=attempts,
        redelivery=redelivery,
    )
    goals.start(goal_id=goal_id, node_id="b7", worker=f"b7/{goal_id}", token=f"t-{goal_id}")


@pytest.fixture
def journal(tmp_path: Path) -> Journal:
    return Journal.open(tmp_path / "journal.db")


def test_the_plan_counts_each_ending_and_writes_nothing(journal: Journal) -> None:
    goals = Goals(journal)
    for goal_id in ("a", "b", "c"):
        running(goals, goal_id)
    running(goals, "ops", redelivery="operator")
    running(goals, "last", attempts=1)
    running(goals, "gone")
    goals.cancel(goal_id="gone", reason="not wanted", command_id="cancel-gone")
    beat(journal, "b7", FAST_S)
    time.sleep(FAST_S * (MISSED_BEATS + 1))
    before = journal.last_sequence()

    plan = plan_node_cleanup(journal, "b7")

    assert journal.last_sequence() == before
    assert plan.endings() == {"requeued": 3, "held": 1, "exhausted": 1, "cancelled": 1}
    text = plan.text(lambda _: "10:42:07")
    assert text == (
        "Confirm the end of 6 attempts of node b7 (silent since 10:42:07): 3 goals will be"
        " requeued, 1 held (redelivery: operator), 1 exhausted (all attempts used),"
        " 1 cancelled (a cancellation was pending)"
    )
    done = cleanup_node(journal, "b7", here="n1", operator="dana")
    assert {r.goal_id: r.outcome for r in done.reports}["ops"] == "held"
    assert len(done.reports) == 6
    assert done.text().splitlines()[-1] == (
        "4 goals now wait for node b7: `refine reassign --node b7 --status queued,held --to"
        " NODE` moves them"
    )  # requeued and held; the exhausted and the cancelled are done
    again = plan_node_cleanup(journal, "b7")
    assert again.text() == "node b7: nothing left to confirm (no attempt runs there)"


def test_one_goal_is_said_in_the_singular(journal: Journal) -> None:
    running(Goals(journal), "ops", redelivery="operator")
    beat(journal, "b7", FAST_S)
    time.sleep(FAST_S * (MISSED_BEATS + 1))
    text = plan_node_cleanup(journal, "b7").text(lambda _: "10:42:07")
    assert text == (
        "Confirm the end of 1 attempt of node b7 (silent since 10:42:07): 1 goal will be held"
        " (redelivery: operator)"
    )


def test_the_plan_refuses_as_the_cleanup_does(journal: Journal) -> None:
    running(Goals(journal), "a")
    with pytest.raises(NodeUnseenError):  # b7 never beat: nothing says it is gone
        plan_node_cleanup(journal, "b7")
    with pytest.raises(NodeNotFoundError):
        plan_node_cleanup(journal, "nowhere")
    beat(journal, "b7")
    before = journal.last_sequence()
    with pytest.raises(NodeLiveError):
        plan_node_cleanup(journal, "b7")
    assert journal.last_sequence() == before


# --- a stopped node's workers outlive it: what its own machine can see --------------------------


@pytest.fixture
def alive_here(tmp_path: Path, journal: Journal) -> Iterator[int]:
    """Node b7 stopped cleanly with two attempts: ``alive`` (its recorded process still runs on
    this machine, as a stopped node's worker does) and ``gone`` (no process left). Its pid."""
    goals = Goals(journal)
    running(goals, "alive")
    running(goals, "gone")
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True
    )
    try:
        record_worker(tmp_path / "journal.db", "b7", "alive.r1", proc, worker="b7/alive")
        here = os.uname().nodename  # b7 ran on this machine: its processes are here
        for kind in ("start", "stop"):
            journal.write_presence(Beat("b7", kind, here, 4, "0.1.0", 3600))  # type: ignore[arg-type]
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def test_the_plan_says_which_attempts_a_confirmation_will_refuse_here(
    journal: Journal, alive_here: int
) -> None:
    """Before: the plan promised "2 goals will be requeued" and the cleanup then refused one."""
    plan = plan_node_cleanup(journal, "b7", here="b7")
    by_goal = {a.goal.goal_id: a for a in plan.attempts}
    assert plan.expect(by_goal["alive"]) == "refused"
    assert plan.refused(by_goal["alive"]) == (
        f"PROCESS_ALIVE: process {alive_here} of attempt 1 is alive (same pid and start time):"
        " stop the goal instead of confirming cleanup"
    )
    assert plan.expect(by_goal["gone"]) == "requeued" and plan.refused(by_goal["gone"]) is None
    assert plan.endings() == {"requeued": 1}
    assert plan.text(lambda _: "10:42:07") == (
        "Confirm the end of 2 attempts of node b7 (stopped since 10:42:07): 1 goal will be"
        " requeued, 1 refused: its process is alive on this machine (stop that goal instead)"
    )
    # From another node's machine its records are not here: nothing is said refused.
    assert plan_node_cleanup(journal, "b7", here="c1").alive == ()

    done = cleanup_node(journal, "b7", here="b7", operator="dana")
    assert {r.goal_id: r.outcome for r in done.reports}["alive"] == "refused"
    goals = Goals(journal)
    assert [goals.read(g).status for g in ("alive", "gone")] == ["running", "queued"]  # type: ignore[union-attr]


def test_the_dry_run_says_the_refusal_with_its_reason(tmp_path: Path, alive_here: int) -> None:
    location = str(tmp_path / "journal.db")
    proc = subprocess.run(
        [sys.executable, "-m", "refine_tui.cli", "--journal", location, "--node", "b7",
         "cleanup", "--node", "b7", "--dry-run", "--json"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    expect = {a["goal_id"]: (a["expect"], a["why"]) for a in json.loads(proc.stdout)["cleanup"]}
    assert expect["gone"] == ("requeued", None)
    assert expect["alive"][0] == "refused"
    assert expect["alive"][1].startswith(f"PROCESS_ALIVE: process {alive_here} of attempt 1")


async def test_x_on_a_node_whose_every_attempt_still_runs_here_asks_nothing(
    tmp_path: Path, journal: Journal, alive_here: int
) -> None:
    confirm_cleanup(journal, "gone.r1", epoch=1, node="b7", operator="dana")  # alive is left
    app = RefineApp(journal=tmp_path / "journal.db", node="b7")
    async with app.run_test(size=(100, 30)) as pilot:
        await loaded(pilot)
        await pilot.press("n")
        nodes = app.query_one("#nodes", KeyedTable)
        await until(pilot, lambda: "b7" in set(nodes.keys()))
        nodes.select("b7")
        await pilot.pause()
        await pilot.press("x")
        said = "node b7: 1 refused: its process is alive on this machine (stop that goal instead)"
        await until(pilot, lambda: said in [n.message for n in notifications(app)])
        assert not isinstance(app.screen, ConfirmModal)
        assert app.goal_rows["alive"].status == "running"


def test_an_attempt_whose_worker_runs_here_is_said_refused_from_any_node_name(
    journal: Journal, alive_here: int
) -> None:
    """The cleanup also refuses an attempt whose worker (found by its token: recorded or not)
    runs on this machine, whatever node name the operator uses here; the plan says so too."""
    goal_id = f"w-{unique_token()[:16]}"  # its worker's token: no other test's worker has it
    running(Goals(journal), goal_id)
    code = "import sys, time; print(flush=True); time.sleep(120)"
    argv = [sys.executable, "-c", code, "store.worker", "--node", "b7", "--token", goal_id]
    worker = subprocess.Popen(argv, start_new_session=True, stdout=subprocess.PIPE, text=True)
    try:
        assert worker.stdout is not None and worker.stdout.readline() == "\n"
        plan = plan_node_cleanup(journal, "b7", here="c1")  # b7's records are not c1's
        assert dict(plan.alive) == {
            goal_id: f"PROCESS_ALIVE: the worker of attempt 1 (pid {worker.pid}) is alive on"
            " this machine: stop the goal (or wait for it to start) instead of confirming cleanup"
        }
        done = cleanup_node(journal, "b7", here="c1", operator="dana")
        refused = {r.goal_id for r in done.reports if r.outcome == "refused"}
        assert refused == {goal_id}
    finally:
        worker.kill()
        worker.wait(timeout=10)
        worker.stdout.close()  # type: ignore[union-attr]


def test_a_node_that_stopped_cleanly_on_another_machine_is_confirmed_with_a_warning(
    journal: Journal,
) -> None:
    """A node's exit leaves its workers running, and from another machine nothing can see
    them: the plan (the dashboard's confirmation, the dry run) says so; it was the same as
    for a dead machine's."""
    running(Goals(journal), "a")
    for host, unseen in (("host-b7", True), (os.uname().nodename, False)):
        for kind in ("start", "stop"):
            journal.write_presence(Beat("b7", kind, host, 4, "0.1.0", 3600))  # type: ignore[arg-type]
        plan = plan_node_cleanup(journal, "b7", dry_run=True, here="n1")
        assert (plan.node.state, plan.unseen) == ("stopped", unseen)
        warning = (
            "; node b7 stopped cleanly on host host-b7, and its workers outlive it: this"
            " machine cannot see whether they still run, so confirm only once their work has"
            " ended (on host-b7 the cleanup refuses the attempts still running)"
        )
        assert plan.text().endswith(warning) is unseen, plan.text()
    journal.write_presence(Beat("b7", "start", "host-b7", 4, "0.1.0", FAST_S))
    time.sleep(FAST_S * (MISSED_BEATS + 2))
    plan = plan_node_cleanup(journal, "b7", dry_run=True, here="n1")
    assert plan.node.state == "silent" and not plan.unseen  # a dead machine's: no warning
