"""The real ``refine`` CLI and nodes on test hosts (hosts.py), all on one journal.

``Fleet(hosts, journal, env)``: ``journal`` is a ``postgresql://`` URL without a password (the
password comes in ``env`` as ``PGPASSWORD``) or a SQLite path. Each host's commands run with
its own ``HOME``/``XDG_STATE_HOME`` and no ``REFINE_*`` from the test's environment, so a
node's name is the host's name (its UTS hostname) unless ``--node`` says otherwise. Every
output is kept in ``outputs`` so a test can check that a password never appears.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tests.helpers.hosts import Host, HostProcess, Hosts

ROOT = Path(__file__).resolve().parents[2]
REFINE = [sys.executable, "-m", "refine_tui.cli"]
# The test's own settings must not leak into the hosts' commands.
_SCRUBBED = ("REFINE_JOURNAL", "REFINE_NODE", "REFINE_STATE_DIR", "REFINE_OPERATOR", "PGPASSWORD")


class Fleet:
    """Run ``refine`` commands and nodes on the hosts of ``hosts`` against one journal."""

    def __init__(self, hosts: Hosts, journal: str, env: Mapping[str, str] | None = None) -> None:
        self.hosts, self.journal = hosts, journal
        self.env: dict[str, str | None] = (
            {name: None for name in _SCRUBBED} | {"PYTHONPATH": _pythonpath()} | dict(env or {})
        )
        self.outputs: list[str] = []
        self.nodes: dict[str, HostProcess] = {}

    def _host(self, host: Host | str) -> Host:
        return self.hosts[host] if isinstance(host, str) else host

    def _environ(self, host: Host, env: Mapping[str, str] | None) -> dict[str, str | None]:
        # None unsets (an empty REFINE_* variable is bad usage, never "unset").
        return {**self.env, "REFINE_OPERATOR": f"op-{host.name}", **(env or {})}

    def refine(
        self,
        host: Host | str,
        *args: str,
        check: bool = True,
        env: Mapping[str, str] | None = None,
        timeout: float = 60,
    ) -> subprocess.CompletedProcess[str]:
        """``refine --journal J ARGS`` on ``host``; ``check``: fail unless it exits 0."""
        h = self._host(host)
        done = h.run(
            [*REFINE, "--journal", self.journal, *args],
            env=self._environ(h, env),
            cwd=ROOT,
            timeout=timeout,
        )
        self.outputs.append(done.stdout + done.stderr)
        if check and done.returncode != 0:
            raise AssertionError(f"refine {' '.join(args)} on {h.name}: {done.stderr.strip()}")
        return done

    def refine_json(self, host: Host | str, *args: str) -> Any:
        return json.loads(self.refine(host, *args, "--json").stdout)

    def goals(self, host: Host | str = "a") -> dict[str, dict[str, Any]]:
        """``refine goals --json`` on ``host``, by goal id."""
        return {g["goal_id"]: g for g in self.refine_json(host, "goals")}

    def start_node(self, host: Host | str, *args: str) -> HostProcess:
        """``refine node ARGS`` on ``host`` (its output in ``<base_dir>/<host>/node.out``)."""
        h = self._host(host)
        out = open(self.hosts.base_dir / h.name / "node.out", "ab")  # noqa: SIM115
        try:
            node = h.start(
                [*REFINE, "--journal", self.journal, "node", *args],
                env=self._environ(h, None),
                stdout=out,
                cwd=ROOT,
            )
        finally:
            out.close()  # the node holds its own copy
        self.nodes[h.name] = node
        return node

    def node_output(self, host: Host | str) -> str:
        path = self.hosts.base_dir / self._host(host).name / "node.out"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop_nodes(self) -> None:
        """SIGTERM every node started here and wait for it (workers keep running)."""
        for name, node in self.nodes.items():
            node.stop()
            self.outputs.append(self.node_output(name))

    def wait_for(self, predicate: Callable[[], object], what: str, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}\n{self.node_tails()}")
            time.sleep(0.1)

    def node_tails(self, lines: int = 40) -> str:
        """The last ``lines`` of each started node's output: what a timed-out wait shows."""
        tails = []
        for name in self.nodes:
            tail = self.node_output(name).splitlines()[-lines:]
            tails.append(f"--- node {name} ---\n" + "\n".join(tail))
            for log in self._host(name).state_home.glob("refine/*/*/node.log"):
                tail = log.read_text(errors="replace").splitlines()[-lines:]
                tails.append(f"--- {log.relative_to(self.hosts.base_dir)} ---\n" + "\n".join(tail))
        return "\n".join(tails)

    def node_log(self, host: Host | str) -> str:
        """What ``host``'s nodes and workers wrote to their ``node.log`` (workers say why)."""
        logs = self._host(host).state_home.glob("refine/*/*/node.log")
        return "".join(log.read_text(errors="replace") for log in logs)


def _pythonpath() -> str:
    """This checkout first, so commands in the hosts run the code under test."""
    rest = os.environ.get("PYTHONPATH", "")
    return os.pathsep.join(p for p in (str(ROOT), rest) if p)
