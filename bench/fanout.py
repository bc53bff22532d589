"""The fan-out on PostgreSQL (issue 27 item 2): what a commit costs the server as listeners grow.

    python -m bench.fanout [--rate 50] [--seconds 20] [--layouts 1x1 10x5] [--rounds 1]
                           [--dashboards]

For each layout NODESxFOLLOWERS the bench starts its own server (as ``bench.fleet``), that many
real ``refine node`` processes (``n01`` …) and that many ``refine events --follow`` processes
(a reader that, as a dashboard does, wakes and reads on every commit), then commits ``goal
add``s for a node that none of them is (``elsewhere``) at ``--rate`` per second for
``--seconds``, through the Goals API from this process. Reported per layout: the server's CPU
per commit (its processes' CPU over the window ÷ commits: the committer's backend, the
NOTIFYs, and every listener's reads), the nodes' CPU (% of a core, each: commits not their own)
and the followers'. The target: server CPU per commit at 10 nodes + 5 followers ≤ 2× that at
1 + 1, a node's idle CPU ≤ 0.1 % while the commits are not its own. ``--rounds N`` measures
the layouts in turn N times and reports medians, and each round's ratio (DESIGN §9: ratios side
by side, interleaved, medians). ``--dashboards``: the followers are real dashboards (the app,
headless, ``bench.fanout_dashboard``), and each commit's row painted is timed at every one
(target: p95 ≤ 50 ms at every dashboard).
"""

from __future__ import annotations

import argparse
import json
import select
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median
from typing import Any

import psutil
import psycopg

_ROOT = Path(__file__).resolve().parent.parent
if str(_ROOT) not in sys.path:  # tests/helpers lives beside the package, not in it
    sys.path.insert(0, str(_ROOT))

from bench.attempts import _cpu  # noqa: E402
from bench.common import percentile  # noqa: E402
from bench.fleet import _bare, _end, _env, _refine, _wait  # noqa: E402
from bench.postgres import cpu_seconds, server_cpu_since, server_reading  # noqa: E402
from store.journal.api import Journal  # noqa: E402
from store.model.goals import Goals  # noqa: E402
from tests.helpers.pg_activity import ConnectionSampler  # noqa: E402
from tests.helpers.postgres_server import PostgresServer  # noqa: E402

ROLES = ("node", "dashboard", "follower", "committer")  # whose backends, in the report's order
SETTLE_S = 3.0  # after the listeners connect: their start-up reads end


def measure(
    nodes: int, followers: int, rate: float, seconds: float, dashboards: bool = False
) -> dict[str, Any]:
    """``dashboards``: the followers are real dashboards (``bench.fanout_dashboard``), and each
    one's commit → row painted is measured for every commit."""
    pg = PostgresServer.start_new(max_connections=100)
    started: list[subprocess.Popen[Any]] = []
    try:
        url = pg.create_database()
        with tempfile.TemporaryDirectory(prefix="refine-fanout-") as scratch:
            env = _env(url, Path(scratch), None)
            _refine(url, env, "init")
            if dashboards:  # a dashboard is ready once it lists a Goal
                _refine(url, env, "goal", "add", "--title", "seed", "--node", "elsewhere", "true")
            names = [f"n{k:02d}" for k in range(1, nodes + 1)]
            base = [sys.executable, "-m", "refine_tui.cli", "--journal", _bare(url)]
            quiet = subprocess.DEVNULL
            for name in names:
                argv = [*base, "--node", name, "node"]
                started.append(
                    subprocess.Popen(
                        argv, env=env, start_new_session=True, stdout=quiet, stderr=quiet
                    )
                )
            readers: list[subprocess.Popen[Any]]
            readers_role = "dashboard" if dashboards else "follower"
            if dashboards:
                board = [sys.executable, "-m", "bench.fanout_dashboard", "--journal", _bare(url)]
                readers = [_dashboard(board, env) for _ in range(followers)]
            else:
                follow = [*base, "events", "--follow"]
                readers = [
                    subprocess.Popen(follow, env=env, start_new_session=True, stdout=quiet)
                    for _ in range(followers)
                ]
            started += readers
            for reader in readers if dashboards else ():
                _ready(reader)
            node_procs = [psutil.Process(p.pid) for p in started[:nodes]]
            reader_procs = [psutil.Process(p.pid) for p in readers]
            with ConnectionSampler(url) as sampler:
                _wait(lambda: sampler.now() == dict.fromkeys(names, 2), 120, "the nodes")
            time.sleep(SETTLE_S)
            with Journal.open(url) as journal:
                goals = Goals(journal)
                goals.read("seed")  # the committer's connection, open before the roles are read
                families = [q for p in node_procs for q in (p, *p.children())]
                node_before, readers_before = _cpu(families), _cpu(reader_procs)
                roles = backend_roles(
                    url,
                    {
                        "node": families,
                        readers_role: reader_procs,
                        "committer": [psutil.Process()],
                    },
                )
                backends_before = _backends_cpu(roles)
                server_before = server_reading(pg)
                began = time.monotonic()
                commits = 0
                # goal → when its create was called: a dashboard may paint the row before the
                # call returns here (the commit is seen before its answer is read), so the time
                # of the call, which counts the commit's own ≈ 2 ms too, never goes negative.
                committed: dict[str, float] = {}
                while (due := commits / rate) < seconds:  # rate × seconds commits, paced
                    time.sleep(max(0.0, began + due - time.monotonic()))
                    committed[f"g{commits}"] = time.monotonic()
                    goals.create(
                        goal_id=f"g{commits}", title="elsewhere", node_id="elsewhere",
                        argv=["true"],
                    )  # fmt: skip
                    commits += 1
                committed_s = time.monotonic() - began
                time.sleep(1.0)  # the last notifications are read
                wall = time.monotonic() - began
                server = server_cpu_since(pg, server_before)
                by_role = _by_role(roles, backends_before, _backends_cpu(roles))
                node_cpu = _cpu(families) - node_before
                readers_cpu = _cpu(reader_procs) - readers_before
            rows_ms = [_painted(reader, committed) for reader in readers] if dashboards else []
            return {
                "nodes": nodes,
                "followers": followers,
                "dashboards": dashboards,
                "rows_ms": rows_ms,  # each dashboard's commit → row painted, ms (None: missed)
                "commits": commits,
                "rate": commits / committed_s,
                "server_ms_per_commit": server / commits * 1000,
                "server_pct": server / wall * 100,
                "node_pct_each": node_cpu / wall * 100 / max(nodes, 1),
                "follower_pct_each": readers_cpu / wall * 100 / max(followers, 1),
                # each role's backends, server CPU ms per commit (all of the role's together)
                "server_ms_by_role": {role: cpu / commits * 1000 for role, cpu in by_role.items()},
            }
    finally:
        _end(started)
        pg.destroy()


def backend_roles(url: str, roles: dict[str, list[psutil.Process]]) -> dict[int, str]:
    """The server backends serving each role's processes, by their pids: a backend's client
    port (``pg_stat_activity``) is a local port of one of the role's TCP connections."""
    ports: dict[int, str] = {}
    for role, procs in roles.items():
        for proc in procs:
            for conn in proc.net_connections(kind="tcp"):
                if conn.raddr and conn.laddr:
                    ports[conn.laddr.port] = role
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT pid, client_port FROM pg_stat_activity").fetchall()
    return {int(pid): ports[port] for pid, port in rows if port in ports}


def _backends_cpu(roles: dict[int, str]) -> dict[int, float]:
    """CPU seconds each backend has used (a backend gone since is left out)."""
    found = {}
    for pid in roles:
        if (seconds := cpu_seconds(pid)) is not None:
            found[pid] = seconds
    return found


def _by_role(
    roles: dict[int, str], before: dict[int, float], after: dict[int, float]
) -> dict[str, float]:
    """Each role's backends' CPU seconds between two readings (a backend in both)."""
    total: dict[str, float] = dict.fromkeys(roles.values(), 0.0)
    for pid, role in roles.items():
        if pid in before and pid in after:
            total[role] += after[pid] - before[pid]
    return total


def _dashboard(
    argv: list[str], env: dict[str, str], cwd: Path | str = _ROOT
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        argv, env=env, cwd=cwd, start_new_session=True, text=True,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )  # fmt: skip


def _ready(reader: subprocess.Popen[str], timeout_s: float = 180.0) -> None:
    """Until the dashboard says it lists every Goal; RuntimeError if it does not."""
    assert reader.stdout is not None
    said, _, _ = select.select([reader.stdout], [], [], timeout_s)
    if not said or reader.stdout.readline().strip() != "ready":
        raise RuntimeError(f"a dashboard did not start within {timeout_s:g} s")


def _painted(reader: subprocess.Popen[str], committed: dict[str, float]) -> list[float | None]:
    """A dashboard's commit → row painted for each commit, in ms (told the Goals committed, its
    stdin closed: it says, once it has painted them or given up on them)."""
    out, _ = reader.communicate(input="\n".join(committed), timeout=90)
    painted = json.loads(out.splitlines()[-1])
    return [
        (painted[goal] - at) * 1000 if goal in painted else None for goal, at in committed.items()
    ]


def _latency(result: dict[str, Any]) -> str:
    """The dashboards' commit → row: the worst dashboard's p95, and every one's."""
    per = []
    for samples in result["rows_ms"]:
        shown = [v for v in samples if v is not None]
        missed = len(samples) - len(shown)
        per.append((percentile(shown, 95) if shown else float("inf"), missed))
    worst = max(p95 for p95, _ in per)
    each = ", ".join(f"{p95:.0f}" for p95, _ in per)
    missed = sum(m for _, m in per)
    return f"p95 {worst:.0f} ms at the slowest dashboard (each: {each} ms); missed {missed}"


def _split(runs: list[dict[str, Any]], counts: dict[str, int]) -> str:
    """The server's CPU per commit by the role its backend serves (medians over the rounds):
    each node's, each reader's, the committer's, and what no client's backend did (the
    server's own processes: WAL writer, checkpointer, autovacuum…)."""
    parts = []
    found = runs[0].get("server_ms_by_role", {})
    for role in [r for r in ROLES if r in found]:
        each = median(r["server_ms_by_role"][role] for r in runs) / max(counts.get(role, 1), 1)
        parts.append(f"{role} {each:.2f} ms" + (" each" if role in counts else ""))
    rest = median(r["server_ms_per_commit"] - sum(r["server_ms_by_role"].values()) for r in runs)
    return ", ".join([*parts, f"the rest {rest:.2f} ms"])


def rows(results: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """A line per layout (the median of its rounds, each round's figure after it), then the
    ratio of the largest layout's median server CPU per commit to the smallest's."""
    layouts: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for r in results:
        layouts.setdefault((r["nodes"], r["followers"]), []).append(r)
    out = []
    for (nodes, followers), runs in layouts.items():
        server = [r["server_ms_per_commit"] for r in runs]
        each = f" ({', '.join(f'{v:.2f}' for v in server)})" if len(runs) > 1 else ""
        rate, commits = median(r["rate"] for r in runs), runs[0]["commits"]
        readers = "dashboards" if runs[0].get("dashboards") else "followers"
        out.append(
            (
                f"fan-out {nodes} nodes + {followers} {readers}",
                f"server {median(server):.2f} ms CPU per commit{each} ("
                f"{median(r['server_pct'] for r in runs):.1f} % of a core at {rate:.0f}"
                f" commits/s, {commits} commits); node"
                f" {median(r['node_pct_each'] for r in runs):.2f} % each (none its own);"
                f" {readers[:-1]} {median(r['follower_pct_each'] for r in runs):.2f} % each",
                "node ≤ 0.1 %",
            )
        )
        out.append(
            (
                f"fan-out {nodes} + {followers}: server CPU per commit by whose backend",
                _split(runs, {"node": nodes, "dashboard": followers, "follower": followers}),
                "",
            )
        )
        for k, r in enumerate(runs if runs[0].get("dashboards") and followers else ()):
            out.append(
                (
                    f"fan-out {nodes} + {followers}, commit → row painted (round {k + 1})",
                    _latency(r),
                    "≤ 50 ms",
                )
            )
    if len(layouts) >= 2:
        small, *_, big = [[r["server_ms_per_commit"] for r in runs] for runs in layouts.values()]
        ratio = median(big) / median(small)
        rounds = ""
        if len(small) == len(big) > 1:  # each round's own ratio, its layouts side by side
            ratios = [b / a for a, b in zip(small, big, strict=True)]
            rounds = f" (rounds: {', '.join(f'{v:.2f}×' for v in ratios)})"
        out.append(
            (
                "fan-out: server CPU per commit, largest ÷ smallest layout",
                f"{ratio:.2f}×{rounds}",
                "≤ 2×",
            )
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--layouts", nargs="+", default=["1x1", "10x5"])
    parser.add_argument(
        "--rounds", type=int, default=1, help="the layouts one after another, this many times"
    )
    parser.add_argument(
        "--dashboards", action="store_true", help="real dashboards (headless) as the followers"
    )
    args = parser.parse_args(argv)
    results = []
    for _ in range(args.rounds):  # interleaved: a drift of the machine falls on every layout
        for layout in args.layouts:
            nodes, followers = (int(part) for part in layout.split("x"))
            results.append(measure(nodes, followers, args.rate, args.seconds, args.dashboards))
    for row in rows(results):
        print(" | ".join(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
