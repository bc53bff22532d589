"""Operator commands with real processes: Stop kills the recorded process group and requeues at
the versions read, Cancel writes intent first, Confirm cleanup needs the process provably gone,
and every refusal writes (and signals) nothing."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from store.errors import (
    GoalStateError,
    GoalTerminalError,
    InvalidInputError,
    JournalReadOnlyError,
    NoActiveAttemptError,
    NoProcessRecordError,
    NotThisNodeError,
    ProcessAliveError,
    RefineError,
    StaleAttemptError,
)
from store.host.processes import ProcessRecord, ProcessRegistry
from store.journal.sqlite import Journal
from store.model.goals import Goals
from store.ops.check import check_journal
from store.ops.operator import (
    cancel_goal,
    cleanup_evidence,
    confirm_cleanup,
    describe_cancel,
    describe_stop,
    needs_cleanup,
    release_goal,
    stop_goal,
)
from tests.helpers.soak_recipes import unique_token

# A worker stand-in: a process group leader with a grandchild; it prints the grandchild's pid.
# With "ignore" it ignores SIGTERM (so Stop needs SIGKILL); with "fail"/"cancel" it changes the
# Goal on SIGTERM before it exits (the Goal changed while it was being stopped).
WORKER = """
import signal, subprocess, sys, time
journal, goal_id, mode = sys.argv[1:4]
def on_term(*_):
    from store.model.goals import Goals
    from store.journal.sqlite import Journal
    with Journal.open(journal) as j:
        goals = Goals(j)
        if mode == "fail":
            goals.settle(goal_id=goal_id, run_id=goal_id + ".r1", epoch=1, outcome="failed",
                         reason="terminated")
        else:
            goals.cancel(goal_id=goal_id, reason="meanwhile", command_id="op:cancel:meanwhile")
    sys.exit(0)
if mode == "ignore":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
elif mode in ("fail", "cancel"):
    import store.model.goals, store.journal.sqlite  # imported before "ready": the handler is quick
    signal.signal(signal.SIGTERM, on_term)
child = subprocess.Popen(["sleep", "60"])
print(child.pid, flush=True)
time.sleep(60)
"""


class Spawned:
    def __init__(self, proc: subprocess.Popen[str], grandchild: int, record: ProcessRecord):
        self.proc, self.grandchild, self.record = proc, grandchild, record
        self.grandchild_created = psutil.Process(grandchild).create_time()


def alive(pid: int, create_time: float) -> bool:
    try:
        p = psutil.Process(pid)
        return p.create_time() == create_time and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_dead(pid: int, create_time: float, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while alive(pid, create_time) and time.monotonic() < deadline:
        time.sleep(0.02)
    return not alive(pid, create_time)


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator:
    spawned: list[subprocess.Popen[str]] = []

    def start_worker(
        journal: Journal,
        goal_id: str,
        epoch: int = 1,
        *,
        node: str = "n1",
        mode: str = "plain",
        record: bool = True,
        log: str = "",
    ) -> Spawned:
        proc = subprocess.Popen(
            [sys.executable, "-c", WORKER, journal.location, goal_id, mode],
            start_new_session=True,
            stdout=subprocess.PIPE,
            text=True,
        )
        spawned.append(proc)
        grandchild = int(proc.stdout.readline())
        registry = ProcessRegistry.for_journal(journal, node)
        run_id = f"{goal_id}.r1"
        rec = ProcessRecord(
            node_id=node,
            pid=proc.pid,
            create_time=psutil.Process(proc.pid).create_time(),
            pgid=os.getpgid(proc.pid),
            run_id=run_id,
            epoch=epoch,
            worker=f"{node}:w{epoch}",
            argv=tuple(proc.args),
            log_path=str(registry.log_path(run_id, epoch)),
            started_at=time.time(),
        )
        if record:
            registry.record(rec)
            if log:
                Path(rec.log_path).write_text(log)
        return Spawned(proc, grandchild, rec)

    yield start_worker
    for proc in spawned:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            proc.wait(timeout=5)


def running_goal(journal: Journal, goal_id: str = "build", *, node: str = "n1", **kw) -> Goals:
    goals = Goals(journal)
    goals.create(goal_id=goal_id, title="Build", node_id=node, argv=["make"], **kw)
    goals.start(goal_id=goal_id, node_id=node, worker=f"{node}:w1", token=f"{goal_id}-1")
    return goals


def refused(journal: Journal, error: type[RefineError], call) -> RefineError:
    before = journal.last_sequence()
    with pytest.raises(error) as info:
        call()
    assert journal.last_sequence() == before
    return info.value


def test_cleanup_evidence_away_from_the_goals_node_claims_no_record_it_cannot_see(
    journal: Journal,
) -> None:
    running_goal(journal, node="n2")  # n2's records live on n2's machine, not here
    evidence = cleanup_evidence(journal, "build.r1", epoch=1, node="n1")
    assert evidence.record is None and not evidence.same_process_alive
    assert "it runs on node n2: no process record can be checked from here" in evidence.sentence
    assert "no process record on node n2" not in evidence.sentence
    on_its_node = cleanup_evidence(journal, "build.r1", epoch=1, node="n2")
    assert "no process record on node n2" in on_its_node.sentence


def test_stop_kills_the_recorded_group_and_requeues(journal: Journal, spawn) -> None:
    goals = running_goal(journal, max_attempts=5)
    worker = spawn(journal, "build")
    sentence = describe_stop(journal, "build", node="n1")
    assert sentence == (
        f"Stop attempt 1 of run build.r1 on node n1: SIGTERM to process group"
        f" {worker.record.pgid}, SIGKILL after 5 s; the goal will be requeued (attempt 2 of 5)"
    )
    report = stop_goal(journal, "build", node="n1", operator="dana", grace_s=5)
    assert (report.action, report.process, report.signals) == ("stop", "exited", ("SIGTERM",))
    assert report.requeued and not report.held and report.outcome == "requeued"
    assert not alive(worker.record.pid, worker.record.create_time)
    assert wait_dead(worker.grandchild, worker.grandchild_created)  # the whole group died
    run = goals.current_run(goals.read("build"))
    assert run.status == "queued"
    assert run.attempts[0].state == "interrupted"
    assert run.attempts[0].cleanup == {"epoch": 1, "confirmed_by": "dana@n1", "method": "sigterm"}
    again = goals.start(goal_id="build", node_id="n1", worker="n1:w2", token="build-2")
    assert again.goal.status == "running" and again.attempt.epoch == 2
    assert report.to_json()["signals"] == ["SIGTERM"]
    assert check_journal(journal).clean


def test_stop_sends_sigkill_after_the_grace(journal: Journal, spawn) -> None:
    goals = running_goal(journal)
    worker = spawn(journal, "build", mode="ignore")
    report = stop_goal(journal, "build", node="n1", operator="dana", grace_s=0.3)
    assert report.process == "killed" and report.signals == ("SIGTERM", "SIGKILL")
    assert wait_dead(worker.grandchild, worker.grandchild_created)
    cleanup = goals.current_run(goals.read("build")).attempts[0].cleanup
    assert cleanup["method"] == "sigkill"


def test_stop_requeues_nothing_when_the_goal_changed_meanwhile(journal: Journal, spawn) -> None:
    goals = running_goal(journal)
    spawn(journal, "build", mode="fail")  # on SIGTERM the worker reports failure first
    report = stop_goal(journal, "build", node="n1", operator="dana", grace_s=5)
    assert report.outcome == "conflict" and not report.requeued
    assert "changed meanwhile" in report.why and "nothing was requeued" in report.why
    run = goals.current_run(goals.read("build"))
    assert [a.state for a in run.attempts] == ["failed"]  # the owner's report stands
    assert check_journal(journal).clean


def test_stop_ends_a_cancellation_that_arrived_meanwhile(journal: Journal, spawn) -> None:
    goals = running_goal(journal)
    spawn(journal, "build", mode="cancel")  # on SIGTERM someone cancels the goal
    report = stop_goal(journal, "build", node="n1", operator="dana", grace_s=5)
    assert report.outcome == "cancelled" and not report.requeued
    goal = goals.read("build")
    run = goals.current_run(goal)
    assert goal.status == "cancelled" and run.status == "cancelled"
    assert run.cancel_reason == "meanwhile"
    assert run.attempts[0].cleanup["confirmed_by"] == "dana@n1"
    assert check_journal(journal).clean


def test_cancel_of_a_queued_goal_cancels_its_run_at_once(journal: Journal) -> None:
    goals = Goals(journal)
    goals.create(goal_id="idle", title="Idle", node_id="n1", argv=["true"])
    assert "nothing is running" in describe_cancel(journal, "idle", node="n1")
    report = cancel_goal(journal, "idle", reason="not needed", node="n1", operator="dana")
    assert (report.outcome, report.process, report.signals) == ("cancelled", "none", ())
    goal = goals.read("idle")
    assert goal.status == "cancelled" and goals.current_run(goal).status == "cancelled"
    refused(
        journal,
        GoalTerminalError,
        lambda: cancel_goal(journal, "idle", reason="again", node="n1", operator="dana"),
    )


def test_cancel_of_a_running_goal_here_stops_it_and_records_cancel(journal: Journal, spawn) -> None:
    goals = running_goal(journal)
    worker = spawn(journal, "build")
    assert f"SIGTERM to process group {worker.record.pgid}" in describe_cancel(
        journal, "build", node="n1"
    )
    report = cancel_goal(journal, "build", reason="wrong branch", node="n1", operator="dana")
    assert report.outcome == "cancelled" and report.process == "exited"
    assert wait_dead(worker.grandchild, worker.grandchild_created)
    goal = goals.read("build")
    run = goals.current_run(goal)
    assert goal.status == "cancelled" and goal.cancel_reason == "wrong branch"
    assert run.status == "cancelled" and run.cancel_reason == "wrong branch"
    assert run.attempts[0].cleanup["confirmed_by"] == "dana@n1"
    types = [e.type for e in journal.history("run:build.r1", 0, 100)]
    assert types[-3:] == ["run.cancel-requested", "attempt.interrupted", "run.cancelled"]
    assert check_journal(journal).clean


def test_cancel_of_another_nodes_goal_writes_intent_only(journal: Journal, spawn) -> None:
    goals = running_goal(journal, node="n2")
    worker = spawn(journal, "build", node="n2")
    assert "runs on node n2, whose scheduler stops it" in describe_cancel(
        journal, "build", node="n1"
    )
    report = cancel_goal(journal, "build", reason="not ours", node="n1", operator="dana")
    assert (report.outcome, report.process) == ("cancel-requested", "other-node")
    assert alive(worker.record.pid, worker.record.create_time)  # untouched
    goal = goals.read("build")
    run = goals.current_run(goal)
    assert goal.status == "cancelled" and run.status == "running"
    assert run.cancel_requested == {"reason": "not ours"}
    refused(
        journal, NotThisNodeError, lambda: stop_goal(journal, "build", node="n1", operator="dana")
    )
    error = refused(
        journal,
        GoalTerminalError,
        lambda: cancel_goal(journal, "build", reason="again", node="n1", operator="dana"),
    )
    assert "still runs: stop it on node n2" in error.message
    # on its own node, Stop ends the pending cancellation: cancel with cleanup, no requeue
    assert "pending cancellation will be recorded" in describe_stop(journal, "build", node="n2")
    report = stop_goal(journal, "build", node="n2", operator="dana")
    assert report.outcome == "cancelled" and not report.requeued
    assert wait_dead(worker.grandchild, worker.grandchild_created)
    run = goals.current_run(goals.read("build"))
    assert run.status == "cancelled" and run.cancel_reason == "not ours"
    assert run.attempts[0].cleanup["confirmed_by"] == "dana@n2"
    assert check_journal(journal).clean


def test_operator_redelivery_holds_after_stop_and_cleanup(journal: Journal, spawn) -> None:
    goals = running_goal(journal, redelivery="operator", max_attempts=5)
    spawn(journal, "build")
    assert "held until an operator releases it" in describe_stop(journal, "build", node="n1")
    report = stop_goal(journal, "build", node="n1", operator="dana")
    assert report.held and not report.requeued and goals.read("build").status == "held"
    refused(
        journal,
        GoalStateError,
        lambda: goals.start(goal_id="build", node_id="n1", worker="w", token="early"),
    )
    released = release_goal(journal, "build", operator="dana")
    assert released.outcome == "released" and goals.read("build").status == "queued"
    goals.start(goal_id="build", node_id="n1", worker="n1:w2", token="build-2")
    # attempt 2's worker vanished without a record: confirm cleanup holds it again
    evidence = cleanup_evidence(journal, "build.r1", epoch=2, node="n1")
    assert evidence.ending.startswith("the goal will be held until an operator releases it")
    report = confirm_cleanup(journal, "build.r1", epoch=2, node="n1", operator="dana")
    assert report.held and report.process == "no-record"
    attempt = goals.current_run(goals.read("build")).attempts[1]
    assert attempt.cleanup == {
        "epoch": 2,
        "confirmed_by": "dana@n1",
        "method": "operator-confirmed",
    }
    assert goals.read("build").status == "held"
    assert release_goal(journal, "build", operator="dana").requeued
    assert check_journal(journal).clean


def test_confirm_cleanup_needs_the_process_provably_gone(journal: Journal, spawn) -> None:
    goals = running_goal(journal)
    worker = spawn(journal, "build", log="compiling\nstuck\n")
    run = goals.current_run(goals.read("build"))
    assert not needs_cleanup(journal, run, node="n1")
    evidence = cleanup_evidence(journal, "build.r1", epoch=1, node="n1")
    assert evidence.same_process_alive and "alive with the same start time" in evidence.sentence
    error = refused(
        journal,
        ProcessAliveError,
        lambda: confirm_cleanup(journal, "build.r1", epoch=1, node="n1", operator="d"),
    )
    assert "stop" in error.message
    refused(
        journal,
        StaleAttemptError,
        lambda: confirm_cleanup(journal, "build.r1", epoch=2, node="n1", operator="d"),
    )
    # the worker dies on its own (a reboot, say): its record now proves it gone
    os.killpg(worker.record.pgid, signal.SIGKILL)
    worker.proc.wait(timeout=5)
    assert needs_cleanup(journal, run, node="n1")
    assert not needs_cleanup(journal, run, node="n2")  # another node's attempt is not ours
    evidence = cleanup_evidence(journal, "build.r1", epoch=1, node="n1")
    assert not evidence.same_process_alive and evidence.record == worker.record
    assert evidence.log_tail == ["compiling", "stuck"] and evidence.worker == "n1:w1"
    assert evidence.attempt_started_at is not None and evidence.last_output_age_s is not None
    assert "no process with that pid and start time" in evidence.sentence
    assert evidence.ending == "the goal will be requeued (attempt 2 of 3)"
    report = confirm_cleanup(journal, "build.r1", epoch=1, node="n1", operator="dana")
    assert report.requeued and report.process == "not-running"
    assert goals.read("build").status == "queued"
    refused(
        journal,
        NoActiveAttemptError,
        lambda: confirm_cleanup(journal, "build.r1", epoch=1, node="n1", operator="d"),
    )


def test_a_pid_with_another_create_time_is_never_signalled(journal: Journal, spawn) -> None:
    goals = running_goal(journal)
    worker = spawn(journal, "build", record=False)
    # the record names this live pid, but with another create time: pid reuse
    fake = ProcessRecord(**{**worker.record.__dict__, "create_time": worker.record.create_time - 7})
    ProcessRegistry.for_journal(journal, "n1").record(fake)
    assert "no longer running" in describe_stop(journal, "build", node="n1")
    report = stop_goal(journal, "build", node="n1", operator="dana", grace_s=0.2)
    assert report.process == "mismatch" and report.signals == ()
    assert alive(worker.record.pid, worker.record.create_time)
    assert alive(worker.grandchild, worker.grandchild_created)
    cleanup = goals.current_run(goals.read("build")).attempts[0].cleanup
    assert cleanup["method"] == "process-exited" and report.requeued


def test_every_refusal_writes_and_signals_nothing(journal: Journal, spawn, tmp_path) -> None:
    goals = running_goal(journal)
    worker = spawn(journal, "build")
    goals.create(goal_id="idle", title="Idle", node_id="n1", argv=["true"])
    running_goal(journal, "bare")  # running, but no process record on this node
    stop = lambda goal, node="n1": stop_goal(journal, goal, node=node, operator="dana")  # noqa: E731
    refused(journal, NotThisNodeError, lambda: stop("build", "n2"))
    refused(journal, NoActiveAttemptError, lambda: stop("idle"))
    refused(journal, NoProcessRecordError, lambda: stop("bare"))
    refused(journal, NoProcessRecordError, lambda: describe_stop(journal, "bare", node="n1"))
    refused(journal, GoalStateError, lambda: release_goal(journal, "idle", operator="dana"))
    refused(journal, RefineError, lambda: stop("missing"))
    refused(
        journal,
        RefineError,
        lambda: cancel_goal(journal, "idle", reason="  ", node="n1", operator="dana"),
    )
    refused(journal, RefineError, lambda: stop_goal(journal, "build", node="n1", operator="a b"))
    with Journal.open(journal.location, read_only=True) as ro:
        refused(journal, JournalReadOnlyError, lambda: describe_stop(ro, "build", node="n1"))
        refused(
            journal,
            JournalReadOnlyError,
            lambda: stop_goal(ro, "build", node="n1", operator="dana"),
        )
        refused(
            journal,
            JournalReadOnlyError,
            lambda: cancel_goal(ro, "build", reason="r", node="n1", operator="dana"),
        )
    assert alive(worker.record.pid, worker.record.create_time)
    assert alive(worker.grandchild, worker.grandchild_created)
    goals.cancel(goal_id="idle", reason="done with it", command_id="op:cancel:x")
    refused(journal, GoalTerminalError, lambda: stop("idle"))
    refused(journal, GoalTerminalError, lambda: describe_cancel(journal, "idle", node="n1"))


def test_refusals_come_in_the_seeds_order_input_then_journal_then_state(
    journal: Journal, spawn
) -> None:
    """Input validation first, then the journal (read-only), then the decision: a bad reason on
    a cancelled goal is bad input, and a read-only journal says so before the goal's state."""
    goals = running_goal(journal)
    worker = spawn(journal, "build")
    goals.create(goal_id="done", title="Done", node_id="n1", argv=["true"])
    goals.cancel(goal_id="done", reason="not needed", command_id="op:cancel:done")
    cancel = lambda j, goal, reason="r": cancel_goal(  # noqa: E731
        j, goal, reason=reason, node="n1", operator="dana"
    )
    cleanup = lambda j, run, method="operator-confirmed": confirm_cleanup(  # noqa: E731
        j, run, epoch=1, node="n1", operator="dana", method=method
    )
    refused(journal, InvalidInputError, lambda: cancel(journal, "done", ""))
    refused(journal, InvalidInputError, lambda: cleanup(journal, "done.r1", ""))
    refused(journal, InvalidInputError, lambda: cleanup(journal, "build.r1", "x" * 501))
    with Journal.open(journal.location, read_only=True) as ro:
        refused(journal, JournalReadOnlyError, lambda: cancel(ro, "done"))
        refused(journal, JournalReadOnlyError, lambda: cancel(ro, "missing"))
        refused(journal, JournalReadOnlyError, lambda: cleanup(ro, "build.r1"))  # alive
        refused(journal, JournalReadOnlyError, lambda: cleanup(ro, "done.r1"))
        refused(journal, JournalReadOnlyError, lambda: release_goal(ro, "missing", operator="d"))
        refused(journal, InvalidInputError, lambda: stop_goal(ro, "bad id", node="n1"))
    assert alive(worker.record.pid, worker.record.create_time)


def test_cancel_without_a_record_waits_for_cleanup_then_ends_as_cancel(journal: Journal) -> None:
    goals = running_goal(journal)
    assert "no process record" in describe_cancel(journal, "build", node="n1")
    report = cancel_goal(journal, "build", reason="stale input", node="n1", operator="dana")
    assert (report.outcome, report.process) == ("cancel-requested", "no-record")
    run = goals.current_run(goals.read("build"))
    assert run.status == "running" and needs_cleanup(journal, run, node="n1")
    evidence = cleanup_evidence(journal, "build.r1", epoch=1, node="n1")
    assert evidence.record is None and "no process record on node n1" in evidence.sentence
    assert evidence.ending == "the pending cancellation will be recorded; nothing is requeued"
    report = confirm_cleanup(journal, "build.r1", epoch=1, node="n1", operator="dana")
    assert report.outcome == "cancelled" and not report.requeued
    run = goals.current_run(goals.read("build"))
    assert run.status == "cancelled" and run.cancel_reason == "stale input"
    assert run.attempts[0].cleanup["method"] == "operator-confirmed"
    assert check_journal(journal).clean


def test_stop_of_a_real_worker_interrupts_it_and_the_goal_starts_again(journal: Journal) -> None:
    goals = Goals(journal)
    goals.create(goal_id="loop", title="Stuck", node_id="n1", argv=["sleep", "60"])
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "store.worker",
            "--journal",
            journal.location,
            "--node",
            "n1",
            "--goal",
            "loop",
            "--token",
            unique_token(),
        ],
        start_new_session=True,
    )
    try:
        registry = ProcessRegistry.for_journal(journal, "n1")
        deadline = time.monotonic() + 20
        while registry.get("loop.r1", 1) is None and time.monotonic() < deadline:
            time.sleep(0.02)
        record = registry.get("loop.r1", 1)
        assert record is not None and record.pid == worker.pid
        recipe: list[tuple[int, float]] = []
        while not recipe and time.monotonic() < deadline:  # the recipe runs in the group
            # a child may end as it is looked at (the worker's claim helper exits)
            with contextlib.suppress(psutil.NoSuchProcess):
                children = psutil.Process(worker.pid).children()
                recipe = [(p.pid, p.create_time()) for p in children if p.name() == "sleep"]
        assert recipe
        report = stop_goal(journal, "loop", node="n1", operator="dana", grace_s=5)
        assert report.requeued and report.process in ("exited", "killed")
        assert worker.wait(timeout=10) is not None
        assert all(wait_dead(pid, created) for pid, created in recipe)
        run = goals.current_run(goals.read("loop"))
        assert run.status == "queued" and run.attempts[0].cleanup["confirmed_by"] == "dana@n1"
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(timeout=5)
