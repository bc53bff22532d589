"""The million-goal journal on SQLite (issue 27, DESIGN §9): the CLI's reads and long operations.

    python -m bench.million [--size 1000000] [--small 1000] [--rounds 7] [--skip copy ...]
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
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

from bench import scale
from bench.common import TmuxDashboard, cached_journal

REFINE = [sys.executable, "-m", "refine_tui.cli"]
MIX = "history"
STREAM_S = 10.0
INDEX_POLL_S = 5.0  # the dashboard sampled this often while its filter index is built
IDLE_SHARE = 0.05  # of a core: the build is over


def _run(argv: list[str]) -> tuple[float, float]:
    """(wall seconds, peak RSS MB) of ``refine ARGV``, output discarded. The peak is the
    kernel's high-water mark of the process after its exec (``VmHWM``), read until it ends:
    ``wait4``'s ``ru_maxrss`` would count the benchmark's own memory, forked before the exec."""
    began = time.perf_counter()
    proc = subprocess.Popen([*REFINE, *argv], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = 0.0
    status = Path(f"/proc/{proc.pid}/status")
    while proc.poll() is None:
        with contextlib.suppress(OSError, ValueError, StopIteration):  # it ended meanwhile
            peak = max(peak, _high_water_mb(status.read_text()))
        time.sleep(0.05)
    took = time.perf_counter() - began
    if proc.returncode != 0:
        raise RuntimeError(f"refine {' '.join(argv)}: exit {proc.returncode}")
    return took, peak


def _high_water_mb(status: str) -> float:
    line = next(line for line in status.splitlines() if line.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024


def status_query(small: Path, big: Path, rounds: int) -> dict[str, Any]:
    times: dict[str, list[float]] = {"small": [], "big": []}
    for path in (small, big):  # warm the page cache and the interpreter's files
        _run(["--journal", str(path), "goals", "--status", "running"])
    for _ in range(rounds):
        for name, path in (("small", small), ("big", big)):
            times[name].append(_run(["--journal", str(path), "goals", "--status", "running"])[0])
    small_s, big_s = statistics.median(times["small"]), statistics.median(times["big"])
    return {"small_s": small_s, "big_s": big_s, "ratio": big_s / small_s, "plan": _plan(big)}


def _plan(path: Path) -> str:
    """The index the status page reads (the journal's own query, ids first)."""
    from store.journal.queries import SQLITE, of_kind

    inner, args = of_kind(SQLITE, "SELECT aggregate_id FROM aggregates", "goal", ["running"])
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = conn.execute(f"EXPLAIN QUERY PLAN {inner} ORDER BY aggregate_id LIMIT 1000", args)
        return "; ".join(str(r[-1]) for r in rows)
    finally:
        conn.close()


def streamed(big: Path) -> dict[str, float]:
    """Time to the first line of ``refine goals`` on a pipe, RSS then and ``STREAM_S`` later."""
    began = time.perf_counter()
    proc = subprocess.Popen(
        [*REFINE, "--journal", str(big), "goals"], stdout=subprocess.PIPE, bufsize=0
    )
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
    return {"first_s": first, "rss_first": rss_first, "rss_later": rss_later, "lines": lines}


def long_operations(paths: dict[int, Path], skip: set[str]) -> dict[str, dict[int, Any]]:
    out: dict[str, dict[int, Any]] = {"check": {}, "copy": {}}
    with tempfile.TemporaryDirectory(prefix="refine-bench-") as folder:
        for n, path in paths.items():
            if "check" not in skip:
                out["check"][n] = _run(["--journal", str(path), "check"])
            if "copy" not in skip:
                target = Path(folder) / f"copy-{n}.db"
                out["copy"][n] = _run(["copy", str(path), str(target)])
                target.unlink()
    return out


def dashboard(big: Path, repeats: int) -> list[dict[str, float]]:
    with tempfile.TemporaryDirectory(prefix="refine-bench-") as folder:
        copy = Path(folder) / "journal.db"
        shutil.copyfile(big, copy)  # the dashboard opens its journal to write
        return [p for _ in range(repeats) if (p := scale.first_paint(copy)) is not None]


def dashboard_index(big: Path, timeout: float = 1800.0) -> dict[str, float]:
    """``refine tui`` in tmux from its first paint until the filter's index of every Goal is
    built after it: the process idle again (under ``IDLE_SHARE`` of a core over a poll). Its
    RSS then, its peak (``VmHWM``) and how long the build took."""
    with tempfile.TemporaryDirectory(prefix="refine-bench-") as folder:
        copy = Path(folder) / "journal.db"
        shutil.copyfile(big, copy)  # the dashboard opens its journal to write
        with TmuxDashboard(copy, scale.SIZE) as tui:
            shown = tui.wait_for(lambda screen: "live" in screen and " queued " in screen)
            proc, used = tui.process, 0.0
            while time.monotonic() - shown < timeout:
                time.sleep(INDEX_POLL_S)
                times = proc.cpu_times()
                if times.user + times.system - used < IDLE_SHARE * INDEX_POLL_S:
                    break
                used = times.user + times.system
            status = Path(f"/proc/{proc.pid}/status").read_text()
            return {
                "first_paint_s": shown - tui.started,
                "built_s": time.monotonic() - shown - INDEX_POLL_S,
                "cpu_s": used,
                "rss": proc.memory_info().rss / 2**20,
                "peak": _high_water_mb(status),
            }


def measure(
    size: int, small: int, mid: int, rounds: int, skip: set[str], log=print
) -> dict[str, Any]:
    big = cached_journal(size, mix=MIX, log=log)
    little = cached_journal(small, mix=MIX, log=log)
    load = os.getloadavg()[0]
    r: dict[str, Any] = {"size": size, "small": small, "mid": mid, "load": [load]}
    r["status"] = status_query(little, big, rounds)
    log(f"status query: {r['status']}")
    r["streamed"] = streamed(big)
    log(f"streamed: {r['streamed']}")
    if "dashboard" not in skip:
        r["paints"] = dashboard(big, 3)
        log(f"dashboard: {r['paints']}")
        r["index"] = dashboard_index(big)
        log(f"dashboard's index: {r['index']}")
    paths = {mid: cached_journal(mid, mix=MIX, log=log), size: big}
    r["long"] = long_operations(paths, skip)
    log(f"check/copy: {r['long']}")
    r["load"].append(os.getloadavg()[0])
    return r


def rows(r: dict[str, Any]) -> list[tuple[str, str, str]]:
    n, k, mid, s = r["size"], r["small"], r["mid"], r["status"]
    out = [
        (
            f"`refine goals --status running`, {n:,} vs {k:,} goals",
            f"{s['big_s'] * 1000:.0f} ms vs {s['small_s'] * 1000:.0f} ms: {s['ratio']:.2f}×"
            f" (50 running in both; {s['plan']})",
            "≤ 2×",
        ),
    ]
    st = r["streamed"]
    out.append((
        f"`refine goals`, {n:,} goals, streamed",
        f"first line {st['first_s'] * 1000:.0f} ms; RSS {st['rss_first']:.0f} MB then, at most"
        f" {st['rss_later']:.0f} MB in the next {STREAM_S:.0f} s ({st['lines']:,} lines out)",
        "first line before the whole is read, memory flat",
    ))  # fmt: skip
    for op in ("check", "copy"):
        got = r["long"][op]
        if n not in got or mid not in got:
            continue
        (t_mid, m_mid), (t_big, m_big) = got[mid], got[n]
        out.append((
            f"`refine {op}`, {n:,} goals (SQLite)",
            f"{t_big:.0f} s, peak RSS {m_big:.0f} MB; at {mid:,}: {t_mid:.1f} s, {m_mid:.0f} MB"
            f" (time per goal {t_big / n * 1e6:.0f} µs vs {t_mid / mid * 1e6:.0f} µs)",
            "linear, memory flat, a progress bar",
        ))  # fmt: skip
    paints = r.get("paints") or []
    if paints:
        times = [p["first_paint_s"] for p in paints]
        rss = [p["rss_mb"] for p in paints]
        out.append((
            f"dashboard, {n:,} goals (tmux)",
            f"first paint median {statistics.median(times):.2f} s (max {max(times):.2f});"
            f" RSS median {statistics.median(rss):.0f} MB (max {max(rss):.0f})",
            "≤ 2 s, ≤ 300 MB",
        ))  # fmt: skip
    ix = r.get("index")
    if ix:
        out.append((
            f"dashboard, {n:,} goals, filter index built (tmux)",
            f"RSS {ix['rss']:.0f} MB, peak {ix['peak']:.0f} MB; built {ix['built_s']:.0f} s"
            f" after the paint ({ix['cpu_s']:.0f} s of CPU in all)",
            "RSS ≤ 300 MB",
        ))  # fmt: skip
    out.append(
        ("  load average (1 min) at start / end", " / ".join(f"{x:.1f}" for x in r["load"]), "")
    )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1_000_000)
    parser.add_argument("--small", type=int, default=1000)
    parser.add_argument("--mid", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--skip", nargs="*", default=[], choices=["check", "copy", "dashboard"])
    args = parser.parse_args(argv)
    log = lambda line: print(f"  · {line}", file=sys.stderr, flush=True)  # noqa: E731
    r = measure(args.size, args.small, args.mid, args.rounds, set(args.skip), log=log)
    for figure, value, target in rows(r):
        print(f"{figure:<52} {value}  [{target}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
