"""The journal on PostgreSQL (DESIGN §9): ours against a raw psycopg transaction and Procrastinate.

    python -m bench.postgres [--jobs 300] [--rounds 3] [--fsync]

The bench starts its own server (tests/helpers/postgres_server.py: a temp cluster on a free
loopback port, as the ``postgres`` user when run as root), one fresh database per run, and
interleaves the contenders round by round (medians; ratios per round):

- command cycles: ``Execution.claim`` + ``Execution.complete`` on submitted Runs, against a raw
  psycopg transaction per command doing the same writes by hand in our schema (lock and
  version-check the aggregate, bump the head sequence, insert the event and the receipt, update
  the state; the outbox is a view of the events);
- job lifecycle: ours (Execution submit → claim → complete, three commits) against Procrastinate
  (defer → fetch → finish through its psycopg connector, three commits), same server, settings
  and connection count (one).

``fsync`` is off by default as in the tests (the box is shared, fsync times are noise); ``--fsync``
turns it on.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg

_ROOT = Path(__file__).resolve().parent.parent
if str(_ROOT) not in sys.path:  # tests/helpers lives beside the package, not in it
    sys.path.insert(0, str(_ROOT))

from bench.common import journal_with  # noqa: E402
from bench.lifecycle import BUDGET, PINS  # noqa: E402
from tests.helpers.postgres_server import PostgresServer  # noqa: E402

Timing = tuple[float, float, float]  # wall, client CPU, server CPU seconds of the timed loop


@contextlib.contextmanager
def server(fsync: bool = False) -> Iterator[PostgresServer]:
    """A temp server of the bench's own (a fresh cluster on a free loopback port), then gone."""
    started = PostgresServer.start_new(fsync=fsync)
    try:
        yield started
    finally:
        started.destroy()


@contextlib.contextmanager
def journal_with_goals(
    pg: PostgresServer, n: int, log: Callable[[str], None] = lambda _: None
) -> Iterator[str]:
    """A fresh database holding the cached ``n``-Goal journal (bench.common), copied as
    ``refine copy`` does (rows as stored, then ``check`` on the copy); its URL, dropped after."""
    from store.journal.sqlite import Journal
    from store.ops.journal_copy import copy_journal

    url = pg.create_database()
    try:
        with tempfile.TemporaryDirectory(prefix="refine-bench-") as folder:
            path = journal_with(n, Path(folder), log=log)
            started = time.perf_counter()
            with (
                Journal.open(path, read_only=True, create=False) as source,
                Journal.open(url, create=True) as target,
            ):
                report = copy_journal(source, target)
        if not report.check.clean:
            raise RuntimeError(f"copied journal fails check:\n{report.check.text()}")
        log(f"copied {n:,} goals to PostgreSQL in {time.perf_counter() - started:.1f} s")
        yield url
    finally:
        pg.drop_database(url)


def server_cpu(pg: PostgresServer) -> float:
    """CPU seconds the server's processes used so far: the postmaster with its reaped children,
    and every live child (backends, WAL writer, checkpointer, autovacuum)."""
    assert pg.root is not None
    postmaster = int((pg.root / "data" / "postmaster.pid").read_text().split()[0])
    while True:  # a child reaped during the scan is in neither sum: scan again
        reaped = _reaped_children(postmaster)
        total = sum(_children_cpu(postmaster))
        fields = proc_stat(postmaster)
        if fields is not None and int(fields[13]) + int(fields[14]) == reaped:
            own = int(fields[11]) + int(fields[12])
            return (total + own + reaped) / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class ServerReading:
    """The server's CPU at one instant, to time an interval to the ns: each live process's own
    (``schedstat``) by pid and start, and what its reaped children used (in clock ticks)."""

    live: dict[tuple[int, int], float]
    reaped: float


def server_reading(pg: PostgresServer) -> ServerReading:
    assert pg.root is not None
    postmaster = int((pg.root / "data" / "postmaster.pid").read_text().split()[0])
    while True:  # a child reaped during the scan is in neither: scan again
        reaped = _reaped_children(postmaster)
        live = dict(_children_ns(postmaster))
        fields, own = proc_stat(postmaster), cpu_seconds(postmaster)
        if fields is not None and own is not None and int(fields[13]) + int(fields[14]) == reaped:
            live[(postmaster, int(fields[19]))] = own
            return ServerReading(live, reaped / os.sysconf("SC_CLK_TCK"))


def server_cpu_since(pg: PostgresServer, before: ServerReading) -> float:
    """The server's CPU seconds since ``before``. A tick is 10 ms: a short interval's few ms on
    each of several backends read 0 by ticks (a CI failure), so a process alive at both ends
    counts to the ns; one reaped between counts in ticks, less what it had used before."""
    after = server_reading(pg)
    both = after.live.keys() & before.live.keys()
    went, came = before.live.keys() - both, after.live.keys() - both
    return (
        sum(after.live[key] - before.live[key] for key in both)
        + sum(after.live[key] for key in came)
        + (after.reaped - before.reaped)
        - sum(before.live[key] for key in went)
    )


def cpu_seconds(pid: int) -> float | None:
    """One single-threaded process's CPU time to the ns (None when it is gone)."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9
    except OSError:
        return None


def _children_ns(parent: int) -> Iterator[tuple[tuple[int, int], float]]:
    for name in os.listdir("/proc"):
        fields = proc_stat(int(name)) if name.isdigit() else None
        if fields is not None and int(fields[1]) == parent:
            seconds = cpu_seconds(int(name))
            if seconds is not None:  # else it went, and is counted with the reaped
                yield (int(name), int(fields[19])), seconds


def proc_stat(pid: int) -> list[str] | None:
    """The fields after the command name of /proc/<pid>/stat (None when it is gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _reaped_children(pid: int) -> int:
    fields = proc_stat(pid)
    return 0 if fields is None else int(fields[13]) + int(fields[14])  # cutime cstime


def _children_cpu(parent: int) -> Iterator[int]:
    """Clock ticks of each live child (a /proc entry goes only when its parent reaps it)."""
    for name in os.listdir("/proc"):
        fields = proc_stat(int(name)) if name.isdigit() else None
        if fields is not None and int(fields[1]) == parent:
            yield int(fields[11]) + int(fields[12])  # utime stime


_server_clock: Callable[[], float] = lambda: 0.0  # noqa: E731 (set by measure())


def _clock(loop: Callable[[], None]) -> Timing:
    wall, cpu, server = time.perf_counter(), time.process_time(), _server_clock()
    loop()
    return time.perf_counter() - wall, time.process_time() - cpu, _server_clock() - server


# --- command cycles: ours vs raw ------------------------------------------------------------------


def cycles_ours(url: str, n: int) -> Timing:
    from store.journal.sqlite import Journal
    from store.model.execution import Execution

    with Journal.open(url) as journal:
        ex = Execution(journal)
        for i in range(n):
            ex.submit(command_id=f"s{i}", run_id=f"r{i}", pins=PINS, budget=BUDGET)

        def loop() -> None:
            for i in range(n):
                ex.claim(command_id=f"c{i}", run_id=f"r{i}", expected_version=1, worker="w1")
                ex.complete(
                    command_id=f"d{i}", run_id=f"r{i}", expected_version=2, epoch=1, evidence=[]
                )

        return _clock(loop)


def cycles_raw(url: str, n: int) -> Timing:
    """The same rows a claim and a complete write, by hand, one transaction per command."""
    from store.journal.sqlite import Journal

    Journal.open(url).close()  # our schema, created the same way
    state = {"run_id": "r", "pins": PINS, "budget": BUDGET, "status": "queued", "attempts": []}
    with psycopg.connect(url) as conn:
        for i in range(n):
            conn.execute(
                "INSERT INTO refine.aggregates (aggregate_id, kind, version, status, node_id,"
                " last_sequence, state) VALUES (%s, 'run', 1, 'queued', NULL, 0, %s)",
                (f"run:r{i}", json.dumps(state)),
            )
        conn.commit()

        def command(i: int, cid: str, version: int, status: str, events: list[str]) -> None:
            with conn.transaction():
                row = conn.execute(
                    "SELECT version, state FROM refine.aggregates WHERE aggregate_id = %s"
                    " FOR UPDATE",
                    (f"run:r{i}",),
                ).fetchone()
                assert row is not None and row[0] == version
                new = json.loads(row[1]) | {"status": status}
                (last,) = conn.execute(
                    "UPDATE refine.head SET sequence = sequence + %s RETURNING sequence",
                    (len(events),),
                ).fetchone()  # type: ignore[misc]
                now = time.time()
                with conn.cursor() as cur:
                    seqs = range(last - len(events) + 1, last + 1)
                    cur.executemany(
                        "INSERT INTO refine.events (sequence, aggregate_id, version, type, data,"
                        " committed_at, command_id) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                        [(s, f"run:r{i}", version + 1, t, '{"run_id":"r"}', now, cid)
                         for s, t in zip(seqs, events, strict=True)],
                    )  # fmt: skip
                conn.execute(
                    "UPDATE refine.aggregates SET version = %s, status = %s, last_sequence = %s,"
                    " state = %s WHERE aggregate_id = %s",
                    (version + 1, status, last, json.dumps(new), f"run:r{i}"),
                )
                conn.execute(
                    "INSERT INTO refine.receipts (command_id, payload, result, committed_at)"
                    " VALUES (%s, %s, %s, %s)",
                    (cid, "0" * 32, f'{{"run:r{i}":{version + 1}}}', now),
                )

        def loop() -> None:
            for i in range(n):
                command(i, f"c{i}", 1, "running", ["run.claimed"])
                command(i, f"d{i}", 2, "completed", ["run.settled", "run.completed"])

        return _clock(loop)


# --- job lifecycle: ours vs Procrastinate ---------------------------------------------------------


def lifecycle_ours(url: str, n: int) -> Timing:
    from store.journal.sqlite import Journal
    from store.model.execution import Execution

    with Journal.open(url) as journal:
        ex = Execution(journal)

        def loop() -> None:
            for i in range(n):
                run_id = f"job{i}"
                ex.submit(command_id=f"{run_id}:s", run_id=run_id, pins=PINS, budget=BUDGET)
                ex.claim(command_id=f"{run_id}:c", run_id=run_id, expected_version=1, worker="w")
                ex.complete(
                    command_id=f"{run_id}:d", run_id=run_id, expected_version=2, epoch=1,
                    evidence=["log:1"],
                )  # fmt: skip

        return _clock(loop)


def lifecycle_procrastinate(url: str, n: int) -> Timing:
    import procrastinate
    from procrastinate.jobs import Status

    connector = procrastinate.PsycopgConnector(conninfo=url, min_size=1, max_size=1)
    app = procrastinate.App(connector=connector)

    @app.task(name="job")
    def job(argv: list[str], title: str) -> None: ...

    async def run() -> Timing:
        async with app.open_async():
            await app.schema_manager.apply_schema_async()
            worker_id = await app.job_manager.register_worker()
            wall, cpu, server = time.perf_counter(), time.process_time(), _server_clock()
            for _ in range(n):
                await job.defer_async(argv=["sh", "-c", "make check"], title="job")
                fetched = await app.job_manager.fetch_job(queues=None, worker_id=worker_id)
                assert fetched is not None
                await app.job_manager.finish_job(fetched, Status.SUCCEEDED, delete_job=False)
            return time.perf_counter() - wall, time.process_time() - cpu, _server_clock() - server

    return asyncio.run(run())


CONTENDERS: dict[str, Callable[[str, int], Timing]] = {
    "ours cycles": cycles_ours,
    "raw cycles": cycles_raw,
    "ours lifecycle": lifecycle_ours,
    "procrastinate": lifecycle_procrastinate,
}


def measure(
    jobs: int, rounds: int, fsync: bool = False, log: Callable[[str], None] = lambda _: None
) -> dict[str, list[Timing]]:
    global _server_clock
    with server(fsync) as pg:
        _server_clock = lambda: server_cpu(pg)  # noqa: E731
        out: dict[str, list[Timing]] = {name: [] for name in CONTENDERS}
        names = list(CONTENDERS)
        for r in range(rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                url = pg.create_database()
                try:
                    out[name].append(CONTENDERS[name](url, jobs))
                finally:
                    pg.drop_database(url)
            log(f"postgres: round {r + 1}/{rounds}")
        return out


def _ratio(m: dict[str, list[Timing]], a: str, b: str) -> tuple[float, float, float]:
    per = [y[0] / x[0] for x, y in zip(m[a], m[b], strict=True)]  # a's rate / b's rate
    return statistics.median(per), min(per), max(per)


def rows(m: dict[str, list[Timing]], jobs: int, fsync: bool) -> list[tuple[str, str, str]]:
    def rate(name: str) -> float:
        return jobs / statistics.median(t[0] for t in m[name])

    def cpu(name: str, per: int, which: int = 1) -> float:
        return statistics.median(t[which] for t in m[name]) / jobs / per * 1000

    mode = "fsync on" if fsync else "fsync off"
    raw, proc = _ratio(m, "ours cycles", "raw cycles"), _ratio(m, "ours lifecycle", "procrastinate")
    return [
        (
            f"PG claim+complete cycles/s, {mode}",
            f"ours {rate('ours cycles'):,.0f} ({cpu('ours cycles', 2):.2f} ms CPU/command) · raw"
            f" psycopg {rate('raw cycles'):,.0f} ({cpu('raw cycles', 2):.2f} ms): {raw[0]:.0%}"
            f" of raw ({raw[1]:.0%}–{raw[2]:.0%})",
            "≥ 50 % of raw",
        ),
        (
            f"PG job lifecycle, {mode}",
            f"ours {rate('ours lifecycle'):,.0f} jobs/s ({cpu('ours lifecycle', 1):.2f} ms CPU/job,"
            f" server {cpu('ours lifecycle', 1, 2):.2f} ms) · Procrastinate"
            f" {rate('procrastinate'):,.0f} ({cpu('procrastinate', 1):.2f} ms, server"
            f" {cpu('procrastinate', 1, 2):.2f} ms): {proc[0]:.2f}× ({proc[1]:.2f}–{proc[2]:.2f})",
            "≥ 1.0× Procrastinate",
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--fsync", action="store_true")
    args = parser.parse_args(argv)
    m = measure(args.jobs, args.rounds, args.fsync, log=print)
    for figure, value, target in rows(m, args.jobs, args.fsync):
        print(f"{figure}: {value}  [target {target}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
