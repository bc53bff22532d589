"""The node tests' environment: a journal in tmp_path, its reading connection, every process a
test starts (found again by the tmp_path in its argv), and the recipes those tests run.

The ``env`` fixture (tests/conftest.py) builds one ``Env`` per test and cleans it up.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from functools import partial
from pathlib import Path
from typing import Any

import psutil

from store.host.processes import ProcessRecord, ProcessRegistry, same_process
from store.journal.sqlite import Journal
from store.model.goals import Goal, Goals
from store.model.run import Run
from tests.helpers.soak_recipes import holds, unique_token
from tests.helpers.waits import wait_until

PY = sys.executable


def ours(marker: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        if proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        if holds(proc, proc.info["cmdline"], marker):  # argv, or a worker's $REFINE_JOURNAL
            found.append(proc)
    return found


def ours_running(marker: str, argument: str) -> list[psutil.Process]:
    """``ours`` whose argv holds ``argument`` (e.g. ``store.worker``), as read when they were
    listed: one that ends meanwhile is a zombie for a moment, and asking for its argv again
    then raises (psutil.ZombieProcess)."""
    return [p for p in ours(marker) if argument in (p.info["cmdline"] or ())]


def workers_and_recipes(marker: str, node_pid: int) -> list[int]:
    """Our processes but the node and the forkserver it started (store.node.forkserver)."""
    found = []
    for proc in ours(marker):
        with contextlib.suppress(psutil.Error):
            zygote = proc.ppid() == node_pid and "store.node.forkserver" in proc.cmdline()
            if proc.pid != node_pid and not zygote:
                found.append(proc.pid)
    return found


class Env:
    """A journal in tmp_path, a reading connection, and every process the test starts."""

    def __init__(self, tmp_path: Path) -> None:
        self.dir = tmp_path
        self.marker = str(tmp_path)
        self.path = tmp_path / "journal.db"
        self.journal = Journal.open(self.path)
        self.goals = Goals(self.journal)
        self.started: list[subprocess.Popen[bytes]] = []
        self.tag = unique_token("env")  # tokens unique to this test, same label same token

    # --- processes -----------------------------------------------------------------------------

    def node(self, node_id: str = "n1", capacity: int = 4) -> subprocess.Popen[bytes]:
        argv = [PY, "-m", "store.node.scheduler", "--journal", str(self.path), "--node", node_id]
        proc = subprocess.Popen([*argv, "--capacity", str(capacity)], start_new_session=True)
        self.started.append(proc)
        return proc

    def token(self, label: str) -> str:
        """``label`` made unique on this machine: live workers are found by their token."""
        return f"{label}-{self.tag}"

    def worker(self, goal_id: str, token: str, node_id: str = "n1") -> subprocess.Popen[bytes]:
        argv = ["--journal", str(self.path), "--node", node_id, "--goal", goal_id]
        proc = subprocess.Popen(
            [PY, "-m", "store.worker", *argv, "--token", self.token(token)],
            start_new_session=True,
            stderr=subprocess.DEVNULL,
        )
        self.started.append(proc)
        return proc

    def kill_node_and_workers(self, node: subprocess.Popen[bytes], node_id: str = "n1") -> None:
        """A crash: SIGKILL the node and every worker group it recorded."""
        node.kill()
        node.wait(timeout=10)
        for rec in self.registry(node_id).all():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(rec.pgid, signal.SIGKILL)
            wait_until(partial(gone, rec), what="worker death")

    def cleanup(self) -> None:
        for proc in self.started:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        for proc in ours(self.marker):
            with contextlib.suppress(ProcessLookupError, psutil.Error):
                os.killpg(os.getpgid(proc.pid), signal.SIGKILL)
        wait_until(lambda: not ours(self.marker), timeout=10, what="no leftover processes")
        self.journal.close()

    # --- journal -------------------------------------------------------------------------------

    def goal(self, goal_id: str, code: str, *, node_id: str = "n1", **kw: Any) -> Goal:
        """A goal whose recipe is ``python -c code <tmp_path>`` (argv[1] is the test's dir)."""
        argv = [PY, "-c", code, self.marker]
        return self.goals.create(
            goal_id=goal_id, title=goal_id, node_id=node_id, argv=argv, **kw
        ).goal

    def read(self, goal_id: str) -> tuple[Goal, Run]:
        goal = self.goals.read(goal_id)
        assert goal is not None
        run = self.goals.current_run(goal)
        assert run is not None
        return goal, run

    def status(self, goal_id: str) -> str:
        return self.read(goal_id)[0].status

    def first_run_started(self) -> bool:
        return (self.dir / "ran").exists()

    def registry(self, node_id: str = "n1") -> ProcessRegistry:
        return ProcessRegistry.for_journal(self.journal, node_id)

    def running_record(self, goal_id: str, node_id: str = "n1") -> ProcessRecord | None:
        _, run = self.read(goal_id)
        attempt = run.running_attempt
        if attempt is None:
            return None
        return self.registry(node_id).get(run.run_id, attempt.epoch)


# Recipes: argv[1] is the test's directory.
QUICK = "import time; time.sleep(0.2); print('hello from the recipe')"
FAIL = "import sys; print('broken'); sys.exit(3)"
# The first run leaves a flag and hangs; every later run succeeds at once.
HANG_ONCE = (
    "import os, sys, time\n"
    "flag = os.path.join(sys.argv[1], 'ran')\n"
    "if os.path.exists(flag): sys.exit(0)\n"
    "open(flag, 'w').close(); time.sleep(60)"
)
# The first run leaves a flag and hangs; later runs wait for <dir>/go.
HANG_ONCE_THEN_WAIT = (
    "import os, sys, time\n"
    "flag = os.path.join(sys.argv[1], 'ran')\n"
    "if not os.path.exists(flag): open(flag, 'w').close(); time.sleep(60)\n"
    "while not os.path.exists(os.path.join(sys.argv[1], 'go')): time.sleep(0.05)"
)
HANG = "import time; time.sleep(60)"
# Runs until the test creates <dir>/go.
WAIT_FOR_GO = (
    "import os, sys, time\n"
    "while not os.path.exists(os.path.join(sys.argv[1], 'go')): time.sleep(0.05)"
)


def gone(rec: ProcessRecord) -> bool:
    return not same_process(rec)
