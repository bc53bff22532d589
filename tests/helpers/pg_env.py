"""A PostgreSQL journal for a test, with its nodes' state dirs and every process it starts:
the ``pg`` fixture of the integration tier (tests/integration/conftest.py)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil

from store.goals import Goals
from store.host.processes import ProcessRecord, ProcessRegistry
from store.journal.api import Journal
from store.model.run import Run
from tests.helpers.postgres_server import PASSWORD
from tests.helpers.waits import wait_until

PY = sys.executable


class PgEnv:
    """A PostgreSQL journal, this test's node state dirs, and every process it starts."""

    def __init__(self, url: str, tmp_path: Path) -> None:
        self.url = url
        self.dir = tmp_path
        self.marker = str(tmp_path)
        self.env = {**os.environ, "REFINE_JOURNAL": url, "REFINE_TEST_MARK": self.marker}
        self.env.pop("REFINE_STATE_DIR", None)
        self.outputs: list[str] = []
        self.started: list[subprocess.Popen[bytes]] = []
        self.refine("init")
        self.journal = Journal.open(url)
        self.goals = Goals(self.journal)

    def state_dir(self, node_id: str) -> Path:
        return self.dir / "state" / node_id

    def refine(self, *args: str, node: str = "n1", code: int = 0) -> str:
        done = subprocess.run(
            [PY, "-m", "refine_tui.cli", "--node", node, "--state-dir", str(self.state_dir(node)),
             *args],
            env=self.env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        self.outputs += [done.stdout, done.stderr]
        assert done.returncode == code, (args, done.stdout, done.stderr)
        return done.stdout

    def node(self, node_id: str = "n1") -> subprocess.Popen[bytes]:
        log = open(self.dir / f"node-{node_id}.out", "ab")  # noqa: SIM115
        argv = [PY, "-m", "refine_tui.cli", "--node", node_id, "--state-dir",
                str(self.state_dir(node_id)), "node"]  # fmt: skip
        proc = subprocess.Popen(argv, env=self.env, start_new_session=True, stdout=log, stderr=log)
        log.close()
        self.started.append(proc)
        return proc

    def goal(self, goal_id: str, code: str, *, node_id: str = "n1", **kw: Any) -> None:
        self.goals.create(
            goal_id=goal_id, title=goal_id, node_id=node_id, argv=[PY, "-c", code, self.marker],
            **kw,
        )  # fmt: skip

    def read(self, goal_id: str) -> tuple[str, Run]:
        goal = self.goals.read(goal_id)
        assert goal is not None
        run = self.goals.current_run(goal)
        assert run is not None
        return goal.status, run

    def registry(self, node_id: str = "n1") -> ProcessRegistry:
        return ProcessRegistry(
            self.url, node_id, self.journal.journal_id, state_dir=self.state_dir(node_id)
        )

    def running_record(self, goal_id: str, node_id: str = "n1") -> ProcessRecord | None:
        _, run = self.read(goal_id)
        attempt = run.running_attempt
        return None if attempt is None else self.registry(node_id).get(run.run_id, attempt.epoch)

    def ours(self) -> list[psutil.Process]:
        """Live processes of this test: by the recipe's marker or the environment's."""
        found = []
        for proc in psutil.process_iter(["cmdline", "status"]):
            with contextlib.suppress(psutil.Error):
                if proc.info["status"] == psutil.STATUS_ZOMBIE:
                    continue
                if self.marker in (proc.info["cmdline"] or ()) or (
                    proc.environ().get("REFINE_TEST_MARK") == self.marker
                ):
                    found.append(proc)
        return [p for p in found if p.pid != os.getpid()]

    def cleanup(self) -> None:
        for proc in self.started:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        for proc in self.ours():
            with contextlib.suppress(ProcessLookupError, psutil.Error):
                os.killpg(os.getpgid(proc.pid), signal.SIGKILL)
        wait_until(lambda: not self.ours(), timeout=10, what="no leftover processes")
        self.journal.close()

    def never_printed_a_password(self) -> None:
        logs = [p.read_text(errors="replace") for p in self.dir.rglob("*.out")]
        logs += [p.read_text(errors="replace") for p in self.dir.rglob("*.log")]
        assert not [text for text in self.outputs + logs if PASSWORD in text]
