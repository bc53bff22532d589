"""The node scheduler and the worker: real node processes, real workers, real signals, real files.

Every process a test starts carries the test's tmp_path in its argv (the journal path, or a
marker argument of the recipe), so the fixture can find and kill every leftover by that mark.
"""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import psutil
import pytest

from store.errors import RunTerminalError, StaleAttemptError
from store.host.processes import ProcessRegistry, same_process
from store.journal.sqlite import Journal
from store.model.goals import Goals
from store.node import scheduler
from store.node.scheduler import Node, run_node
from store.node.worker import EXIT_SUPERSEDED
from store.ops.nodes import node_view
from tests.helpers.node_env import (
    FAIL,
    HANG,
    HANG_ONCE,
    HANG_ONCE_THEN_WAIT,
    PY,
    QUICK,
    WAIT_FOR_GO,
    Env,
    ours,
    workers_and_recipes,
)
from tests.helpers.waits import wait_until


def _completed(env: Env, goal_id: str) -> bool:
    return env.status(goal_id) == "completed"


def _settled_after(env: Env, goal_id: str) -> None:
    """Let the node prove it has ticked since now: a fresh goal runs to completion."""
    env.goal(goal_id, QUICK)
    wait_until(lambda: _completed(env, goal_id), what=f"{goal_id} completed")


# --- end to end ------------------------------------------------------------------------------


def test_a_goal_runs_and_completes_end_to_end(env: Env) -> None:
    env.goal("hello", QUICK)
    node = env.node()

    wait_until(lambda: _completed(env, "hello"), what="completion")

    _, run = env.read("hello")
    assert run.status == "completed"
    (attempt,) = run.attempts
    assert attempt.worker.startswith("n1/")
    assert attempt.evidence[0] == "exit:0"
    assert attempt.evidence[1].startswith("sha256:")
    log = env.registry().log_path(run.run_id, 1)
    assert "hello from the recipe" in log.read_text()
    wait_until(lambda: env.registry().all() == [], what="the worker's record removed")
    # Only the node (and its forkserver) is left: the worker and its recipe are gone.
    wait_until(lambda: workers_and_recipes(env.marker, node.pid) == [], what="only the node")


def test_a_failing_recipe_retries_then_exhausts(env: Env) -> None:
    env.goal("flaky", FAIL, max_attempts=3)
    env.node()

    wait_until(lambda: env.status("flaky") == "exhausted", what="exhaustion")

    _, run = env.read("flaky")
    assert run.status == "exhausted"
    assert [a.state for a in run.attempts] == ["failed"] * 3
    assert {a.reason for a in run.attempts} == {"exit code 3"}
    assert all(a.evidence[0] == "exit:3" for a in run.attempts)


def test_soft_capacity_runs_one_at_a_time(env: Env) -> None:
    trace = env.dir / "trace"
    code = (
        "import os, sys, time\n"
        f"log = open({str(trace)!r}, 'a', buffering=1)\n"
        "log.write('start\\n'); time.sleep(0.2); log.write('end\\n')"
    )
    for i in range(3):
        env.goal(f"c{i}", code)
    env.node(capacity=1)

    wait_until(lambda: all(_completed(env, f"c{i}") for i in range(3)), what="all done")

    assert trace.read_text().split() == ["start", "end"] * 3


def test_an_attempt_past_its_timeout_is_stopped_by_its_worker_and_reported_failed(
    env: Env,
) -> None:
    env.goal("slow", HANG, max_attempts=1, attempt_timeout_ms=300)
    worker = env.worker("slow", "tok1")

    assert worker.wait(timeout=20) == 0

    goal, run = env.read("slow")
    assert goal.status == "exhausted"
    assert run.attempts[0].reason is not None
    assert run.attempts[0].reason.startswith("timeout")
    assert ours(env.marker) == []  # the recipe was stopped too


# --- crash, restart, reconciliation ----------------------------------------------------------


def test_a_crashed_node_is_reconciled_on_restart_and_the_goal_reruns(env: Env) -> None:
    env.goal("crash", HANG_ONCE)
    node = env.node()
    rec = wait_until(lambda: env.running_record("crash"), what="a running, recorded attempt")
    wait_until(env.first_run_started, what="the recipe started")

    env.kill_node_and_workers(node)
    assert env.status("crash") == "running"  # nothing ended it: time ends nothing
    env.node()

    wait_until(lambda: _completed(env, "crash"), what="the rerun completes")
    _, run = env.read("crash")
    first, second = run.attempts
    assert (first.epoch, first.state) == (1, "interrupted")
    assert first.cleanup is not None
    assert first.cleanup["method"] == "process-exited"
    assert first.cleanup["confirmed_by"] == "scheduler@n1"
    assert (second.epoch, second.state) == (2, "completed")
    assert env.registry().get(rec.run_id, 1) is None  # the stale record is gone


def test_an_operator_redelivery_goal_is_held_after_crash_reconciliation(env: Env) -> None:
    env.goal("payment", HANG_ONCE, redelivery="operator")
    node = env.node()
    wait_until(lambda: env.running_record("payment"), what="a running, recorded attempt")
    wait_until(env.first_run_started, what="the recipe started")

    env.kill_node_and_workers(node)
    env.node()

    wait_until(lambda: env.status("payment") == "held", what="held")
    _settled_after(env, "later")
    goal, run = env.read("payment")
    assert goal.status == "held"
    assert len(run.attempts) == 1  # held: the node does not run it again
    assert run.attempts[0].cleanup["method"] == "process-exited"  # type: ignore[index]

    env.goals.release(goal_id="payment", command_id="op:release:test")
    wait_until(lambda: _completed(env, "payment"), what="released and completed")
    assert len(env.read("payment")[1].attempts) == 2


def test_a_restarted_node_does_not_launch_its_running_goals_again(env: Env) -> None:
    env.goal("long", WAIT_FOR_GO)
    node = env.node()
    rec = wait_until(lambda: env.running_record("long"), what="a running, recorded attempt")

    node.send_signal(signal.SIGTERM)
    assert node.wait(timeout=10) == 0
    assert same_process(rec)  # its worker outlives it
    env.node()
    _settled_after(env, "probe")

    assert len(env.read("long")[1].attempts) == 1
    (env.dir / "go").touch()
    wait_until(lambda: _completed(env, "long"), what="the adopted worker completes")
    assert len(env.read("long")[1].attempts) == 1


def test_no_process_record_means_no_proof_and_the_attempt_is_left(env: Env) -> None:
    env.goal("silent", HANG)
    env.goals.start(goal_id="silent", node_id="n1", worker="n1/elsewhere", token="t1")
    env.node()
    _settled_after(env, "probe")

    goal, run = env.read("silent")
    assert goal.status == "running"
    assert run.running_attempt is not None  # the operator decides (needs cleanup)


# --- two nodes -------------------------------------------------------------------------------


def test_two_nodes_on_one_journal_each_run_only_their_own_goals(env: Env) -> None:
    mine = {"n1": [f"a{i}" for i in range(3)], "n2": [f"b{i}" for i in range(3)]}
    for node_id, ids in mine.items():
        for goal_id in ids:
            env.goal(goal_id, QUICK, node_id=node_id)
    env.node("n1")
    env.node("n2")

    everything = [g for ids in mine.values() for g in ids]
    wait_until(lambda: all(_completed(env, g) for g in everything), what="all completed")

    for node_id, ids in mine.items():
        for goal_id in ids:
            (attempt,) = env.read(goal_id)[1].attempts
            assert attempt.worker.startswith(f"{node_id}/")
        other = "n2" if node_id == "n1" else "n1"
        logs = {p.name for p in env.registry(other).logs_dir.glob("*.log")}
        assert not any(name.startswith(tuple(f"{g}." for g in ids)) for name in logs)


# --- cancellation ----------------------------------------------------------------------------


def test_a_cancel_written_elsewhere_is_cleaned_up_by_the_running_node(env: Env) -> None:
    env.goal("doomed", HANG)
    env.node()
    rec = wait_until(lambda: env.running_record("doomed"), what="a running, recorded attempt")

    env.goals.cancel(goal_id="doomed", reason="not needed any more", command_id="op:cancel:x")

    wait_until(lambda: env.read("doomed")[1].status == "cancelled", what="run cancelled")
    goal, run = env.read("doomed")
    assert goal.status == "cancelled"
    assert run.cancel_reason == "not needed any more"
    (attempt,) = run.attempts
    assert attempt.cleanup is not None and attempt.cleanup["epoch"] == 1
    wait_until(lambda: not same_process(rec), what="the worker gone")
    _settled_after(env, "probe")
    assert len(env.read("doomed")[1].attempts) == 1  # nothing restarts it


def test_the_node_stops_a_silent_worker_of_a_cancelled_goal(env: Env) -> None:
    """The worker is frozen (it cannot clean up itself): the node stops its group and records."""
    env.goal("frozen", HANG)
    with Node(env.path, "n1", grace_s=0.3) as node:
        assert node.tick() == ["frozen"]
        rec = wait_until(lambda: env.running_record("frozen"), what="a running, recorded attempt")
        os.killpg(rec.pgid, signal.SIGSTOP)
        env.goals.cancel(goal_id="frozen", reason="stop it", command_id="op:cancel:y")

        (ended,) = node.cleanup_cancelled()

        assert ended.goal.status == "cancelled"
        assert ended.run is not None and ended.run.status == "cancelled"
        cleanup = ended.run.attempts[0].cleanup
        assert cleanup is not None and cleanup["confirmed_by"] == "scheduler@n1"
        assert cleanup["method"].startswith("cancel cleanup by node n1: SIGTERM to process group")
        assert not same_process(rec)
        assert env.registry().all() == []
        node.reap()
        assert node.tick() == []
    assert ours(env.marker) == []


# --- late reports ----------------------------------------------------------------------------


def test_a_late_report_after_replacement_is_refused_and_writes_nothing(env: Env) -> None:
    env.goal("late", HANG_ONCE_THEN_WAIT)
    old = env.worker("late", "old")
    rec = wait_until(lambda: env.running_record("late"), what="the first worker recorded")
    wait_until(env.first_run_started, what="the recipe started")
    os.killpg(rec.pgid, signal.SIGSTOP)  # silent owner: the operator confirms a (wrong) cleanup
    goal, run = env.read("late")
    env.goals.interrupt(
        goal_id="late",
        run_id=run.run_id,
        epoch=1,
        goal_version=goal.version,
        run_version=run.version,
        confirmed_by="alice@n1",
        method="operator-confirmed",
        command_id="op:cleanup:late.r1:1",
    )
    replacement = env.worker("late", "new")
    wait_until(lambda: env.running_record("late"), what="the replacement running")
    before = env.journal.last_sequence()

    with pytest.raises(StaleAttemptError):  # epoch 1 reports while epoch 2 owns the run
        env.goals.settle(goal_id="late", run_id=run.run_id, epoch=1, outcome="completed")
    assert env.journal.last_sequence() == before

    (env.dir / "go").touch()
    assert replacement.wait(timeout=20) == 0
    after = env.journal.last_sequence()
    with pytest.raises(RunTerminalError):
        env.goals.settle(goal_id="late", run_id=run.run_id, epoch=1, outcome="failed", reason="x")
    os.killpg(rec.pgid, signal.SIGCONT)  # the old owner wakes up, rereads, stops, says nothing

    assert old.wait(timeout=20) == EXIT_SUPERSEDED
    assert env.journal.last_sequence() == after
    _, run = env.read("late")
    assert [a.state for a in run.attempts] == ["interrupted", "completed"]
    assert ours(env.marker) == []


def test_run_node_refuses_a_missing_journal_and_a_bad_capacity(tmp_path: Path) -> None:
    missing = tmp_path / "missing.db"
    assert run_node(missing, "n1") == 3
    assert not missing.exists()
    Journal.open(tmp_path / "j.db").close()
    assert run_node(tmp_path / "j.db", "n1", capacity=0) == 2


def test_a_worker_that_cannot_record_its_process_reports_failed_as_owner(tmp_path: Path) -> None:
    from store.node.worker import EXIT_NO_RECORD, run_worker

    with Journal.open(tmp_path / "j.db") as journal:
        goals = Goals(journal)
        goals.create(goal_id="g", title="G", node_id="n1", argv=["true"], max_attempts=1)
        registry = ProcessRegistry.for_journal(journal, "n1")
        registry.root.mkdir(parents=True)
        registry.processes_dir.write_text("a file where the records folder should be")
        code = run_worker(journal, node_id="n1", goal_id="g", token="t1")
        assert code == EXIT_NO_RECORD  # reported; its node's launches then wait (LaunchBackoff)
        run = goals.runs("g")[0]
        assert run.status == "exhausted"
        assert "cannot record the worker process" in (run.attempts[0].reason or "")
        assert goals.read("g").status == "exhausted"


# --- the forkserver ----------------------------------------------------------------------------


def test_the_node_forks_its_workers_from_a_forkserver_whose_death_harms_no_attempt(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    from store.host.processes import live_worker
    from store.node.scheduler import FORKSERVER_ENV

    monkeypatch.setenv(FORKSERVER_ENV, "1")  # opt-in for now

    env.goal("forked", WAIT_FOR_GO)
    node = env.node()
    rec = wait_until(lambda: env.running_record("forked"), what="a running, recorded attempt")

    worker = psutil.Process(rec.pid)
    zygote = worker.parent()
    assert zygote is not None and "store.node.forkserver" in zygote.cmdline()
    assert zygote.ppid() == node.pid
    assert os.getsid(rec.pid) == rec.pid == rec.pgid  # its own session, as Popen would give
    assert rec.argv[1:3] == ("-m", "store.worker") and rec.argv[-2] == "--round"
    _, run = env.read("forked")
    found = live_worker(run.attempts[0].worker)  # found by its token, as a started worker is
    assert found is not None and found.pid == rec.pid

    zygote.kill()  # the forkserver crashes: its worker runs on, and the node carries on
    wait_until(lambda: not same_process(rec) or _dead(zygote), what="the forkserver dead")
    assert same_process(rec)
    env.goal("after", QUICK)
    wait_until(lambda: _completed(env, "after"), what="a goal launched after the crash")
    (env.dir / "go").touch()
    wait_until(lambda: _completed(env, "forked"), what="the orphaned worker completes")
    assert len(env.read("forked")[1].attempts) == 1


def test_the_forkserver_reports_exit_codes_and_outlives_a_crashing_worker(env: Env) -> None:
    from store.node.forkserver import Forkserver, cmdline
    from store.node.worker import EXIT_REFUSED

    env.goal("ok", QUICK)
    with open(env.dir / "node.log", "ab") as log:
        server = Forkserver({**os.environ, "REFINE_JOURNAL": str(env.path)}, log, 600)
        try:
            head = [PY, "-m", "store.worker", "--node", "n1"]
            bad = server.launch([*head, "--goal"])  # argparse refuses: exit 2
            refused = server.launch([*head, "--goal", "nosuch", "--token", "t1"])
            assert bad is not None and refused is not None
            assert server.exit_code(bad[0], 20) == 2
            assert server.exit_code(refused[0], 20) == EXIT_REFUSED
            done = server.launch([*head, "--goal", "ok", "--token", "t2"])
            assert done is not None and server.exit_code(done[0], 20) == 0
            assert _completed(env, "ok")
            assert server.launch([*head, "x" * 600]) is None  # too long to show: Popen instead
            assert len(cmdline([*head, "x" * 600])) > 600
        finally:
            server.close()


def test_the_forkserver_forks_many_workers_at_once_in_order(env: Env) -> None:
    from store.node.forkserver import Forkserver
    from store.node.worker import EXIT_REFUSED

    for name in ("a", "b"):
        env.goal(name, QUICK)
    with open(env.dir / "node.log", "ab") as log:
        server = Forkserver({**os.environ, "REFINE_JOURNAL": str(env.path)}, log, 600)
        try:
            head = [PY, "-m", "store.worker", "--node", "n1"]
            got = server.launch_all(
                [
                    [*head, "--goal", "a", "--token", "t1"],
                    [*head, "x" * 600],  # too long to show: None in its place, the rest go on
                    [*head, "--goal", "nosuch", "--token", "t2"],
                    [*head, "--goal", "b", "--token", "t3"],
                ]
            )
            assert got[1] is None and None not in (got[0], got[2], got[3])
            pids = [fork[0] for fork in got if fork is not None]
            assert len(set(pids)) == 3
            assert server.exit_code(pids[1], 20) == EXIT_REFUSED  # the replies kept their order
            assert [server.exit_code(pid, 20) for pid in (pids[0], pids[2])] == [0, 0]
            assert _completed(env, "a") and _completed(env, "b")
        finally:
            server.close()


def test_a_crashing_claim_helper_ends_only_its_own_attempt_before_any_recipe(env: Env) -> None:
    from store.node.worker import EXIT_CRASHED

    env.goal("g", "import os, sys; open(os.path.join(sys.argv[1], 'ran'), 'w')")
    env.goal("other", QUICK)
    script = str(Path(__file__).parents[1] / "helpers" / "crashing_claim_worker.py")
    args = ["--journal", str(env.path), "--node", "n1", "--goal", "g", "--token", "t1"]
    crashing = subprocess.Popen([PY, script, *args], start_new_session=True)
    env.started.append(crashing)
    assert crashing.wait(timeout=30) == EXIT_CRASHED
    assert not (env.dir / "ran").exists(), "a recipe started after its claim helper crashed"
    assert env.status("g") == "running"  # claimed: without a record, left for an operator
    assert ours(env.marker) == []  # no helper left behind
    assert env.worker("other", "t2").wait(timeout=30) == 0  # the next attempt runs as ever
    assert _completed(env, "other")


def _dead(proc: psutil.Process) -> bool:
    try:
        return proc.status() == psutil.STATUS_ZOMBIE  # the node reaps it when it next launches
    except psutil.NoSuchProcess:
        return True


def test_the_node_launches_each_commit_from_its_wake_ups_alone(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the safety poll off, goals committed one after another all launch: the node wakes
    2 ms after a commit's first write, and when that is before the commit is readable (the
    writer still syncs the WAL) it looks again shortly after (a race the test cannot force)."""
    monkeypatch.setattr(scheduler, "SAFETY_POLL_S", 3600.0)
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    failures: list[BaseException] = []

    def commit_one_after_another() -> None:
        try:
            with Journal.open(env.path) as journal:
                goals = Goals(journal)
                for n in range(12):
                    goals.create(goal_id=f"w{n}", title="w", node_id="n1", argv=[PY, "-c", "0"])
                    wait_until(functools.partial(_launched, goals, f"w{n}"), what=f"w{n}")
        except BaseException as exc:
            failures.append(exc)
        finally:
            loop.call_soon_threadsafe(stop.set)

    with Node(env.path, "n1", capacity=20) as node:
        committer = threading.Thread(target=commit_one_after_another)
        committer.start()
        loop.run_until_complete(node.serve(stop))
        committer.join()
    loop.close()
    assert not failures, failures
    wait_until(lambda: all(_completed(env, f"w{n}") for n in range(12)), what="all completed")


def _launched(goals: Goals, goal_id: str) -> bool:
    goal = goals.read(goal_id)
    return goal is not None and goal.status != "queued"


def test_the_safety_poll_ticks_however_often_the_nodes_own_beats_wake_it(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node's own heartbeats write the journal's file, and so wake its file watcher; a wake-up
    that shows no commit runs no tick. The safety poll still ticks every SAFETY_POLL_S after the
    last tick (it used to wait its whole period again after each wake-up: with beats more often
    than it, a node never ran its safety tick, housekeeping included)."""
    monkeypatch.setattr(scheduler, "SAFETY_POLL_S", 0.5)
    stop = asyncio.Event()

    async def serve_until_five_rounds(node: Node) -> None:
        # No commit wakes it: every round after the first is the safety poll's. Before the fix
        # the beats' wake-ups (every 0.1 s) restarted its 0.5 s wait, so it never came; the
        # deadline is that of a machine loaded many times over, not a figure of the poll's.
        serving = asyncio.ensure_future(node.serve(stop))
        deadline = time.monotonic() + 30
        while node.rounds < 5 and time.monotonic() < deadline and not serving.done():
            await asyncio.sleep(0.05)
        stop.set()
        await serving

    with Node(env.path, "n1", heartbeat_s=0.1) as node:
        asyncio.run(serve_until_five_rounds(node))
    assert node.rounds >= 5, node.rounds


def _node_state(env: Env, node_id: str) -> str | None:
    with Journal.open(env.path, read_only=True) as journal:
        view = node_view(journal, node_id, count=False)
    return view.state if view is not None else None


def test_a_node_whose_terminal_closed_stops_cleanly_and_one_under_nohup_goes_on(
    env: Env,
) -> None:
    """SIGHUP (its terminal closed, its ssh dropped) killed a node without its exit mark: it
    showed `silent`, as a dead machine does. It now ends as SIGTERM ends it; ignored (nohup),
    the node goes on."""
    node = env.node("n1")
    wait_until(lambda: _node_state(env, "n1") == "live", timeout=20)
    node.send_signal(signal.SIGHUP)
    assert node.wait(timeout=20) == 0
    assert _node_state(env, "n1") == "stopped"
    argv = [PY, "-m", "store.node.scheduler", "--journal", str(env.path), "--node", "n2"]
    nohup = subprocess.Popen(
        argv,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN),
    )
    env.started.append(nohup)
    wait_until(lambda: _node_state(env, "n2") == "live", timeout=20)
    nohup.send_signal(signal.SIGHUP)
    time.sleep(1.0)
    assert nohup.poll() is None and _node_state(env, "n2") == "live"
    nohup.send_signal(signal.SIGTERM)
    assert nohup.wait(timeout=20) == 0 and _node_state(env, "n2") == "stopped"
