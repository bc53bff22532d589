"""The million-goal journal on SQLite or PostgreSQL (issue 27, DESIGN §9): the CLI's reads,
long operations and the dashboard.

    python -m bench.million [--size 1000000] [--small 1000] [--rounds 7] [--skip copy ...]
                            [--postgres] [--samples 100]
    python -m bench --only million

The journal is the "history" mix (bench.common): a fleet's settled months, its first 1,000 ids
the busy mix (50 running, 150 queued, …), so the 1k and the 1M journals hold the same active
Goals and a status query's ratio measures the journal's size alone. Built once through the Goals
API templates and cached, ``check_journal`` clean.

- ``refine goals --status running``: wall time of the real command (stdout to /dev/null) on both
  journals, interleaved rounds, medians; ``EXPLAIN QUERY PLAN`` names the index it reads.
- ``refine goals``: time to its first line at 1M, and its RSS then and 10 s later (streamed:
  flat), from a real process on a pipe.
- ``refine check`` and ``refine copy`` (SQLite → SQLite): wall time and peak RSS (``wait4``) at
  ``--mid`` goals and at 1M: linear when the time per goal holds, flat when the RSS does.
- the dashboard: first paint and RSS in tmux (bench.scale's measure, on a copy); then its RSS
  and peak once the filter's index of every Goal is built after the paint (the process idle).
- commit → row (``--samples N``; none by default): bench.latency's headless probe on the
  ``--small`` and the big journal, last (its commits start and settle queued Goals).

``--postgres``: the same figures on a server of the bench's own (bench/postgres.py), each
journal ``refine copy``-ed from its cached file into a database of its own first. That copy
(SQLite → PostgreSQL, wall, CPU and peak RSS of the client, CPU of the server) is the copy
figure (measured even with ``--skip copy``: it fills the databases); the plans are
PostgreSQL's ``EXPLAIN ANALYZE``. The database URL's password is never printed (``redact``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

from bench import latency, scale
from bench.common import TmuxDashboard, cached_journal
from store.journal.url import DEFAULT_SCHEMA, is_postgres_url, redact

if TYPE_CHECKING:
    from tests.helpers.postgres_server import PostgresServer

REFINE = [sys.executable, "-m", "refine_tui.cli"]
MIX = "history"
STREAM_S = 10.0
INDEX_POLL_S = 5.0  # the dashboard sampled this often while its filter index is built
IDLE_SHARE = 0.05  # of a core: the build is over
LISTED_S = 3600.0  # the headless dashboard lists a million Goals and builds its index first


@dataclass
class Took:
    """One ``refine`` process: wall seconds, CPU seconds (user + system), peak RSS MB, and the
    CPU seconds the PostgreSQL server spent meanwhile (0 on SQLite)."""

    wall: float
    cpu: float
    peak: float
    server_cpu: float = 0.0


@dataclass
class Journals:
    """Each size's journal: a cached file, or a database on a server started for the run, with
    what ``refine copy`` took to fill it (``copies``); ``server_cpu``: the server's CPU clock."""

    backend: str
    where: dict[int, str]
    copies: dict[int, Took] = field(default_factory=dict)
    server_cpu: Callable[[], float] = lambda: 0.0


def _run(argv: list[str], server_cpu: Callable[[], float] = lambda: 0.0) -> Took:
    """What ``refine ARGV`` took, output discarded. The peak is the kernel's high-water mark of
    the process after its exec (``VmHWM``), read until it ends: ``wait4``'s ``ru_maxrss`` would
    count the benchmark's own memory, forked before the exec. Its CPU is the reaped children's
    (the bench has no other child meanwhile: the server's processes are the postmaster's)."""
    before, server_before = resource.getrusage(resource.RUSAGE_CHILDREN), server_cpu()
    began = time.perf_counter()
    proc = subprocess.Popen([*REFINE, *argv], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = 0.0
    status = Path(f"/proc/{proc.pid}/status")
    while proc.poll() is None:
        with contextlib.suppress(OSError, ValueError, StopIteration):  # it ended meanwhile
            peak = max(peak, _high_water_mb(status.read_text()))
        time.sleep(0.05)
    took = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        shown = " ".join(redact(a) for a in argv)  # a URL's password is never printed
        raise RuntimeError(f"refine {shown}: exit {proc.returncode}")
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return Took(took, cpu, peak, server_cpu() - server_before)


def _high_water_mb(status: str) -> float:
    line = next(line for line in status.splitlines() if line.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024


@contextlib.contextmanager
def journals(
    backend: str, sizes: list[int], log: Callable[[str], None], pg: PostgresServer | None = None
) -> Iterator[Journals]:
    """The journals of ``sizes`` (cached files, built once), or their copies on PostgreSQL: on
    ``pg`` (the tests' server), else on a server of the run's own."""
    files = {n: str(cached_journal(n, mix=MIX, log=log)) for n in sizes}
    if backend == "sqlite":
        yield Journals(backend, files)
        return
    from bench import postgres

    with contextlib.ExitStack() as stack:
        server = pg or stack.enter_context(postgres.server())
        found = Journals(backend, {})
        if server.owned:  # its processes are ours to read in /proc
            found.server_cpu = lambda: postgres.server_cpu(server)
        for n in sizes:  # the smallest first: a failure shows before the long copy
            found.where[n] = url = server.create_database()
            stack.callback(server.drop_database, url)
            found.copies[n] = _run(["copy", files[n], url], found.server_cpu)
            log(f"refine copy of {n:,} goals into PostgreSQL: {found.copies[n]}")
        yield found


@contextlib.contextmanager
def _writable(location: str) -> Iterator[str]:
    """A journal the dashboard may write to: a scratch copy of a cached file, a database as is
    (the run's own, dropped with its server)."""
    if is_postgres_url(location):
        yield location
        return
    with tempfile.TemporaryDirectory(prefix="refine-bench-") as folder:
        copy = Path(folder) / "journal.db"
        shutil.copyfile(location, copy)
        yield str(copy)


def status_query(small: str, big: str, rounds: int) -> dict[str, Any]:
    times: dict[str, list[float]] = {"small": [], "big": []}
    for location in (small, big):  # warm the caches and the interpreter's files
        _run(["--journal", location, "goals", "--status", "running"])
    for _ in range(rounds):
        for name, location in (("small", small), ("big", big)):
            argv = ["--journal", location, "goals", "--status", "running"]
            times[name].append(_run(argv).wall)
    small_s, big_s = statistics.median(times["small"]), statistics.median(times["big"])
    plan = _plan_postgres(big, ["running"]) if is_postgres_url(big) else _plan(big)
    return {"small_s": small_s, "big_s": big_s, "ratio": big_s / small_s, "plan": plan}


def _plan(path: str) -> str:
    """The index the status page reads (the journal's own query, ids first)."""
    from store.journal.queries import SQLITE, of_kind

    inner, args = of_kind(SQLITE, "SELECT aggregate_id FROM aggregates", "goal", ["running"])
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = conn.execute(f"EXPLAIN QUERY PLAN {inner} ORDER BY aggregate_id LIMIT 1000", args)
        return "; ".join(str(r[-1]) for r in rows)
    finally:
        conn.close()


def _plan_postgres(url: str, statuses: list[str] | None) -> str:
    """``EXPLAIN ANALYZE`` of a page of Goals (of ``statuses``) as the journal asks for its first
    one: what it reads and its time. Analyzed or not: ``refine copy`` leaves the statistics to
    autovacuum, so right after it the planner has none."""
    import psycopg

    from store.journal.queries import POSTGRES, filtered_page, of_kind

    select = f'SELECT aggregate_id, version, state FROM "{DEFAULT_SCHEMA}".aggregates'
    sql, args = of_kind(POSTGRES, select, "goal", statuses)
    sql, args = filtered_page(
        POSTGRES, sql, args, contains=None, node_id=None, after_id="goal:",
        newest_first=False, limit=1000, offset=0,
    )  # fmt: skip
    with psycopg.connect(url) as conn:
        rows = conn.execute(f"EXPLAIN (ANALYZE, COSTS OFF) {sql}", args).fetchall()
        (analyzed,) = conn.execute(
            "SELECT coalesce(last_analyze, last_autoanalyze) IS NOT NULL FROM pg_stat_user_tables"
            " WHERE schemaname = %s AND relname = 'aggregates'",
            (DEFAULT_SCHEMA,),
        ).fetchone() or (False,)
    lines = [str(row[0]).strip().removeprefix("->  ") for row in rows]
    # The scans (what they read, the index named), a sort and the time: the limit is a page.
    kept = [x for x in lines if " on " in x or x.startswith(("Sort (", "Execution Time"))]
    return "; ".join([*kept, "statistics: " + ("analyzed" if analyzed else "none yet")])


def streamed(big: str) -> dict[str, Any]:
    """Time to the first line of ``refine goals`` on a pipe, RSS then and ``STREAM_S`` later;
    on PostgreSQL, the plan of its first page just before."""
    plan = _plan_postgres(big, None) if is_postgres_url(big) else ""
    began = time.perf_counter()
    proc = subprocess.Popen([*REFINE, "--journal", big, "goals"], stdout=subprocess.PIPE, bufsize=0)
    assert proc.stdout is not None
    try:
        proc.stdout.readline()  # the header
        proc.stdout.readline()  # the first goal
        first = time.perf_counter() - began
        me = psutil.Process(proc.pid)
        rss_first = rss_later = me.memory_info().rss / 2**20
        lines, deadline = 2, time.monotonic() + STREAM_S
        while time.monotonic() < deadline and (chunk := proc.stdout.read(1 << 16)):
            lines += chunk.count(b"\n")
            if proc.poll() is None:
                rss_later = max(rss_later, me.memory_info().rss / 2**20)
    finally:
        proc.kill()
        proc.wait()
    return {
        "first_s": first, "rss_first": rss_first, "rss_later": rss_later, "lines": lines,
        "plan": plan,
    }  # fmt: skip


def long_operations(
    found: Journals, sizes: list[int], skip: set[str]
) -> dict[str, dict[int, Took]]:
    """``refine check`` of each size; ``refine copy`` SQLite → SQLite, or the copies that
    filled the PostgreSQL databases (measured as they were made)."""
    out: dict[str, dict[int, Took]] = {"check": {}, "copy": {}}
    with tempfile.TemporaryDirectory(prefix="refine-bench-") as folder:
        for n in sizes:
            if "check" not in skip:
                out["check"][n] = _run(["--journal", found.where[n], "check"], found.server_cpu)
            if n in found.copies:
                out["copy"][n] = found.copies[n]
            elif "copy" not in skip:
                target = Path(folder) / f"copy-{n}.db"
                out["copy"][n] = _run(["copy", found.where[n], str(target)])
                target.unlink()
    return out


def _until_idle(clock: Callable[[], float], poll: float, timeout: float = 1800.0) -> float:
    """Wait until ``clock`` (CPU seconds) advances less than ``IDLE_SHARE`` of a core over a
    ``poll``; the CPU seconds it advanced before that."""
    began, used = time.monotonic(), clock()
    first = used
    while time.monotonic() - began < timeout:
        time.sleep(poll)
        now = clock()
        if now - used < IDLE_SHARE * poll:
            break
        used = now
    return used - first


def dashboard(
    small: str, big: str, repeats: int, server_cpu: Callable[[], float]
) -> dict[str, list[dict[str, float]]]:
    """First paints of the small and the big journal, alternating (side by side under the same
    load), each on an idle server: a dashboard's queries may run on after it quit (a backend
    notices its client gone only when it sends a result)."""
    out: dict[str, list[dict[str, float]]] = {"small": [], "big": []}
    with _writable(small) as little, _writable(big) as large:
        for _ in range(repeats):
            for name, location in (("small", little), ("big", large)):
                _until_idle(server_cpu, 1.0)
                if (painted := scale.first_paint(location)) is not None:
                    out[name].append(painted)
    return out


def dashboard_index(
    big: str, server_cpu: Callable[[], float], timeout: float = 3600.0
) -> dict[str, float]:
    """``refine tui`` in tmux from its first paint until the filter's index of every Goal is
    built after it: the process and the server idle again (under ``IDLE_SHARE`` of a core over
    a poll: on PostgreSQL the build waits on the server's reads). Its RSS then, its peak
    (``VmHWM``), how long the build took and the CPU it took, the server's apart."""
    _until_idle(server_cpu, 1.0)
    with _writable(big) as location, TmuxDashboard(location, latency.SIZE) as tui:
        shown = tui.wait_for(lambda screen: "live" in screen and " queued " in screen)
        proc, server_began = tui.process, server_cpu()

        def both() -> float:
            times = proc.cpu_times()
            return float(times.user + times.system) + server_cpu()

        _until_idle(both, INDEX_POLL_S, timeout)
        times = proc.cpu_times()
        status = Path(f"/proc/{proc.pid}/status").read_text()
        return {
            "first_paint_s": shown - tui.started,
            "built_s": time.monotonic() - shown - INDEX_POLL_S,
            "cpu_s": times.user + times.system,
            "server_cpu_s": server_cpu() - server_began,
            "rss": proc.memory_info().rss / 2**20,
            "peak": _high_water_mb(status),
        }


def commit_to_row(found: Journals, sizes: list[int], samples: int) -> dict[int, dict[str, Any]]:
    """bench.latency's headless probe on each size's journal, one after the other."""
    out: dict[int, dict[str, Any]] = {}
    for n in sizes:
        with _writable(found.where[n]) as location:
            out[n] = latency.commit_to_row(location, samples, seed=n, listed_s=LISTED_S)
    return out


def measure(
    size: int,
    small: int,
    mid: int,
    rounds: int,
    skip: set[str],
    log: Callable[[str], None] = print,
    backend: str = "sqlite",
    samples: int = 0,
    pg: PostgresServer | None = None,
) -> dict[str, Any]:
    """The figures of the journals of ``small``, ``mid`` and ``size`` Goals on ``backend``;
    commit → row with ``samples`` (0: not measured); ``pg``: a server to use (else one of its
    own)."""
    sizes = sorted({small, mid, size})
    load = os.getloadavg()[0]
    r: dict[str, Any] = {"size": size, "small": small, "mid": mid, "load": [load]}
    with journals(backend, sizes, log, pg) as found:
        r["backend"] = backend
        r["status"] = status_query(found.where[small], found.where[size], rounds)
        log(f"status query: {r['status']}")
        r["streamed"] = streamed(found.where[size])
        log(f"streamed: {r['streamed']}")
        if "dashboard" not in skip:
            r["paints"] = dashboard(found.where[small], found.where[size], 3, found.server_cpu)
            log(f"dashboard: {r['paints']}")
            r["index"] = dashboard_index(found.where[size], found.server_cpu)
            log(f"dashboard's index: {r['index']}")
        r["long"] = long_operations(found, [mid, size], skip)
        log(f"check/copy: {r['long']}")
        if samples:  # last: its commits change the journals
            r["latency"] = commit_to_row(found, [small, size], samples)
            log(f"commit → row: {r['latency']}")
    r["load"].append(os.getloadavg()[0])
    return r


def rows(r: dict[str, Any]) -> list[tuple[str, str, str]]:
    n, k, s = r["size"], r["small"], r["status"]
    on = " (PostgreSQL)" if r.get("backend") == "postgresql" else ""
    out = [
        (
            f"`refine goals --status running`, {n:,} vs {k:,} goals{on}",
            f"{s['big_s'] * 1000:.0f} ms vs {s['small_s'] * 1000:.0f} ms: {s['ratio']:.2f}×"
            f" (50 running in both; {s['plan']})",
            "≤ 2×",
        ),
    ]
    st = r["streamed"]
    out.append((
        f"`refine goals`, {n:,} goals, streamed{on}",
        f"first line {st['first_s'] * 1000:.0f} ms; RSS {st['rss_first']:.0f} MB then, at most"
        f" {st['rss_later']:.0f} MB in the next {STREAM_S:.0f} s ({st['lines']:,} lines out)"
        + (f"; first page: {st['plan']}" if st["plan"] else ""),
        "first line before the whole is read, memory flat",
    ))  # fmt: skip
    out += _long_rows(r, on)
    out += _dashboard_rows(r, on)
    out += _latency_rows(r, on)
    out.append(
        ("  load average (1 min) at start / end", " / ".join(f"{x:.1f}" for x in r["load"]), "")
    )
    return out


def _long_rows(r: dict[str, Any], on: str) -> list[tuple[str, str, str]]:
    n, mid, out = r["size"], r["mid"], []
    into = "PostgreSQL" if on else "SQLite"
    for op in ("check", "copy"):
        got = r["long"][op]
        if n not in got or mid not in got:
            continue
        at_mid, big = got[mid], got[n]
        server = f", server CPU {big.server_cpu:.0f} s" if on else ""
        out.append((
            f"`refine {op}`, {n:,} goals" + (f" (SQLite → {into})" if op == "copy" else on),
            f"{big.wall:.0f} s wall, {big.cpu:.0f} s CPU{server}, peak RSS {big.peak:.0f} MB;"
            f" at {mid:,}: {at_mid.wall:.1f} s, {at_mid.cpu:.1f} s CPU, {at_mid.peak:.0f} MB"
            f" (CPU per goal {big.cpu / n * 1e6:.0f} µs vs {at_mid.cpu / mid * 1e6:.0f} µs)",
            "linear, memory flat, a progress bar",
        ))  # fmt: skip
    return out


def _dashboard_rows(r: dict[str, Any], on: str) -> list[tuple[str, str, str]]:
    n, out = r["size"], []
    paints = r.get("paints") or {}
    if paints.get("big"):
        times = {name: [p["first_paint_s"] for p in got] for name, got in paints.items()}
        rss = [p["rss_mb"] for p in paints["big"]]
        small = statistics.median(times["small"]) if times["small"] else float("nan")
        out.append((
            f"dashboard, {n:,} goals (tmux){on}",
            f"first paint median {statistics.median(times['big']):.2f} s"
            f" (max {max(times['big']):.2f}), {r['small']:,} goals alternating with it:"
            f" {small:.2f} s; RSS median {statistics.median(rss):.0f} MB (max {max(rss):.0f})",
            "≤ 2 s, ≤ 300 MB",
        ))  # fmt: skip
    ix = r.get("index")
    if ix:
        out.append((
            f"dashboard, {n:,} goals, filter index built (tmux){on}",
            f"RSS {ix['rss']:.0f} MB, peak {ix['peak']:.0f} MB; built {ix['built_s']:.0f} s"
            f" after the paint ({ix['cpu_s']:.0f} s of CPU in all"
            + (f", the server's {ix['server_cpu_s']:.0f} s" if on else "")
            + ")",
            "RSS ≤ 300 MB",
        ))  # fmt: skip
    return out


def _latency_rows(r: dict[str, Any], on: str) -> list[tuple[str, str, str]]:
    """bench.latency's own lines for the sizes measured, PostgreSQL or not."""
    got = r.get("latency")
    if not got:
        return []
    return latency.rows(got, "postgresql" if on else "sqlite")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1_000_000)
    parser.add_argument("--small", type=int, default=1000)
    parser.add_argument("--mid", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--skip", nargs="*", default=[], choices=["check", "copy", "dashboard"])
    parser.add_argument("--postgres", action="store_true", help="the journals on PostgreSQL")
    parser.add_argument("--samples", type=int, default=0, help="commit → row samples (0: none)")
    args = parser.parse_args(argv)
    log = lambda line: print(f"  · {line}", file=sys.stderr, flush=True)  # noqa: E731
    backend = "postgresql" if args.postgres else "sqlite"
    r = measure(
        args.size, args.small, args.mid, args.rounds, set(args.skip), log, backend, args.samples
    )
    for figure, value, target in rows(r):
        print(f"{figure:<52} {value}  [{target}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
