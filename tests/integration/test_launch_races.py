"""The claim → launch window of a real worker process (DESIGN §10): no recipe starts after a
cancellation committed, and a replayed claim never launches anything.
"""

from __future__ import annotations

import os
import subprocess
import threading
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pytest

from store.journal.api import Journal
from store.model.goals import Goals
from store.node.worker import EXIT_REFUSED, EXIT_SETTLED
from tests.helpers.node_env import PY, Env
from tests.helpers.pg_env import PgEnv
from tests.helpers.waits import wait_until

GATED = str(Path(__file__).parents[1] / "helpers" / "gated_worker.py")
# Appends a line to <dir>/ran each time it runs.
COUNT_RUNS = "import os, sys\nopen(os.path.join(sys.argv[1], 'ran'), 'a').write('ran\\n')"


def runs_of_recipe(folder: Path) -> int:
    ran = folder / "ran"
    return len(ran.read_text().splitlines()) if ran.exists() else 0


@dataclass
class HeldWorker:
    """A gated worker (tests/helpers/gated_worker.py) held still at its gate; ``said``: its
    stderr lines so far."""

    process: subprocess.Popen[bytes]
    gate: Path
    token: str
    said: list[str]

    def go(self) -> None:
        self.gate.touch()


def hold_worker(where: Env | PgEnv, gate_flags: list[str], what: str) -> HeldWorker:
    """Start a gated worker of node n1 on Goal g of ``where``'s journal and wait until it holds
    at the gate ``gate_flags`` name."""
    if isinstance(where, PgEnv):
        journal, token = where.url, f"t1-{where.dir.name}"
        env: dict[str, str] | None = {**where.env, "REFINE_STATE_DIR": str(where.state_dir("n1"))}
    else:
        journal, token, env = str(where.path), where.token("t1"), None
    gate = where.dir / "gate"
    args = ["--journal", journal, "--node", "n1", "--goal", "g", "--token", token]
    worker = subprocess.Popen(
        [PY, GATED, str(gate), *gate_flags, *args],
        env=env, start_new_session=True, stderr=subprocess.PIPE,
    )  # fmt: skip
    where.started.append(worker)
    said: list[str] = []
    assert worker.stderr is not None
    lines = worker.stderr
    threading.Thread(target=lambda: said.extend(map(bytes.decode, lines)), daemon=True).start()
    wait_until(lambda: Path(f"{gate}.held").exists(), what=what)
    return HeldWorker(worker, gate, token, said)


# Where the gated worker holds still, claimed and not launched, while a cancellation commits.
GATES = {
    "after-its-record": [],  # the claim committed, the worker's process record written
    # Issue 21.15: the claim helper reread, then handed the attempt to the worker, which launched
    # the recipe a few ms later, and a cancellation in between went unseen. The process that
    # launches now rereads right before its exec, after the hand-over.
    "at-the-handover": ["--at-handover"],
    # The helper's reread found the attempt ours: on SQLite its last look before the exec
    # (``PRAGMA data_version``) sees the commit and rereads.
    "after-the-reread": ["--after-reread"],
}


@pytest.mark.parametrize("gate_at", list(GATES))
def test_no_recipe_starts_after_a_cancellation_committed_inside_the_launch_window(
    env: Env, gate_at: str
) -> None:
    """The recipe never starts, and the worker reports the cancellation as its owner."""
    env.goal("g", COUNT_RUNS)
    held = hold_worker(env, GATES[gate_at], f"the worker held {gate_at}")
    env.goals.cancel(goal_id="g", reason="not needed", command_id="op:cancel:elsewhere", by="x@n2")
    held.go()
    assert held.process.wait(timeout=30) == EXIT_SETTLED
    assert runs_of_recipe(env.dir) == 0, "the recipe started after its cancellation committed"
    goal, run = env.read("g")
    assert goal.status == "cancelled" and run.status == "cancelled"
    assert run.attempts[0].cleanup["confirmed_by"] == f"n1/{held.token}"  # the worker's own
    assert env.running_record("g") is None


# Appends a line to <dir>/ran, then takes SIGTERM (``--before-exec`` starts it blocked: a stop
# that came at once cannot end it before that line) and runs on until stopped.
COUNT_AND_STAY = (
    COUNT_RUNS
    + "\nimport signal, time\nsignal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})"
    + "\ntime.sleep(60)"
)


def test_a_cancellation_arriving_at_the_exec_commits_only_once_the_recipe_started_on_sqlite(
    env: Env,
) -> None:
    """On SQLite the last look and the exec run with the journal's write lock held (the exec
    releases it): a cancellation arriving then waits, commits once the recipe has started, and
    the worker stops that recipe. Before, it could commit between the last look and the exec,
    unseen by both, and the recipe then started after its cancellation."""
    env.goal("g", COUNT_AND_STAY)
    held = hold_worker(env, ["--before-exec"], "the worker at its exec")

    def cancel() -> None:
        with Journal.open(str(env.path)) as journal:  # a connection of its own: it waits
            Goals(journal).cancel(
                goal_id="g", reason="not needed", command_id="op:cancel:at-exec", by="x@n2"
            )

    cancelling = threading.Thread(target=cancel)
    cancelling.start()
    cancelling.join(timeout=1.0)
    assert cancelling.is_alive(), "the cancellation committed while the launch was deciding"
    assert env.status("g") == "running" and runs_of_recipe(env.dir) == 0
    held.go()
    cancelling.join(timeout=30)
    assert not cancelling.is_alive()
    assert held.process.wait(timeout=30) == EXIT_SETTLED
    assert runs_of_recipe(env.dir) == 1  # started before the cancellation committed, then stopped
    goal, run = env.read("g")
    assert goal.status == "cancelled" and run.status == "cancelled"
    assert run.attempts[0].cleanup["confirmed_by"] == f"n1/{held.token}"  # the worker's own
    assert env.running_record("g") is None


@pytest.mark.postgres
def test_a_cancellation_arriving_at_the_exec_commits_only_once_the_recipe_started_on_postgres(
    pg: PgEnv,
) -> None:
    """On PostgreSQL the claim helper holds a lock of its session on the Run from its last look
    (a reread) to its exec, which closes the session and so releases it; every command on the
    Run takes that lock shared first. A cancellation arriving then waits, and commits once the
    recipe has started. Before, the helper closed its connection and then exec'd: a
    cancellation committed in between found the recipe started after it had committed."""
    pg.goal("g", COUNT_AND_STAY)
    held = hold_worker(pg, ["--before-exec"], "the worker at its exec")
    cancelling = threading.Thread(
        target=partial(pg.refine, "cancel", "g", "--reason", "not needed", node="n2")
    )
    cancelling.start()
    cancelling.join(timeout=1.0)
    assert cancelling.is_alive(), "the cancellation committed while the launch was deciding"
    assert pg.read("g")[0] == "running" and runs_of_recipe(pg.dir) == 0
    held.go()
    cancelling.join(timeout=30)
    assert not cancelling.is_alive()
    assert held.process.wait(timeout=30) == EXIT_SETTLED
    assert runs_of_recipe(pg.dir) == 1  # started before the cancellation committed, then stopped
    status, run = pg.read("g")
    assert status == "cancelled" and run.status == "cancelled"
    assert run.attempts[0].cleanup["confirmed_by"] == f"n1/{held.token}"  # the worker's own
    assert pg.running_record("g") is None
    pg.never_printed_a_password()


def test_a_cancellation_committed_as_the_recipe_ends_is_reported_by_its_worker(env: Env) -> None:
    """The recipe ran and exited; the worker reread (still ours, no cancellation) and a
    cancellation committed before its report. The journal refuses the completion
    (CANCEL_PENDING) and the worker, the attempt's owner, reports its end as cancelled. It used
    to exit there, and the attempt stayed `running` until an operator confirmed its cleanup."""
    env.goal("g", COUNT_RUNS)
    held = hold_worker(env, ["--before-report"], "the worker about to report")
    assert runs_of_recipe(env.dir) == 1
    env.goals.cancel(goal_id="g", reason="not needed", command_id="op:cancel:late", by="x@n2")
    held.go()
    assert held.process.wait(timeout=30) == EXIT_SETTLED
    goal, run = env.read("g")
    assert goal.status == "cancelled" and run.status == "cancelled"
    assert run.attempts[0].cleanup["confirmed_by"] == f"n1/{held.token}"  # the worker's own
    assert env.running_record("g") is None


def test_a_launch_waits_out_a_journal_locked_past_its_busy_timeout(env: Env) -> None:
    """Another writer keeps the journal's write lock longer than one busy timeout (5 s) while
    the helper wants it for the exec (a burst of claims can): the helper says so and tries
    again, and the recipe starts once the lock is free. It is not failed for it."""
    env.goal("g", COUNT_RUNS)
    held = hold_worker(env, ["--after-reread"], "the reread before the launch")
    with Journal.open(str(env.path)) as other, other.commits_held():
        held.go()
        wait_until(
            lambda: any("the launch waits for the journal" in line for line in held.said),
            timeout=30,
            what="the helper waiting for the lock",
        )
        assert runs_of_recipe(env.dir) == 0
    assert held.process.wait(timeout=30) == EXIT_SETTLED
    assert runs_of_recipe(env.dir) == 1
    assert env.status("g") == "completed"


@pytest.mark.postgres
def test_a_launch_waits_out_a_run_held_past_its_lock_wait_on_postgres(pg: PgEnv) -> None:
    """On PostgreSQL the helper waits for its lock on the Run as SQLite's for the write lock:
    another session holding it past ``LAUNCH_WAIT_S`` makes the helper say so and try again,
    and the recipe starts once it is free."""
    pg.goal("g", COUNT_RUNS)
    held = hold_worker(pg, ["--after-reread"], "the reread before the launch")
    with Journal.open(pg.url) as other, other.commits_held("run:g.r1"):
        held.go()
        wait_until(
            lambda: any("the launch waits for the journal" in line for line in held.said),
            timeout=30,
            what="the helper waiting for the lock",
        )
        assert runs_of_recipe(pg.dir) == 0
    assert held.process.wait(timeout=30) == EXIT_SETTLED
    assert runs_of_recipe(pg.dir) == 1
    assert pg.read("g")[0] == "completed"
    assert not [line for line in held.said if pg.url in line]  # no URL (and so no password) said


def test_a_recipe_that_names_a_fifo_is_refused_at_once(env: Env) -> None:
    """The helper reads the recipe's file before it holds the journal still (so a hung file
    system hangs it there, not every writer); a FIFO, which an open would wait on, is left to
    the exec, which refuses it: the attempt fails with the reason, the worker settles."""
    fifo = env.dir / "recipe.fifo"
    os.mkfifo(fifo)
    env.goals.create(goal_id="g", title="g", node_id="n1", argv=[str(fifo)], max_attempts=1)
    assert env.worker("g", "t1").wait(timeout=30) == EXIT_SETTLED
    goal, run = env.read("g")
    assert goal.status != "running" and run.attempts[0].state == "failed"
    assert "cannot start the recipe: [Errno 13] Permission denied" in str(run.attempts[0].reason)


RACES = 30


def test_no_recipe_launches_after_cancel_goal_returned_in_races_right_after_the_claim(
    env: Env,
) -> None:
    """Issue 21.15 as it was found: goals of a running node cancelled from another node the
    moment their claim shows. Each recipe is a symlink to /bin/sh that the test removes as soon
    as cancel_goal returned: a launch after that finds no recipe (the kernel orders the two),
    and the worker says so in the attempt's log."""
    from store.operator import cancel_goal

    env.node()
    late = []
    for n in range(RACES):
        goal_id, recipe = f"race{n}", env.dir / f"recipe{n}"
        recipe.symlink_to("/bin/sh")
        env.goals.create(
            goal_id=goal_id, title=goal_id, node_id="n1", argv=[str(recipe), "-c", ":"]
        )
        wait_until(partial(claimed, env, goal_id), step=0.0005, what="the claim")
        cancel_goal(env.journal, goal_id, reason="race", node="n2", operator="dana")
        recipe.unlink()
        wait_until(partial(run_cancelled, env, goal_id), what="the cancellation recorded")
        log = env.registry().log_path(f"{goal_id}.r1", 1)
        if log.exists() and "cannot start the recipe" in (said := log.read_text()):
            late.append(f"{goal_id}: {said.strip()}")
    assert late == [], f"launched after cancel_goal returned: {late} of {RACES}"


def claimed(env: Env, goal_id: str) -> bool:
    return env.status(goal_id) != "queued"


def run_cancelled(env: Env, goal_id: str) -> bool:
    return env.read(goal_id)[1].status == "cancelled"


def test_a_replayed_claim_never_launches_the_recipe_again(env: Env) -> None:
    env.goal("g", COUNT_RUNS)
    first = env.worker("g", "same-token")
    assert first.wait(timeout=30) == EXIT_SETTLED
    assert env.status("g") == "completed" and runs_of_recipe(env.dir) == 1
    again = env.worker("g", "same-token")  # the same command again: the claim replays
    assert again.wait(timeout=30) == EXIT_REFUSED
    assert runs_of_recipe(env.dir) == 1, "a replayed claim ran the recipe a second time"
    assert env.status("g") == "completed"


def test_a_claim_whose_answer_was_lost_is_repeated_and_its_attempt_ended_not_launched(
    env: Env,
) -> None:
    """The worker's first claim committed but its answer never came (a connection lost at the
    commit: a server restart, a network cut). Repeated with the same token it replays: the
    recipe is never launched from it, and the worker, as the attempt's owner, ends the attempt
    so the goal moves on. It used to stay `running` until an operator confirmed cleanup."""
    from store.node.worker import NOT_LAUNCHED

    env.goal("g", COUNT_RUNS, max_attempts=2)
    token = env.token("lost-answer")
    # What the lost first try left in the journal: the claim with this worker's token.
    env.goals.start(goal_id="g", node_id="n1", worker=f"n1/{token}", token=token)
    assert env.worker("g", "lost-answer").wait(timeout=30) == EXIT_SETTLED
    assert runs_of_recipe(env.dir) == 0, "a replayed claim launched the recipe"
    goal, run = env.read("g")
    assert goal.status == "queued", goal  # for the next worker, with its own token
    (attempt,) = run.attempts
    assert attempt.state == "interrupted"
    assert attempt.cleanup == {
        "epoch": 1,
        "confirmed_by": f"n1/{token}",
        "method": NOT_LAUNCHED,
    }
    assert env.worker("g", "next").wait(timeout=30) == EXIT_SETTLED
    assert runs_of_recipe(env.dir) == 1 and env.status("g") == "completed"


def test_stop_inside_the_claim_to_record_window_says_starting(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    from store.errors import NoProcessRecordError
    from store.ops import operator, reads

    env.goal("g", COUNT_RUNS)
    token = env.token("t1")  # unique: a live worker of another test with "t1" says "starting"
    env.goals.start(goal_id="g", node_id="n1", worker=f"n1/{token}", token=token)  # no record yet
    with pytest.raises(NoProcessRecordError, match=r"starting.*try again in a moment"):
        operator.stop_goal(env.journal, "g", node="n1", operator="dana")
    monkeypatch.setattr(reads, "LAUNCH_WINDOW_S", 0.0)  # the claim is now "old"
    with pytest.raises(NoProcessRecordError, match="confirm cleanup instead"):
        operator.stop_goal(env.journal, "g", node="n1", operator="dana")
    assert runs_of_recipe(env.dir) == 0
