"""Running attempts on one node (DESIGN §9): workers forked by the node's forkserver against
workers started as fresh processes (``REFINE_FORKSERVER=0``, the design before), side by side.

    python -m bench.attempts [--counts 1 100 1000] [--idle 5] [--modes forked fresh]
                             [--serial K] [--trees DIR ...]

For each count N: a fresh journal, a real ``refine node --capacity N``, then N ``refine goal
add`` commits (through the Goals API, in this process) of a recipe that sleeps. Once every
recipe runs:
- USS per attempt: the unique memory (psutil ``memory_full_info().uss``) of each attempt's
  worker process (the recipe itself, a ``sleep``, is the user's work and not counted), median;
- node RSS: the ``refine node`` process, and its forkserver's (shared with the workers);
- launch: from the Goal's ``goal.created`` commit (its ``committed_at``) to the recipe's
  start, which the recipe writes down first (``date``, then it execs ``sleep``: the process
  that runs it was forked before its claim, so its create time is not its start), p50, p95;
  and where that time went, p95 of each leg: commit → the worker's create time (psutil, put on
  the wall clock by a probe process; ±10 ms: the node waking and forking), → the claim's
  ``goal.started`` commit, → the recipe's start; and the CPU each launch took: the node's and
  forkserver's over all launches / N, plus the workers' with their claim helpers' (a reaped
  child, or the recipe's own process, which the helper became) until their recipes sleep / N;
- idle CPU of the node, and of all N workers together, over ``--idle`` seconds while the N
  attempts sleep (% of one core).

``--modes floor`` measures what no node can beat on this machine, beside the others: the same
commits and recipes, each recipe started by the committing process itself right after its
Goal's commit (``subprocess.Popen``: no node, no worker, no claim), launch p50 and p95 as above.

``--modes claim-spawn`` measures a floor for a node without a worker per attempt, built simply: a
process of the bench's own watches the journal (``PRAGMA data_version``, every ms), claims each
new batch of Goals in one transaction (``Goals.start_many``) and starts their recipes itself
(``os.posix_spawnp``, a session each). It writes no process record, rereads nothing before the
launch and supervises nothing: not a node, only the floor of one that claims and spawns.

``--serial K`` (count 1 only): K single attempts one after another on the same node, each
committed once the previous one's recipe runs, so p50/p95 of one attempt are over K launches.
``--trees A B``: the node runs the code of each tree in turn (its ``PYTHONPATH``), rounds
alternating, for before/after side by side under the same load.
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
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import psutil

from bench.common import percentile
from store.errors import JournalLockedError
from store.host.processes import node_workers
from store.journal.sqlite import Journal
from store.model.goals import GoalResult, Goals, Start
from store.node.scheduler import FORKSERVER_ENV

NODE = "bench-node"
SLEEP_S = 600
# The recipe: write its start (wall clock) to the file named by $0, then sleep as ``sleep``.
STAMP_THEN_SLEEP = f'date +%s.%N > "$0"; exec sleep {SLEEP_S}'


def _node(path: Path, capacity: int, mode: str, tree: str | None) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "refine_tui.cli", "--journal", str(path), "--node", NODE]
    env = {**os.environ, FORKSERVER_ENV: "1" if mode == "forked" else "0"}
    if tree is not None:
        env["PYTHONPATH"] = tree
    return subprocess.Popen(
        [*command, "node", "--capacity", str(capacity)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env=env,
        cwd=tree,  # ``python -m`` puts the working directory first on sys.path
    )


def _forkserver_rss(node: psutil.Process) -> float:
    for proc in node.children():
        with contextlib.suppress(psutil.Error):
            if "store.node.forkserver" in proc.cmdline():
                return float(proc.memory_info().rss) / 2**20
    return 0.0


def _recipes(node: psutil.Process) -> dict[int, psutil.Process]:
    """The running recipes (``sleep``) under the node, keyed by their worker's pid."""
    found = {}
    for proc in node.children(recursive=True):
        try:
            if proc.name() == "sleep":
                found[proc.ppid()] = proc
        except psutil.NoSuchProcess:
            continue
    return found


def _clock_offset() -> float:
    """psutil's create time minus the wall clock for a process started now (psutil derives
    create times from the boot time, which /proc gives in whole seconds)."""
    began = time.time()
    probe = subprocess.Popen(["sleep", "1"])
    try:
        return psutil.Process(probe.pid).create_time() - began
    finally:
        probe.kill()
        probe.wait()


def measure_one(
    count: int,
    idle_s: float,
    mode: str = "forked",
    timeout_s: float = 600.0,
    *,
    serial: int = 1,
    tree: str | None = None,
) -> dict[str, Any]:
    """``serial`` > 1 (``count`` 1): that many single attempts, one after another."""
    batches, total = ([1] * serial, serial) if count == 1 and serial > 1 else ([count], count)
    with tempfile.TemporaryDirectory(prefix="refine-attempts-") as scratch:
        path = Path(scratch) / "journal.db"
        Journal.open(path).close()
        proc = _node(path, total, mode, tree)
        node = psutil.Process(proc.pid)
        try:
            time.sleep(3.0)  # the node (and its forkserver) is up and watching before the commit
            node_family = [node, *node.children()]  # and its forkserver
            node_cpu = _cpu(node_family)
            with Journal.open(path) as journal:
                goals = Goals(journal)
                done = 0
                for batch in batches:
                    for n in range(done, done + batch):
                        _patiently(lambda n=n: goals.create(
                            goal_id=f"a{n}", title=f"sleep {n}", node_id=NODE,
                            argv=["sh", "-c", STAMP_THEN_SLEEP, str(Path(scratch) / f"a{n}")],
                        ))  # fmt: skip
                    done += batch
                    recipes = _wait_recipes(node, proc, done, timeout_s, 0.2 if batch > 1 else 0.01)
                    if batch == 1 and done < total:
                        time.sleep(0.3)  # idle again before the next one
                created, claimed = _commit_times(journal)
            launches, uss, offset = [], [], _clock_offset()
            legs: list[tuple[float, float, float]] = []
            names = {f"a{n}" for n in range(total)}
            for worker_pid in recipes:
                worker = psutil.Process(worker_pid)
                name = next(a for a in worker.cmdline() if a in names)
                goal = "goal:" + name
                began = float((Path(scratch) / name).read_text())
                launches.append((began - created[goal]) * 1000)
                forked = worker.create_time() - offset
                legs.append((forked - created[goal], claimed[goal] - forked, began - claimed[goal]))
                uss.append(worker.memory_full_info().uss / 2**20)
            node_cpu = _cpu(node_family) - node_cpu
            workers = [psutil.Process(pid) for pid in recipes]
            # psutil's ticks are 10 ms: a mean
            worker_cpu = (_cpu(workers, children=True) + _cpu(list(recipes.values()))) / total
            before, workers_before = node.cpu_times(), _on_cpu_ns(recipes)
            time.sleep(idle_s)
            after, workers_after = node.cpu_times(), _on_cpu_ns(recipes)
            busy = (after.user - before.user) + (after.system - before.system)
            return {
                "count": count,
                "mode": mode,
                "forkserver_rss_mb": _forkserver_rss(node),
                "uss_mb": sorted(uss)[len(uss) // 2],
                "node_rss_mb": node.memory_info().rss / 2**20,
                "launch_p50_ms": percentile(launches, 50),
                "launch_p95_ms": percentile(launches, 95),
                "legs_p95_ms": [percentile([leg[i] for leg in legs], 95) * 1000 for i in range(3)],
                "idle_cpu_pct": busy / idle_s * 100,
                "workers_cpu_pct": (workers_after - workers_before) / 1e9 / idle_s * 100,
                "launch_cpu_ms": (node_cpu / total + worker_cpu) * 1000,
                "serial": len(batches) if count == 1 else 1,
            }
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            # Workers outlive their node by design (own sessions; forked ones are not our
            # children): end each worker's process group, recipes included.
            for worker in node_workers(os.path.realpath(path), NODE):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(worker.pid, signal.SIGKILL)
            for child in psutil.Process().children(recursive=True):
                child.kill()  # any recipe the node's ending left behind (our own children)


def measure_floor(count: int, timeout_s: float = 600.0) -> dict[str, Any]:
    """Launch p50/p95 when each recipe starts right after its Goal's commit, by the committing
    process: the recipes' own start on this machine, with nothing of ours between."""
    with tempfile.TemporaryDirectory(prefix="refine-floor-") as scratch:
        path = Path(scratch) / "journal.db"
        recipes: list[subprocess.Popen[bytes]] = []
        try:
            with Journal.open(path) as journal:
                goals = Goals(journal)
                for n in range(count):
                    stamp = str(Path(scratch) / f"a{n}")
                    argv = ["sh", "-c", STAMP_THEN_SLEEP, stamp]
                    goals.create(goal_id=f"a{n}", title=f"sleep {n}", node_id=NODE, argv=argv)
                    recipes.append(subprocess.Popen(argv, start_new_session=True))
                created, _ = _commit_times(journal)
            stamps = [Path(scratch) / f"a{n}" for n in range(count)]
            deadline = time.monotonic() + timeout_s
            while not all(s.exists() and s.stat().st_size for s in stamps):
                if time.monotonic() > deadline:
                    raise RuntimeError("the floor's recipes did not all start")
                time.sleep(0.05)
            launches = [
                (float(s.read_text()) - created[f"goal:a{n}"]) * 1000 for n, s in enumerate(stamps)
            ]
        finally:
            for recipe in recipes:
                recipe.kill()
                recipe.wait()
    return {
        "count": count,
        "mode": "floor",
        "launch_p50_ms": percentile(launches, 50),
        "launch_p95_ms": percentile(launches, 95),
    }


def measure_claim_spawn(count: int, timeout_s: float = 600.0) -> dict[str, Any]:
    """Launch p50/p95 when a bare process claims each batch of new Goals in one transaction and
    spawns their recipes itself (see the module's doc: a floor, not a node)."""
    with tempfile.TemporaryDirectory(prefix="refine-claim-spawn-") as scratch:
        path = Path(scratch) / "journal.db"
        Journal.open(path).close()
        ready, go = os.pipe()
        done, end = os.pipe()
        claimer = os.fork()
        if claimer == 0:  # the bare claimer: never returns
            os.close(ready)
            os.close(end)
            code = 1
            try:
                _claim_and_spawn(path, count, go, timeout_s)
                os.read(done, 1)  # its recipes stay its children until they are ended
                code = 0
            finally:
                os._exit(code)
        os.close(go)
        os.close(done)
        try:
            os.read(ready, 1)  # watching before the first commit
            with Journal.open(path) as journal:
                goals = Goals(journal)
                for n in range(count):
                    _patiently(lambda n=n: goals.create(
                        goal_id=f"a{n}", title=f"sleep {n}", node_id=NODE,
                        argv=["sh", "-c", STAMP_THEN_SLEEP, str(Path(scratch) / f"a{n}")],
                    ))  # fmt: skip
                launches = _stamped_launches(journal, Path(scratch), count, timeout_s)
        finally:
            for recipe in psutil.Process(claimer).children():
                with contextlib.suppress(psutil.Error):
                    recipe.kill()
            os.close(ready)
            os.close(end)  # the claimer exits and its recipes' zombies go with it
            os.waitpid(claimer, 0)
    return {
        "count": count,
        "mode": "claim-spawn",
        "launch_p50_ms": percentile(launches, 50),
        "launch_p95_ms": percentile(launches, 95),
    }


def _claim_and_spawn(path: Path, count: int, ready: int, timeout_s: float) -> None:
    with Journal.open(path) as journal:
        goals, changes = Goals(journal), journal.changes()
        changes.changed()  # from now on
        os.write(ready, b".")
        after, started, deadline = 0, 0, time.monotonic() + timeout_s
        while started < count and time.monotonic() < deadline:
            if not changes.changed():
                time.sleep(0.001)
                continue
            new = []
            while events := journal.events_after(after):
                new += [e.aggregate_id.removeprefix("goal:") for e in events
                        if e.type == "goal.created"]  # fmt: skip
                after = events[-1].sequence
            claims = [Start(g, NODE, f"{NODE}/{g}", f"t-{g}") for g in new]
            for result in goals.start_many(claims) if claims else []:
                if isinstance(result, GoalResult):
                    argv = result.goal.recipe["argv"]
                    os.posix_spawnp(argv[0], argv, dict(os.environ), setsid=True)
            started += len(new)


def _stamped_launches(journal: Journal, scratch: Path, count: int, timeout_s: float) -> list[float]:
    """Each recipe's start (its stamp) less its Goal's ``goal.created`` commit, in ms."""
    stamps = [scratch / f"a{n}" for n in range(count)]
    deadline = time.monotonic() + timeout_s
    while not all(s.exists() and s.stat().st_size for s in stamps):
        if time.monotonic() > deadline:
            raise RuntimeError("the recipes did not all start")
        time.sleep(0.05)
    created, _ = _commit_times(journal)
    return [(float(s.read_text()) - created[f"goal:a{n}"]) * 1000 for n, s in enumerate(stamps)]


def _patiently(command: Callable[[], object], limit_s: float = 120.0) -> None:
    """Run a command again while the journal stays locked (a repeat replays): on a loaded box
    1,000 claims at once can hold the bench's own commits past the busy timeout."""
    deadline = time.monotonic() + limit_s
    while True:
        try:
            command()
            return
        except JournalLockedError:
            if time.monotonic() > deadline:
                raise


def _wait_recipes(
    node: psutil.Process, proc: subprocess.Popen[bytes], n: int, timeout_s: float, poll_s: float
) -> dict[int, psutil.Process]:
    deadline = time.monotonic() + timeout_s
    while len(recipes := _recipes(node)) < n:
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError(f"only {len(recipes)} of {n} recipes started")
        time.sleep(poll_s)
    return recipes


def _cpu(procs: list[psutil.Process], *, children: bool = False) -> float:
    """User + system CPU seconds of ``procs`` so far (and of their reaped ``children``: a
    worker's claim helper)."""
    total = 0.0
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            t = proc.cpu_times()
            total += t.user + t.system + (t.children_user + t.children_system if children else 0)
    return total


def _on_cpu_ns(pids: Iterable[int]) -> int:
    """Nanoseconds these processes have run on a CPU (``/proc/PID/schedstat``: psutil's CPU
    times count 10 ms ticks, and a sleeping worker uses less than one in a few seconds)."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError), open(f"/proc/{pid}/schedstat") as f:
            total += int(f.read().split()[0])
    return total


def _commit_times(journal: Journal) -> tuple[dict[str, float], dict[str, float]]:
    """Each Goal's ``goal.created`` and (last) ``goal.started`` commit times."""
    created: dict[str, float] = {}
    claimed: dict[str, float] = {}
    after = 0
    while events := journal.events_after(after, limit=1000):
        for e in events:
            if e.type in ("goal.created", "goal.started"):
                (created if e.type == "goal.created" else claimed)[e.aggregate_id] = e.committed_at
        after = events[-1].sequence
    return created, claimed


def _legs(p95_ms: list[float]) -> str:
    fork, claim, recipe = (f"{ms:.0f}" for ms in p95_ms)
    return f"p95 of commit → worker {fork} ms, → claim {claim} ms, → recipe {recipe} ms"


def rows(results: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return [_floor_row(r) if r["mode"] in FLOORS else _row(r) for r in results]


FLOORS = {
    "floor": "the floor (each recipe started by its committer: no node)",
    "claim-spawn": "claimed in batches and spawned by one bare process (no worker, no record)",
}


def _floor_row(r: dict[str, Any]) -> tuple[str, str, str]:
    return (
        f"{r['count']:,} at once, {FLOORS[r['mode']]}",
        f"launch p50 {r['launch_p50_ms']:.0f} ms p95 {r['launch_p95_ms']:.0f} ms",
        "what no node beats here" if r["mode"] == "floor" else "a floor for a node without workers",
    )


def _row(r: dict[str, Any]) -> tuple[str, str, str]:
    return (
        f"{r['count']:,} sleeping attempt(s), {r['mode']} workers"
        + (f" ({r['serial']} one after another)" if r.get("serial", 1) > 1 else ""),
        f"USS {r['uss_mb']:.1f} MB per attempt (worker); node RSS {r['node_rss_mb']:.0f} MB"
        f" (+ forkserver {r['forkserver_rss_mb']:.0f} MB);"
        f" launch p50 {r['launch_p50_ms']:.0f} ms p95 {r['launch_p95_ms']:.0f} ms"
        f" ({_legs(r['legs_p95_ms'])}); CPU per launch {r['launch_cpu_ms']:.1f} ms;"
        f" node idle CPU {r['idle_cpu_pct']:.2f} %,"
        f" all workers' idle CPU {r['workers_cpu_pct']:.2f} %",
        "≤ 4 MB USS, launch p95 ≤ 50 ms",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", type=int, nargs="+", default=[1, 100])
    parser.add_argument("--idle", type=float, default=5.0)
    parser.add_argument("--modes", nargs="+", default=["forked", "fresh"])
    parser.add_argument("--serial", type=int, default=1)
    parser.add_argument("--trees", nargs="+", default=[None])
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args(argv)
    for r in range(args.rounds):
        for n in args.counts:
            for mode in args.modes:
                for tree in args.trees if mode not in FLOORS else [None]:
                    if mode == "floor":
                        result = measure_floor(n)
                    elif mode == "claim-spawn":
                        result = measure_claim_spawn(n)
                    else:
                        result = measure_one(n, args.idle, mode, serial=args.serial, tree=tree)
                    for row in rows([result]):
                        print(f"round {r} {tree or '.'} | " * (tree is not None) + " | ".join(row))
                    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
