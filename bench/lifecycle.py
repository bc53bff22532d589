"""Job lifecycle throughput (DESIGN §9): ours against the SQLite job queues a user would pick.

    python -m bench.lifecycle [--jobs 2000] [--rounds 5] [--sync FULL NORMAL] [--probe-jobs 200]

One job = three commits, each system through its own public API:
- ours, Execution: ``submit`` → ``claim`` → ``complete``;
- ours, Goals: ``create`` → ``start`` → ``settle`` (each also changes the Goal's Run);
- huey ``SqliteStorage``: ``enqueue`` → ``dequeue`` → ``put_data`` (the result);
- persist-queue ``SQLiteAckQueue``: ``put`` → ``get`` → ``ack``;
- litequeue ``LiteQueue``: ``put`` → ``pop`` → ``done``;
- an eventsourcing ``Application``, one aggregate per job: create + save, then twice
  ``repository.get`` + a change + save (a worker reads the job before changing it, as ours does).

Every run is a child process on a fresh file in WAL mode with the same ``synchronous``; rounds
are interleaved (the order rotates each round) and the figures are medians over rounds, with
the ratio ours / peer taken per round. CPU per job is the child's process time over the timed
loop. WAL pages per job come from a separate, untimed probe per system: a reader holding an
old snapshot keeps the WAL from restarting, so its growth over the probe, divided by
(page size + 24), is the number of frames the jobs wrote — whatever checkpoint settings the
system uses, and without changing any of its connections.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

OURS = ("execution", "goals")
PEERS = ("huey", "persist-queue", "litequeue", "eventsourcing")
SYSTEMS = OURS + PEERS
PINS = {
    "candidate_digest": "sha256:" + "ab" * 32,
    "recipe_revision": "recipe.v1",
    "scenario_revision": "scenario.v1",
}
BUDGET = {"max_attempts": 3, "attempt_timeout_ms": 3_600_000}
PAYLOAD = '{"argv":["sh","-c","make check"],"title":"job"}'


# --- one system: open on a fresh file, then a function that runs job n -------------------------

Job = Callable[[int], None]


class System:
    """A system opened on ``folder`` at ``sync``: ``db`` is its SQLite file, ``job(n)`` one job."""

    db: Path
    job: Job

    def close(self) -> None: ...


class Execution_(System):
    def __init__(self, folder: Path, sync: str) -> None:
        from store.journal.sqlite import Journal
        from store.model.execution import Execution

        self.db = folder / "journal.db"
        self.journal = Journal.open(self.db, synchronous=sync)  # type: ignore[arg-type]
        ex = Execution(self.journal)

        def job(n: int) -> None:
            run_id = f"job{n}"
            ex.submit(command_id=f"{run_id}:submit", run_id=run_id, pins=PINS, budget=BUDGET)
            ex.claim(command_id=f"{run_id}:claim", run_id=run_id, expected_version=1, worker="w1")
            ex.complete(
                command_id=f"{run_id}:settle:1",
                run_id=run_id,
                expected_version=2,
                epoch=1,
                evidence=["log:1"],
            )

        self.job = job

    def close(self) -> None:
        self.journal.close()


class Goals_(System):
    def __init__(self, folder: Path, sync: str) -> None:
        from store.journal.sqlite import Journal
        from store.model.goals import Goals

        self.db = folder / "journal.db"
        self.journal = Journal.open(self.db, synchronous=sync)  # type: ignore[arg-type]
        goals = Goals(self.journal)

        def job(n: int) -> None:
            gid = f"g{n}"
            goals.create(goal_id=gid, title="job", node_id="n1", argv=["sh", "-c", "make check"])
            goals.start(goal_id=gid, node_id="n1", worker="w1", token=f"t{n}", round=1)
            goals.settle(
                goal_id=gid, run_id=gid + ".r1", epoch=1, outcome="completed", evidence=["log:1"]
            )

        self.job = job

    def close(self) -> None:
        self.journal.close()


class Huey(System):
    def __init__(self, folder: Path, sync: str) -> None:
        from huey.storage import SqliteStorage  # type: ignore[import-untyped]

        self.db = folder / "huey.db"
        self.storage = SqliteStorage("bench", str(self.db))
        self.storage.conn.execute(f"PRAGMA synchronous = {sync}")
        storage = self.storage

        def job(n: int) -> None:
            storage.enqueue(PAYLOAD.encode())
            data = storage.dequeue()
            assert data is not None
            storage.put_data(f"result:{n}", b'{"ok":true}', is_result=True)

        self.job = job

    def close(self) -> None:
        self.storage.close()


class PersistQueue(System):
    def __init__(self, folder: Path, sync: str) -> None:
        from persistqueue import SQLiteAckQueue

        self.queue = SQLiteAckQueue(str(folder / "pq"), auto_commit=True)
        self.db = folder / "pq" / self.queue.db_file_name
        self.queue._conn.execute(f"PRAGMA synchronous = {sync}")
        queue = self.queue

        def job(n: int) -> None:
            queue.put(PAYLOAD)
            item = queue.get(block=False, raw=True)
            queue.ack(id=item["pqid"])

        self.job = job

    def close(self) -> None:
        self.queue.close()


class LiteQueue(System):
    def __init__(self, folder: Path, sync: str) -> None:
        from litequeue import LiteQueue as Queue  # type: ignore[import-untyped]

        self.db = folder / "litequeue.db"
        self.queue = Queue(str(self.db))
        self.queue.conn.execute(f"PRAGMA synchronous = {sync}")  # it sets NORMAL itself
        queue = self.queue

        def job(n: int) -> None:
            queue.put(PAYLOAD)
            message = queue.pop()
            assert message is not None
            queue.done(message.message_id)

        self.job = job

    def close(self) -> None:
        self.queue.close()


class EventSourcing(System):
    def __init__(self, folder: Path, sync: str) -> None:
        from eventsourcing.application import Application
        from eventsourcing.domain import Aggregate, event
        from eventsourcing.sqlite import SQLiteConnectionPool

        create = SQLiteConnectionPool._create_connection

        def with_sync(pool: SQLiteConnectionPool) -> Any:  # every pooled connection alike
            conn = create(pool)
            conn._sqlite_conn.execute(f"PRAGMA synchronous = {sync}")
            return conn

        SQLiteConnectionPool._create_connection = with_sync  # type: ignore[method-assign,assignment]

        class BenchJob(Aggregate):
            @event("Created")
            def __init__(self, payload: str) -> None:
                self.payload, self.status, self.worker = payload, "queued", ""

            @event("Started")
            def start(self, worker: str) -> None:
                self.status, self.worker = "running", worker

            @event("Settled")
            def settle(self, outcome: str) -> None:
                self.status = outcome

        self.db = folder / "es.db"
        self.app: Any = Application(
            env={"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": str(self.db)}
        )
        app = self.app

        def job(n: int) -> None:
            created = BenchJob(PAYLOAD)
            app.save(created)
            started: Any = app.repository.get(created.id)
            started.start("w1")
            app.save(started)
            settled: Any = app.repository.get(created.id)
            settled.settle("completed")
            app.save(settled)

        self.job = job

    def close(self) -> None:
        self.app.close()


OPENERS: dict[str, Callable[[Path, str], System]] = {
    "execution": Execution_,
    "goals": Goals_,
    "huey": Huey,
    "persist-queue": PersistQueue,
    "litequeue": LiteQueue,
    "eventsourcing": EventSourcing,
}


# --- in the child ------------------------------------------------------------------------------


def _timed(name: str, sync: str, jobs: int, folder: Path) -> dict[str, float]:
    system = OPENERS[name](folder, sync)
    try:
        wall, cpu = time.perf_counter(), time.process_time()
        for n in range(jobs):
            system.job(n)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    finally:
        system.close()
    return {"wall": wall, "cpu": cpu}


def _pages(name: str, sync: str, jobs: int, folder: Path) -> dict[str, float]:
    """WAL frames written per job, counted while a pinned reader keeps the WAL from restarting."""
    system = OPENERS[name](folder, sync)
    pin = sqlite3.connect(system.db, isolation_level=None)
    try:
        system.job(0)  # warm: the tables exist and hold a row, like the timed runs after job 0
        pin.execute("BEGIN")
        pin.execute("SELECT count(*) FROM sqlite_master").fetchone()  # a snapshot with frames
        page = pin.execute("PRAGMA page_size").fetchone()[0]
        wal = Path(f"{system.db}-wal")
        before = wal.stat().st_size
        for n in range(1, jobs + 1):
            system.job(n)
        after = wal.stat().st_size
        if after <= before:
            raise RuntimeError(f"{name}: the WAL did not grow; the count would be wrong")
        return {"pages": (after - before) / (page + 24) / jobs, "page_size": page}
    finally:
        pin.close()
        system.close()


def _child(kind: str, name: str, sync: str, jobs: int) -> None:
    with tempfile.TemporaryDirectory(prefix="refine-lifecycle-") as scratch:
        run = _pages if kind == "pages" else _timed
        print(json.dumps(run(name, sync, jobs, Path(scratch))))


# --- in the parent -----------------------------------------------------------------------------


def _spawn(kind: str, name: str, sync: str, jobs: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [_ROOT, _PYTHONPATH]))}
    done = subprocess.run(
        [sys.executable, "-m", "bench.lifecycle", "child", kind, name, sync, str(jobs)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{name} {kind} {sync} failed:\n{done.stderr}")
    return json.loads(done.stdout.splitlines()[-1])  # type: ignore[no-any-return]


_ROOT = str(Path(__file__).resolve().parent.parent)
_PYTHONPATH = os.environ.get("PYTHONPATH", "")


def measure(
    sync: str,
    jobs: int,
    rounds: int,
    probe_jobs: int,
    systems: tuple[str, ...] = SYSTEMS,
    log: Callable[[str], None] = lambda _: None,
) -> dict[str, dict[str, Any]]:
    """Per system: jobs/s per round (wall and CPU), CPU ms per job, WAL pages per job."""
    timings: dict[str, list[dict[str, float]]] = {name: [] for name in systems}
    for r in range(rounds):
        order = systems[r % len(systems) :] + systems[: r % len(systems)]
        for name in order:
            timings[name].append(_spawn("timed", name, sync, jobs))
        log(f"lifecycle {sync}: round {r + 1}/{rounds}")
    out: dict[str, dict[str, Any]] = {}
    for name in systems:
        walls = [t["wall"] for t in timings[name]]
        cpus = [t["cpu"] for t in timings[name]]
        out[name] = {
            "rates": [jobs / w for w in walls],
            "rate": jobs / statistics.median(walls),
            "cpu_ms": statistics.median(cpus) / jobs * 1000,
            "pages": _spawn("pages", name, sync, probe_jobs)["pages"],
        }
    return out


def ratio(m: dict[str, dict[str, Any]], ours: str, peer: str) -> tuple[float, float, float]:
    """Median, min and max over rounds of ours / peer jobs per second (same round)."""
    per_round = [a / b for a, b in zip(m[ours]["rates"], m[peer]["rates"], strict=True)]
    return statistics.median(per_round), min(per_round), max(per_round)


TARGETS = {
    "execution": (("huey", "persist-queue"), "≥ 1.0× huey and persist-queue"),
    "goals": (("eventsourcing",), "≥ 1.0× eventsourcing"),
}


def rows(m: dict[str, dict[str, Any]], sync: str) -> list[tuple[str, str, str]]:
    """Rows for bench's table: each of ours against every peer, then the peers' own figures."""
    out = []
    for ours in OURS:
        if ours not in m:
            continue
        parts = []
        for peer in PEERS:
            if peer in m:
                mid, low, high = ratio(m, ours, peer)
                parts.append(f"{mid:.2f}× {peer} ({low:.2f}–{high:.2f})")
        me = m[ours]
        out.append((
            f"{ours} lifecycle, {sync}",
            f"{me['rate']:,.0f} jobs/s, {me['cpu_ms']:.2f} ms CPU, {me['pages']:.1f} WAL pages"
            f" per job; " + ", ".join(parts),
            TARGETS[ours][1],
        ))  # fmt: skip
    peers = [
        f"{p} {m[p]['rate']:,.0f}/s {m[p]['cpu_ms']:.2f} ms {m[p]['pages']:.1f} p"
        for p in PEERS
        if p in m
    ]
    if peers:
        out.append((f"peer lifecycles, {sync}", " · ".join(peers), "(context)"))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--probe-jobs", type=int, default=200)
    parser.add_argument("--sync", nargs="+", default=["FULL", "NORMAL"], choices=["FULL", "NORMAL"])
    parser.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=list(SYSTEMS))
    args = parser.parse_args(argv)
    systems = tuple(args.systems)
    print(f"job lifecycles, {args.jobs} jobs x {args.rounds} interleaved rounds (median; ratios")
    print("ours/peer per round, median and range); CPU ms and WAL pages per job")
    print(f"{'system':<15}{'sync':<8}{'jobs/s':>9}{'CPU ms':>9}{'pages':>8}")
    for sync in args.sync:
        m = measure(sync, args.jobs, args.rounds, args.probe_jobs, systems)
        for name in systems:
            s = m[name]
            print(f"{name:<15}{sync:<8}{s['rate']:>9,.0f}{s['cpu_ms']:>9.3f}{s['pages']:>8.1f}")
        for ours in OURS:
            for peer in PEERS:
                if ours in m and peer in m:
                    mid, low, high = ratio(m, ours, peer)
                    print(f"  {ours}/{peer} {sync}: {mid:.2f}x ({low:.2f}-{high:.2f})")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "child":
        _child(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
    else:
        sys.exit(main())
