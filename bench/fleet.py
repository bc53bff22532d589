"""A fleet on one PostgreSQL server (DESIGN §14, issue 22): connections, launch and idle CPU.

    python -m bench.fleet [--nodes 10] [--attempts 50] [--max-connections 100] [--idle 20]
                          [--tree DIR]

The bench starts its own server (``max_connections`` as given, else the default 100; a temp
cluster as in tests/helpers/postgres_server.py), ``--nodes`` real ``refine node --capacity
ATTEMPTS`` processes (each its own state dir, the default ``--max-connections`` of 5) and then
commits nodes × attempts Goals at once (a recipe that sleeps) through the Goals API. Reported:

- connections: the most client connections any one node (with its workers) and all of them
  held at once, from ``pg_stat_activity`` sampled every 20 ms while launching and running
  (by ``application_name``: ``refine node N`` / ``refine worker N``);
- launch: from a Goal's ``goal.created`` commit to its recipe's process create time, p50/p95
  over every attempt (as ``bench.attempts``), and how long until the last one ran;
- idle CPU over ``--idle`` seconds once all run: the nodes (with their forkservers) together
  and per node, all the workers together, and the server's (% of one core);
- the operator: ``refine goals`` wall time once all run.

``--tree DIR`` runs the nodes from another checkout (its ``PYTHONPATH`` and working folder), for
a before/after under the same load (an older tree names no node in ``pg_stat_activity``: only
the total is known, and its workers need a server with room for one connection each).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
from dataclasses import astuple, dataclass
from pathlib import Path
from typing import Any

import psutil

_ROOT = Path(__file__).resolve().parent.parent
if str(_ROOT) not in sys.path:  # tests/helpers lives beside the package, not in it
    sys.path.insert(0, str(_ROOT))

from bench.attempts import _clock_offset, _commit_times, _cpu, _on_cpu_ns, _recipes  # noqa: E402
from bench.common import percentile  # noqa: E402
from bench.postgres import server_cpu  # noqa: E402
from store.journal.api import Journal  # noqa: E402
from store.model.goals import Goals  # noqa: E402
from tests.helpers.pg_activity import ConnectionSampler  # noqa: E402
from tests.helpers.postgres_server import PostgresServer  # noqa: E402

SLEEP_S = 3600


def _env(url: str, state: Path, tree: str | None) -> dict[str, str]:
    password = urllib.parse.urlsplit(url).password or ""
    env = {**os.environ, "PGPASSWORD": password, "XDG_STATE_HOME": str(state)}
    if tree is not None:
        env["PYTHONPATH"] = tree
    for name in ("REFINE_JOURNAL", "REFINE_STATE_DIR", "REFINE_MAX_CONNECTIONS", "REFINE_NODE"):
        env.pop(name, None)
    return env


def _refine(url: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "refine_tui.cli", "--journal", _bare(url), *args],
        env=env, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip


def _bare(url: str) -> str:
    """The URL without its password (which goes by $PGPASSWORD, never argv)."""
    parts = urllib.parse.urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    user = urllib.parse.unquote(parts.username or "")
    return urllib.parse.urlunsplit((parts.scheme, f"{user}@{host}", parts.path, "", ""))


def measure(
    nodes: int, attempts: int, max_connections: int, idle_s: float, tree: str | None = None
) -> dict[str, Any]:
    pg = PostgresServer.start_new(max_connections=max_connections)
    started: list[subprocess.Popen[bytes]] = []
    try:
        url = pg.create_database()
        with tempfile.TemporaryDirectory(prefix="refine-fleet-") as scratch:
            env = _env(url, Path(scratch), tree)
            _refine(url, env, "init")
            names = [f"n{k:02d}" for k in range(1, nodes + 1)]
            for name in names:
                argv = [sys.executable, "-m", "refine_tui.cli", "--journal", _bare(url),
                        "--node", name, "node", "--capacity", str(attempts)]  # fmt: skip
                quiet = subprocess.DEVNULL
                node = subprocess.Popen(
                    argv, env=env, start_new_session=True, stdout=quiet, stderr=quiet, cwd=tree
                )
                started.append(node)
            procs = [psutil.Process(p.pid) for p in started]
            with ConnectionSampler(url) as sampler:
                if tree is None:
                    _wait(lambda: sampler.now() == dict.fromkeys(names, 2), 120, "the nodes")
                else:  # no names: give them time
                    time.sleep(5.0)
                with Journal.open(url) as journal:
                    goals = Goals(journal)
                    burst_before = _burst_cpu(pg, procs, {})
                    began = time.monotonic()
                    for name in names:
                        for i in range(attempts):
                            goals.create(
                                goal_id=f"{name}-{i}", title="sleep", node_id=name,
                                argv=["sleep", str(SLEEP_S)],
                            )  # fmt: skip
                    committed = time.monotonic() - began
                    total = nodes * attempts
                    _wait(lambda: sum(len(_recipes(p)) for p in procs) >= total, 900, "recipes")
                    all_ran = time.monotonic() - began
                    recipes = {pid: r for p in procs for pid, r in _recipes(p).items()}
                    burst = _burst_cpu(pg, procs, recipes) - burst_before
                    burst_s = time.monotonic() - began  # the window the box's CPU was read over
                    created, _ = _commit_times(journal)
                offset = _clock_offset()
                launches = []
                for worker_pid, recipe in recipes.items():
                    with contextlib.suppress(psutil.Error, StopIteration):
                        argv = psutil.Process(worker_pid).cmdline()
                        goal = "goal:" + argv[argv.index("--goal") + 1]
                        launches.append((recipe.create_time() - offset - created[goal]) * 1000)
                time.sleep(2.0)  # the last reports of the launch settle
                families = [q for p in procs for q in (p, *p.children())]  # nodes, forkservers
                node_before, workers_before = _cpu(families), _on_cpu_ns(recipes)
                server_before = server_cpu(pg)
                time.sleep(idle_s)
                node_cpu = (_cpu(families) - node_before) / idle_s * 100
                workers_cpu = (_on_cpu_ns(recipes) - workers_before) / 1e9 / idle_s * 100
                server = (server_cpu(pg) - server_before) / idle_s * 100
                wall = time.perf_counter()
                _refine(url, env, "goals")
                goals_ms = (time.perf_counter() - wall) * 1000
            return {
                "nodes": nodes,
                "attempts": attempts,
                "server_limit": max_connections,
                "peak_node": max(sampler.peak_by_node.values(), default=0),
                "peak_total": sampler.peak_total,
                "samples": sampler.samples,
                "idle_per_node": max(sampler.now().values(), default=0),
                "commit_s": committed,
                "all_ran_s": all_ran,
                "burst_s": burst_s,
                "launch_p50_ms": percentile(launches, 50),
                "launch_p95_ms": percentile(launches, 95),
                "launched": len(launches),
                "node_cpu_pct": node_cpu,
                "workers_cpu_pct": workers_cpu,
                "server_cpu_pct": server,
                "goals_ms": goals_ms,
                "burst": burst,
            }
    finally:
        _end(started)
        pg.destroy()


@dataclass(frozen=True)
class _BurstCpu:
    """CPU seconds so far of the server, the nodes (with their forkservers), the workers
    (with their claim helpers, now their recipes: CPU survives ``exec``) and the whole box;
    and the server's sessions so far (each a backend forked)."""

    server: float
    nodes: float
    workers: float
    box: float
    sessions: int

    def __sub__(self, other: _BurstCpu) -> _BurstCpu:
        return _BurstCpu(*(a - b for a, b in zip(astuple(self), astuple(other), strict=True)))


def _burst_cpu(
    pg: PostgresServer, nodes: list[psutil.Process], recipes: dict[int, psutil.Process]
) -> _BurstCpu:
    families = [q for p in nodes for q in (p, *p.children()) if "store.worker" not in _argv(q)]
    workers = [psutil.Process(pid) for pid in recipes if psutil.pid_exists(pid)]
    busy = psutil.cpu_times()
    box = busy.user + busy.nice + busy.system + busy.irq + busy.softirq + busy.steal
    with pg.admin() as admin:  # counted at each session's end: read once the burst ran
        row = admin.execute("SELECT sum(sessions) FROM pg_stat_database").fetchone()
    sessions = int(row[0]) if row and row[0] is not None else 0
    return _BurstCpu(
        server_cpu(pg),
        _cpu(families),
        _cpu(workers) + _cpu(list(recipes.values())),
        box,
        sessions,
    )


def _argv(proc: psutil.Process) -> list[str]:
    with contextlib.suppress(psutil.Error):
        return proc.cmdline()
    return []


def _end(nodes: list[subprocess.Popen[bytes]]) -> None:
    """Each node's workers first (their own sessions outlive the node: each group, recipes
    included), found while the node still is their forkserver's parent; then the nodes."""
    for node in nodes:
        with contextlib.suppress(psutil.Error):
            for proc in psutil.Process(node.pid).children(recursive=True):
                with contextlib.suppress(psutil.Error, ProcessLookupError):
                    if "store.worker" in proc.cmdline():
                        os.killpg(proc.pid, signal.SIGKILL)
    for node in nodes:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(node.pid, signal.SIGTERM)
    for node in nodes:
        try:
            node.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(node.pid, signal.SIGKILL)
            node.wait()


def _wait(condition: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.2)


def rows(r: dict[str, Any]) -> list[tuple[str, str, str]]:
    fleet = f"{r['nodes']} nodes × {r['attempts']} attempts, max_connections {r['server_limit']}"
    return [
        (
            f"fleet {fleet}: connections",
            f"peak {r['peak_node']} per node (node + workers), {r['peak_total']} in all"
            f" ({r['samples']:,} samples); {r['idle_per_node']} per node while all run",
            "≤ 5 per node",
        ),
        (
            f"fleet {fleet}: launch",
            f"p50 {r['launch_p50_ms']:.0f} ms, p95 {r['launch_p95_ms']:.0f} ms"
            f" ({r['launched']} attempts; committed in {r['commit_s']:.1f} s,"
            f" all running after {r['all_ran_s']:.1f} s)",
            "",
        ),
        (
            f"fleet {fleet}: idle CPU",
            f"nodes {r['node_cpu_pct']:.2f} % ({r['node_cpu_pct'] / r['nodes']:.2f} % each),"
            f" all workers {r['workers_cpu_pct']:.2f} %, server {r['server_cpu_pct']:.2f} %;"
            f" `refine goals` {r['goals_ms']:.0f} ms",
            "",
        ),
        _burst_row(fleet, r),
    ]


def _burst_row(fleet: str, r: dict[str, Any]) -> tuple[str, str, str]:
    """Where the launch burst's CPU went, per launch, beside what the box had."""
    burst: _BurstCpu = r["burst"]
    per = 1000 / max(r["launched"], 1)  # ms per launch
    box_s = r["burst_s"] * psutil.cpu_count()  # the recipes' scan after the burst is in both
    return (
        f"fleet {fleet}: burst CPU",
        f"per launch: server {burst.server * per:.1f} ms, nodes {burst.nodes * per:.1f} ms,"
        f" workers and claim helpers {burst.workers * per:.1f} ms; the box busy"
        f" {burst.box:.0f} of {box_s:.0f} core-seconds; {burst.sessions * per / 1000:.2f}"
        " server sessions per launch",
        "",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--attempts", type=int, default=50)
    parser.add_argument("--max-connections", type=int, default=100)
    parser.add_argument("--idle", type=float, default=20.0)
    parser.add_argument("--tree", default=None)
    args = parser.parse_args(argv)
    result = measure(args.nodes, args.attempts, args.max_connections, args.idle, args.tree)
    for row in rows(result):
        print(" | ".join(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
