"""An attempt of this dashboard's node is judged gone only where that node keeps its process
records. Opened as another user (another default state dir) than the node's, a dashboard saw
every running attempt of the live node as gone: `needs cleanup`, an alert and the bell, about
live work (found in tmux, session 21). Now: this machine keeps the records when the node's lock
is held in its state dir, or when no node of that name is live; otherwise nothing here proves
an attempt gone, and the cleanup's evidence says why. Real journal (the demo's: nightly-report
is n1's running attempt with no process record), real lock holders, real app under Pilot."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from refine_tui.app import RefineApp
from refine_tui.widgets.keyed_table import KeyedTable
from store.errors import NoProcessRecordError
from store.host.node_lock import NodeLock
from store.journal.presence import Beat
from store.journal.sqlite import Journal
from store.model.execution import Run
from store.model.goals import Goals
from store.ops.bulk import Selection, plan_bulk, run_bulk
from store.ops.evidence import cleanup_evidence, needs_cleanup, records_here
from store.ops.operator import stop_goal
from tests.helpers import goal_states
from tests.helpers.dashboard import loaded, row_line, select
from tests.helpers.waits import until

HOLD = "from store.host.node_lock import NodeLock; import sys, time\n" \
    "assert NodeLock(__import__('pathlib').Path(sys.argv[1])).acquire()\n" \
    "print('held', flush=True); time.sleep(60)"  # fmt: skip


def beat(path: Path, kind: str) -> None:
    with Journal.open(path) as journal:
        journal.write_presence(Beat("n1", kind, "elsewhere", 4, "0.1.0", 3600))  # type: ignore[arg-type]


def test_a_node_lock_is_seen_held_without_being_taken(tmp_path: Path) -> None:
    lock = NodeLock(tmp_path)
    assert not lock.held_now()  # no file: no node ever served from here
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        assert lock.held_now() and lock.held_now()
        assert not NodeLock(tmp_path).acquire()  # the probes took nothing from its holder
    finally:
        holder.kill()
        holder.wait()
    assert not lock.held_now()
    mine = NodeLock(tmp_path)
    assert mine.acquire() and mine.held_now()  # this process's own lock counts too
    mine.release()


def test_a_live_node_with_its_lock_elsewhere_keeps_its_records_elsewhere(
    journal_path: Path,
) -> None:
    with Journal.open(journal_path) as journal:
        assert records_here(journal, "n1")  # no node of that name is live anywhere
    beat(journal_path, "start")
    with Journal.open(journal_path) as journal:
        assert not records_here(journal, "n1")
        assert not needs_cleanup(journal, _run(journal), node="n1")
        evidence = cleanup_evidence(journal, "nightly-report.r1", epoch=1, node="n1")
        assert "its records are not in this state dir" in evidence.sentence
        assert "cannot be checked from here" in evidence.sentence
        with pytest.raises(NoProcessRecordError, match="node n1 is live from another state dir"):
            stop_goal(journal, "nightly-report", node="n1", grace_s=0)
    beat(journal_path, "stop")
    with Journal.open(journal_path) as journal:
        assert records_here(journal, "n1")
        with pytest.raises(NoProcessRecordError, match="confirm cleanup instead"):
            stop_goal(journal, "nightly-report", node="n1", grace_s=0)
        assert needs_cleanup(journal, _run(journal), node="n1")
        evidence = cleanup_evidence(journal, "nightly-report.r1", epoch=1, node="n1")
        assert "no process record on node n1" in evidence.sentence


def test_a_batch_stop_says_why_there_is_no_record_as_the_single_stop_does(
    journal_path: Path,
) -> None:
    """`refine stop --node n1 --status running` (its plan, the dashboard's marks) refused each
    goal with "if its work has ended, confirm cleanup instead" while node n1 was live from
    another state dir (found from outside, session 23: on a fleet, from another machine, about
    live work); now the batch gives the single Stop's reason, in the dry run and the run."""
    beat(journal_path, "start")
    with Journal.open(journal_path) as journal:
        plan = plan_bulk(
            journal, "stop", node="n1", selection=Selection("n1", ("running",)), grace_s=0
        )
        refused = {p.goal_id: p for p in plan.goals if p.goal_id == "nightly-report"}
        assert refused["nightly-report"].code == "NO_PROCESS_RECORD"
        with pytest.raises(NoProcessRecordError) as single:
            stop_goal(journal, "nightly-report", node="n1", grace_s=0)
        assert refused["nightly-report"].why == single.value.message
        assert "node n1 is live from another state dir" in single.value.message
        done = run_bulk(journal, plan, reason=None, operator="op", grace_s=0)
        report = next(r for r in done.goals if r.goal_id == "nightly-report")
        assert "node n1 is live from another state dir" in report.text()
    beat(journal_path, "stop")  # no node of that name is live: the records would be here
    with Journal.open(journal_path) as journal:
        plan = plan_bulk(journal, "stop", node="n1", goal_ids=["nightly-report"], grace_s=0)
        assert plan.goals[0].why.endswith("if its work has ended, confirm cleanup instead")


def _run(journal: Journal) -> Run:
    goals = Goals(journal)
    goal = goals.read("nightly-report")
    assert goal is not None
    run = goals.current_run(goal)
    assert run is not None
    return run


async def test_the_dashboard_calls_nothing_gone_that_it_cannot_check(journal_path: Path) -> None:
    beat(journal_path, "start")  # n1 live, its lock held nowhere here
    app = RefineApp(journal=journal_path, node="n1")
    async with app.run_test(size=(100, 30)) as pilot:
        await loaded(pilot)
        row = app.goal_rows["nightly-report"]
        assert row.status == "running" and not row.needs_cleanup and row.note == ""
        await select(pilot, "nightly-report")
        await pilot.press("enter", "enter")  # its Attempts: the row line says what is known
        attempts = app.query_one("#attempts", KeyedTable)
        await until(pilot, lambda: attempts.keys() == ["1"])
        await until(pilot, lambda: "not observed from here" in row_line(app))
        assert "needs cleanup" not in row_line(app)
        await pilot.press("escape", "escape")
        beat(journal_path, "stop")  # the node exited: a missing record now means gone
        await pilot.pause(2.1)  # HERE_FOR_S: the last answer is kept that long
        await pilot.press("r")  # a full read (the liveness look comes every 5 s)
        await until(pilot, lambda: app.goal_rows["nightly-report"].needs_cleanup)
        assert app.goal_rows["nightly-report"].note == "needs cleanup"


def test_the_rule_on_each_backend(journal: Journal) -> None:
    """The same rule on SQLite and PostgreSQL: a running attempt with no record is gone only
    while no node of its name is live (no lock of it is held in this test's state dir)."""
    goals = Goals(journal)
    goal_states.add(goals, "g")
    goal_states.start(goals, "g")
    run = goals.current_run(goals.read("g"))  # type: ignore[arg-type]
    assert run is not None
    assert records_here(journal, "n1") and needs_cleanup(journal, run, node="n1")
    journal.write_presence(Beat("n1", "start", "elsewhere", 4, "0.1.0", 3600))
    assert not records_here(journal, "n1") and not needs_cleanup(journal, run, node="n1")
    journal.write_presence(Beat("n1", "stop", "elsewhere", 4, "0.1.0", 3600))
    assert records_here(journal, "n1") and needs_cleanup(journal, run, node="n1")
