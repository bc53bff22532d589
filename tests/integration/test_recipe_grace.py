"""A recipe that cleans up on SIGTERM gets its grace, whoever stops it (found from outside).

A Stop or a Cancel promises "SIGTERM, SIGKILL after the grace". Yet a recipe whose SIGTERM
handler needed two seconds never finished it: the group's SIGTERM killed its worker, whose
death SIGKILLed the recipe at once (its parent-death signal), and the Stop said "exited within
the grace"; a worker ending its recipe for a cancellation sent SIGTERM again every 20 ms, each
one cutting the handler short. Real node, workers, recipes and signals (SQLite journal).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from store.ops.bulk import plan_bulk, run_bulk
from store.ops.operator import cancel_goal, stop_goal
from tests.helpers.node_env import Env
from tests.helpers.waits import node_recorded_exit, wait_until

# Writes "ready", and on SIGTERM "term", then (a second later: its cleanup) "cleaned up". A
# second SIGTERM during the cleanup would run the handler again: "term" twice.
GRACEFUL = """
import os, signal, sys, time
path = os.path.join(sys.argv[1], {name!r})
def note(word):
    with open(path, "a") as f:
        f.write(word + "\\n")
def on_term(*_):
    note("term")
    time.sleep(1.0)
    note("cleaned up")
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
note("ready")
time.sleep(60)
"""
WHOLE = "ready\nterm\ncleaned up\n"
# Ends on SIGTERM only once every recipe of the batch (argv[2] of them) was sent one: stopped
# one after another, the first waits out its grace for the others and is killed.
TOGETHER = """
import os, signal, sys, time
termed = os.path.join(sys.argv[1], "termed")
def on_term(*_):
    with open(termed, "a") as f:
        f.write("x")
    while len(open(termed).read()) < {n}:
        time.sleep(0.02)
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
open(os.path.join(sys.argv[1], {name!r}), "w").close()
time.sleep(60)
"""


def running(env: Env, name: str) -> None:
    env.goal(name, GRACEFUL.format(name=name))
    wait_until(lambda: _said(env, name) == "ready\n", timeout=60, what=f"{name} ready")


def _said(env: Env, name: str) -> str:
    path = Path(env.dir) / name
    return path.read_text() if path.exists() else ""


def test_a_stop_leaves_the_recipe_its_grace(env: Env) -> None:
    env.node()
    running(env, "stopped")
    report = stop_goal(env.journal, "stopped", node="n1", operator="op", grace_s=10.0)
    assert (report.process, report.outcome) == ("exited", "requeued"), report
    assert _said(env, "stopped") == WHOLE


def test_a_cancel_from_another_node_leaves_the_recipe_its_grace(env: Env) -> None:
    env.node()
    running(env, "cancelled")
    cancel_goal(env.journal, "cancelled", reason="not needed", node="elsewhere", operator="op")
    wait_until(lambda: env.read("cancelled")[1].status == "cancelled", what="the cancel recorded")
    assert _said(env, "cancelled") == WHOLE  # its worker stopped it: one SIGTERM, the grace


def test_a_sigterm_to_the_worker_alone_leaves_the_recipe_its_grace_and_the_end_to_the_node(
    env: Env,
) -> None:
    env.node()
    running(env, "shutdown")
    rec = env.running_record("shutdown")
    assert rec is not None
    os.kill(rec.pid, signal.SIGTERM)  # an administrator's kill, or the machine going down
    wait_until(lambda: _said(env, "shutdown") == WHOLE, timeout=10, what="the recipe's cleanup")
    # The worker reports nothing (it did not see the recipe end by itself); its record stays,
    # so the node finds the process gone and records the end: the goal is requeued.
    node_recorded_exit(env.read, "shutdown")
    wait_until(lambda: len(env.read("shutdown")[1].attempts) == 2, what="attempt 2")


@pytest.mark.parametrize("action", ["stop", "cancel"])
def test_a_batch_stops_its_recipes_side_by_side_in_one_grace(env: Env, action: str) -> None:
    """Before, a batch stopped its Goals' processes one after another, a grace each: ten
    recipes that ignore SIGTERM, with a 2 s grace, took 20 s to cancel (found from outside)."""
    names = [f"{action}-{n}" for n in range(4)]
    for name in names:
        env.goal(name, TOGETHER.format(n=len(names), name=name))
    env.node()
    wait_until(
        lambda: all((Path(env.dir) / name).exists() for name in names), what="all recipes ready"
    )
    plan = plan_bulk(env.journal, action, node="n1", goal_ids=names)
    reason = "not needed" if action == "cancel" else None
    report = run_bulk(env.journal, plan, reason=reason, operator="op", grace_s=30.0)
    outcomes = {r.planned.goal_id: r.report.process for r in report.goals if r.report}
    assert outcomes == dict.fromkeys(names, "exited"), report.goals  # none needed SIGKILL
