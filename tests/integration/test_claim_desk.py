"""The node's claim desk (ADR-003's batching of transitions, issue 27 item 3): the claims its
workers ask for meanwhile commit in one transaction, each the worker's own command; a claim a
process of its own did not ask for is never made; a worker with no desk claims by itself."""

from __future__ import annotations

import sqlite3
import subprocess
import time

from store.node.scheduler import Node
from store.node.wakeups import ask_claim
from store.node.worker import EXIT_SETTLED
from tests.helpers.node_env import HANG, PY, Env
from tests.helpers.waits import wait_until

BURST = 24


def _running(env: Env, goal_id: str) -> bool:
    return env.status(goal_id) == "running" and env.running_record(goal_id) is not None


def test_the_claims_a_burst_of_workers_asks_for_commit_together(env: Env) -> None:
    for n in range(BURST):
        env.goal(f"b{n}", HANG)
    with Node(env.path, "n1", capacity=BURST) as node:
        # Another writer holds the journal while the workers start: their claims wait at the
        # desk together (as behind a burst of `goal add`), then go in a few commits.
        writer = sqlite3.connect(env.path, isolation_level=None)
        writer.execute("BEGIN IMMEDIATE")
        try:
            assert len(node.tick()) == BURST
            time.sleep(2.0)  # every worker has started and asked (and none was claimed)
            assert node.claim_commits == 0
        finally:
            writer.execute("ROLLBACK")
            writer.close()
        wait_until(
            lambda: all(_running(env, f"b{n}") for n in range(BURST)), timeout=60, what="running"
        )
        assert node.claimed_here == BURST
        assert 1 <= node.claim_commits <= BURST // 3, node.claim_commits
    # Each claim is the worker's own command: its id names the worker's token, as if the
    # worker had sent it.
    for n in range(BURST):
        _, run = env.read(f"b{n}")
        attempt = run.running_attempt
        assert attempt is not None
        token = attempt.worker.removeprefix("n1/")
        started = [e for e in env.journal.history(f"goal:b{n}", 0, 100) if e.type == "goal.started"]
        assert len(started) == 1
        records = env.journal.event_records(started[0].sequence - 1, 1)
        assert records[0][-1] == f"run:{run.run_id}:claim:{token}"


def test_a_claim_no_worker_of_the_node_asked_for_is_never_made(env: Env) -> None:
    env.goal("other", HANG)
    env.goal("mine", "import time; time.sleep(0.1)")
    with Node(env.path, "n1", capacity=1) as node:
        desk = node._claim_desk()  # its name is what the node gives its workers
        assert desk is not None
        assert ask_claim(desk.name, "other", 1, "forged-token")
        node.tick()  # launches "mine" or "other" (capacity 1): whichever it is, it runs
        launched = next(iter(node.launched))
        wait_until(lambda: env.status(launched) != "queued", what="the node's own launch")
    other = "other" if launched != "other" else "mine"
    assert env.status(other) == "queued"  # the forged request claimed nothing
    assert node.claimed_here == 1


def test_a_worker_whose_desk_is_gone_claims_by_itself(env: Env) -> None:
    env.goal("alone", "print('ran alone')")
    argv = ["--journal", str(env.path), "--node", "n1", "--goal", "alone", "--round", "1"]
    worker = subprocess.run(
        [PY, "-m", "store.worker", *argv, "--token", env.token("t"), "--claims-at", "0" * 32],
        timeout=60,
    )
    assert worker.returncode == EXIT_SETTLED
    goal, run = env.read("alone")
    assert goal.status == "completed" and run.attempts[-1].worker == f"n1/{env.token('t')}"
