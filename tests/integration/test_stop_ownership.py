"""Who records an attempt's end when several parties could (DESIGN §10): an operator's Stop owns
it against the node's reconciliation, and a Cancel on the goal's own node is cleaned up once,
by one party, with a report that says which. Real node, real workers, real `refine` processes.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.helpers.node_env import HANG, PY, Env
from tests.helpers.waits import wait_until

# The recipe's child ignores SIGTERM (so Stop needs SIGKILL after its grace) and says so in
# <dir>/ready; the recipe itself dies on SIGTERM, and so does the worker: for the whole grace
# the worker is gone while its group still lives.
STUBBORN_GRANDCHILD = (
    "import os, subprocess, sys, time\n"
    "code = 'import os, signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
    ' open(os.path.join(sys.argv[1], "ready"), "w").close(); time.sleep(600)\'\n'
    "subprocess.Popen([sys.executable, '-c', code, sys.argv[1]])\n"
    "time.sleep(600)"
)


def refine(env: Env, *args: str) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "REFINE_NODE": "n1", "REFINE_OPERATOR": "dana"}
    return subprocess.run(
        [PY, "-m", "refine_tui.cli", "--journal", str(env.path), *args, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env=environ,
    )


def node_with_log(env: Env) -> tuple[subprocess.Popen[bytes], Path]:
    log = env.dir / "node.stderr"
    argv = [PY, "-m", "store.node.scheduler", "--journal", str(env.path), "--node", "n1"]
    with open(log, "wb") as err:
        proc = subprocess.Popen(argv, start_new_session=True, stderr=err)
    env.started.append(proc)
    return proc, log


def test_the_node_leaves_an_operators_stop_its_ending(env: Env) -> None:
    node_with_log(env)
    env.goal("g", STUBBORN_GRANDCHILD, max_attempts=1)
    wait_until(lambda: (env.dir / "ready").exists() and env.running_record("g"), what="ready")
    done = refine(env, "stop", "g")  # the default 5 s grace: the node ticks meanwhile
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["signals"] == ["SIGTERM", "SIGKILL"] and report["process"] == "killed"
    assert report["outcome"] == "exhausted", report["why"]
    assert report["recorded_by"] == "dana@n1"
    _, run = env.read("g")
    cleanup = run.attempts[0].cleanup
    assert cleanup["confirmed_by"] == "dana@n1" and cleanup["method"] == "sigkill"


def test_cancel_with_the_node_running_is_cleaned_up_once_and_said_truthfully(env: Env) -> None:
    _, log = node_with_log(env)
    for n in range(3):
        goal_id = f"build{n}"
        env.goal(goal_id, HANG)
        wait_until(lambda g=goal_id: env.running_record(g), what=f"{goal_id} running")
        done = refine(env, "cancel", goal_id, "--reason", "not needed")
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        assert report["outcome"] == "cancelled", report
        _, run = env.read(goal_id)
        assert run.status == "cancelled"
        ended = run.attempts[0]
        who = ended.cleanup["confirmed_by"] if ended.cleanup else ended.worker
        assert report["recorded_by"] == who, report  # the report names who really recorded it
        assert who in ("dana@n1", ended.worker), "the node raced the canceller on its own node"
        assert "another party" not in report["why"]
    env.goal("after", "pass")
    wait_until(lambda: env.status("after") == "completed", what="the node ticked since")
    assert "VERSION_CONFLICT" not in log.read_text(), log.read_text()
