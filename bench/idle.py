"""Dashboard CPU idle and under a steady stream of commits (DESIGN §9: idle ≤ 0.5 % of a core).

    python -m bench.idle [--seconds 60] [--rate 50] [--sizes 1000] [--pulses on|off|both]
    python -m bench.idle --node-only [--postgres] [--seconds 60]

``--pulses both`` measures each dashboard figure twice, side by side (one journal, one arm after
the other): with the pulses (the default) and without them (``refine tui --no-pulses``,
``RefineApp(pulses=False)``: no pulses line, no reads for it).

- idle: ``refine tui`` in a real terminal (tmux, 120×40) on a journal nobody writes to, left
  alone; CPU is the process's user+system time (psutil ``cpu_times``) over the window, in % of
  one core. Three journals: "quiet" (nothing running: the event-driven floor) and "busy" (5 % of
  the Goals running: this node's running attempts are re-observed every 5 s, as an operator
  would see them), twice: "young", its history shifted to end seconds before the dashboard
  starts (every running attempt is < 10 min old, so its elapsed time shows seconds and ticks
  once a second on screen), and "old", shifted to end an hour before (elapsed shows minutes).
- node idle: ``refine node`` on a journal whose 3 Goals it has finished, left alone; CPU as
  above (DESIGN §9 wants it at ≈ 0 between events, as supervisord and systemd are).
  ``--node-only`` measures this alone; with ``--postgres`` also on a PostgreSQL server of its own.
- load, real terminal: the same, while another process commits ``rate`` commands per second
  (new Goals created, started and completed, as a busy node would).
- load, headless: the same stream against ``RefineApp`` driven by ``run_test`` in this process,
  to look inside: updates applied (commits coalesced into batches), a key press's response time
  during the stream, the lag after the last commit, and whether any change was missed (every
  shown row equals a fresh read of the journal, and every Goal the stream touched is shown).
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

from bench.common import (
    NODE,
    PULSE_ARMS,
    TmuxDashboard,
    arm_label,
    journal_with,
    shift_history,
    summary,
    tui_args,
    writer_command,
)
from bench.latency import SIZE, ProbeApp, ready
from refine_tui.rows import Reader
from refine_tui.widgets.keyed_table import KeyedTable
from store.journal import Journal
from store.model.goals import Goals

SETTLE_S = 3.0  # after the first paint, before measuring
# How long before the dashboard starts the busy journal's history ends (it spans ≈ 5 min at 1,000
# Goals): "young" running attempts show ticking seconds, "old" ones minutes (fmt.duration).
HISTORY_ENDS_S = {"young": 5.0, "old": 3600.0}


def load_steps(rate: float, seconds: float) -> list[str]:
    """Enough ``op:goal`` steps for ``rate × seconds`` commits: create, start, settle new Goals."""
    count = int(rate * seconds) + 3
    return [
        f"{op}:load{n:05d}" for n in range(count // 3 + 1) for op in ("create", "start", "settle")
    ]


IDLE_JOURNALS = (
    ("quiet", "quiet", None),
    ("busy, young", "busy", HISTORY_ENDS_S["young"]),
    ("busy, old", "busy", HISTORY_ENDS_S["old"]),
)


def idle_journals(n: int, folder: Path, log=print) -> dict[str, tuple[Path, float | None]]:
    """The idle journals by name (quiet, busy young, busy old), each a copy in ``folder``, with
    how long before the dashboard starts its history is to end (``shift_history``)."""
    out = {}
    for name, mix, ends_ago in IDLE_JOURNALS:
        sub = folder / name.replace(", ", "-")  # the tmux command line is split at spaces
        sub.mkdir()
        out[name] = (journal_with(n, sub, mix=mix, log=log), ends_ago)
    return out


def _cpu(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return times.user + times.system


def tmux_cpu(
    path: Path, seconds: float, rate: float = 0.0, pulses: bool = True
) -> dict[str, float] | None:
    """% of one core used by ``refine tui`` in tmux over ``seconds`` (with ``rate`` commits/s);
    ``pulses=False``: ``refine tui --no-pulses``."""
    if not TmuxDashboard.available():
        return None
    with TmuxDashboard(path, SIZE, tui_args(pulses)) as tui:
        tui.wait_for(lambda screen: "live" in screen and " queued " in screen)
        time.sleep(SETTLE_S)
        writer = None
        if rate:
            writer = subprocess.Popen(
                writer_command(path), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
            )
            assert writer.stdin is not None
            writer.stdin.write(f"load {rate} {seconds} {' '.join(load_steps(rate, seconds))}\n")
            writer.stdin.flush()
        before, began = _cpu(tui.process), time.monotonic()
        time.sleep(seconds)
        used, elapsed = _cpu(tui.process) - before, time.monotonic() - began
        rss = tui.process.memory_info().rss
        result = {"cpu_percent": 100 * used / elapsed, "seconds": elapsed, "rss_mb": rss / 2**20}
        if writer is not None:
            assert writer.stdin is not None and writer.stdout is not None
            result["commits"] = int(writer.stdout.readline().split()[0])
            writer.stdin.close()
            writer.wait()
    return result


def node_cpu(seconds: float, finished: int = 3, location: str | None = None) -> dict[str, float]:
    """% of one core used by ``refine node`` with nothing to do (its ``finished`` Goals done),
    on ``location`` (a PostgreSQL URL; None: a new SQLite file)."""
    with tempfile.TemporaryDirectory(prefix="refine-bench-") as folder:
        path = location or str(Path(folder) / "journal.db")
        command = [sys.executable, "-m", "refine_tui.cli", "--journal", path, "--node", NODE]
        command += ["--state-dir", str(Path(folder) / "state")]
        with Journal.open(path) as journal:
            goals = Goals(journal)
            for n in range(finished):
                goals.create(goal_id=f"done{n}", title=f"done {n}", node_id=NODE, argv=["true"])
        node = subprocess.Popen(
            [*command, "node"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            proc = psutil.Process(node.pid)
            with Journal.open(path, read_only=True) as journal:
                deadline = time.monotonic() + 60
                while journal.count("goal", status="completed") < finished:
                    if time.monotonic() > deadline or node.poll() is not None:
                        raise RuntimeError("the node did not finish its goals")
                    time.sleep(0.2)
            time.sleep(SETTLE_S)
            before, began = _cpu(proc), time.monotonic()
            time.sleep(seconds)
            used, elapsed = _cpu(proc) - before, time.monotonic() - began
            threads = len(proc.threads())
        finally:
            node.terminate()
            node.wait()
    return {"cpu_percent": 100 * used / elapsed, "seconds": elapsed, "threads": threads}


async def _headless_load(
    path: Path, seconds: float, rate: float, pulses: bool = True
) -> dict[str, Any]:
    app = ProbeApp(journal=path, node=NODE, pulses=pulses)
    steps = load_steps(rate, seconds)
    writer = await asyncio.create_subprocess_exec(
        *writer_command(path), stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert writer.stdin is not None and writer.stdout is not None
    me = psutil.Process()
    keys: list[float] = []
    try:
        async with app.run_test(size=SIZE):
            await ready(app)
            await asyncio.sleep(SETTLE_S)
            table = app.query_one("#goals", KeyedTable)
            updates_before, cpu_before = app.updates, _cpu(me)
            writer.stdin.write(f"load {rate} {seconds} {' '.join(steps)}\n".encode())
            await writer.stdin.drain()
            began = time.monotonic()
            finished = asyncio.ensure_future(writer.stdout.readline())
            while not finished.done():
                row = table.cursor_row
                pressed = time.monotonic()
                app.simulate_key("down" if row < 20 else "up")
                while table.cursor_row == row and time.monotonic() - pressed < 5:
                    await asyncio.sleep(0.002)
                keys.append((time.monotonic() - pressed) * 1000)
                await asyncio.sleep(0.25)
            ended = time.monotonic()
            commits, _ = (await finished).decode().split()
            with Journal.open(path, read_only=True) as journal:
                final = journal.last_sequence()
            while app.header_state.last_sequence < final and time.monotonic() - ended < 10:
                await asyncio.sleep(0.002)
            lag = (time.monotonic() - ended) * 1000
            cpu = 100 * (_cpu(me) - cpu_before) / (time.monotonic() - began)
            updates = app.updates - updates_before
            await asyncio.sleep(0.5)
            missed = _missed(app, path, {s.split(":")[1] for s in steps[: int(commits)]})
    finally:
        writer.stdin.close()
        await writer.wait()
    return {
        "commits": int(commits),
        "updates": updates,
        "keys": summary(keys),
        "lag_ms": lag,
        "cpu_percent": cpu,
        **missed,
    }


def _missed(app: ProbeApp, path: Path, touched: set[str]) -> dict[str, int]:
    """Rows that differ from a fresh read of the journal, and touched Goals not shown."""
    table = app.query_one("#goals", KeyedTable)
    with Journal.open(path, read_only=True) as journal:
        fresh = Reader(journal, NODE).goal_rows(list(app.goal_rows))
    elapsed = [c.key for c in table.spec].index("elapsed")
    differing = 0
    for key, row in app.goal_rows.items():
        shown = [str(c) for i, c in enumerate(table.get_row(key)) if i != elapsed]
        truth = fresh[key]
        cells = app.dashboard.goals.cells
        expected = [str(c) for i, c in enumerate(cells(truth)) if i != elapsed] if truth else None
        if row != truth or shown != expected:
            differing += 1
    return {"differing": differing, "not_shown": len(touched - set(app.goal_rows))}


def measure(
    sizes: list[int], seconds: float, rate: float, log=print, pulses: str = "on"
) -> dict[str, Any]:
    """``pulses``: on, off or both (each dashboard figure with and without the pulses, one arm
    right after the other on the same journal; figures named by ``arm_label``)."""
    arms = PULSE_ARMS[pulses]
    results: dict[str, Any] = {}
    for n in sizes:
        with tempfile.TemporaryDirectory(prefix="refine-bench-") as folder:
            for name, (path, ends_ago) in idle_journals(n, Path(folder), log=log).items():
                for arm in arms:
                    if ends_ago is not None:  # each arm's history ends as long before it
                        shift_history(path, ends_ago)
                    results[f"idle {n} {name}{arm_label(arm, arms)}"] = tmux_cpu(
                        path, seconds, pulses=arm
                    )
    for arm in arms:
        with tempfile.TemporaryDirectory(prefix="refine-bench-") as folder:
            path = journal_with(sizes[0], Path(folder), log=log)
            results[f"load tmux{arm_label(arm, arms)}"] = tmux_cpu(path, seconds, rate, arm)
    for arm in arms:
        with tempfile.TemporaryDirectory(prefix="refine-bench-") as folder:
            path = journal_with(sizes[0], Path(folder), log=log)
            run = _headless_load(path, seconds, rate, arm)
            results[f"load headless{arm_label(arm, arms)}"] = asyncio.run(run)
    results["node idle"] = node_cpu(seconds)
    results["rate"] = rate
    results["sizes"] = sizes
    results["arms"] = arms
    return results


def rows(r: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(figure, value, target) lines for the summary table."""
    out = []
    arms = r.get("arms", (True,))
    for n in r["sizes"]:
        for name, arm in ((name, arm) for name, _, _ in IDLE_JOURNALS for arm in arms):
            label = arm_label(arm, arms)
            idle = r[f"idle {n} {name}{label}"]
            if idle:
                out.append((
                    f"idle CPU, {n:,} goals, {name}{label} (tmux)",
                    f"{idle['cpu_percent']:.2f} % of a core over {idle['seconds']:.0f} s"
                    + (" (indicative: < 20 s)" if idle["seconds"] < 20 else ""),
                    "≤ 0.5 %",
                ))  # fmt: skip
    node = r["node idle"]
    out.append((
        "node idle CPU, nothing to do",
        f"{node['cpu_percent']:.2f} % of a core over {node['seconds']:.0f} s"
        f" ({node['threads']} threads)",
        "≤ 0.1 %",
    ))  # fmt: skip
    for arm in arms:
        out += _load_rows(r, arm_label(arm, arms))
    return out


def _load_rows(r: dict[str, Any], label: str) -> list[tuple[str, str, str]]:
    """The figures under a stream of commits, of one arm (``label``)."""
    out = []
    load, head = r[f"load tmux{label}"], r[f"load headless{label}"]
    if load:
        out.append((
            f"CPU under {r['rate']:.0f} commits/s{label} (tmux)",
            f"{load['cpu_percent']:.1f} % of a core ({load['commits']} commits in"
            f" {load['seconds']:.0f} s)",
            "responsive",
        ))  # fmt: skip
    keys = head["keys"]
    out.append((
        f"under {r['rate']:.0f} commits/s{label} (headless)",
        f"{head['commits']} commits → {head['updates']} updates; key response p50"
        f" {keys['p50']:.0f} ms p95 {keys['p95']:.0f} ms; lag after last"
        f" {head['lag_ms']:.0f} ms; CPU {head['cpu_percent']:.1f} %",
        "coalesced",
    ))  # fmt: skip
    out.append((
        f"  missed under load{label}",
        f"{head['differing']} rows differ from the journal, {head['not_shown']} goals not shown",
        "0, 0",
    ))  # fmt: skip
    return out


def nodes_only(seconds: float, postgres: bool) -> list[tuple[str, str, str]]:
    """The node's idle alone: on SQLite, then (``postgres``) on a server of its own."""
    figures = [("sqlite", node_cpu(seconds))]
    if postgres:
        from tests.helpers.postgres_server import PostgresServer

        server = PostgresServer.start_new()
        try:
            figures.append(("postgresql", node_cpu(seconds, location=server.create_database())))
        finally:
            server.destroy()
    return [
        (
            f"node idle CPU, nothing to do, {backend}",
            f"{node['cpu_percent']:.3f} % of a core over {node['seconds']:.0f} s",
            "≤ 0.1 %",
        )
        for backend, node in figures
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000])
    parser.add_argument("--pulses", choices=sorted(PULSE_ARMS), default="on")
    parser.add_argument("--node-only", action="store_true", help="the idle node alone")
    parser.add_argument("--postgres", action="store_true", help="--node-only on PostgreSQL too")
    args = parser.parse_args(argv)
    if args.node_only:
        for figure, value, target in nodes_only(args.seconds, args.postgres):
            print(f"{figure:<38} {value}  [{target}]")
        return 0
    measured = measure(args.sizes, args.seconds, args.rate, pulses=args.pulses)
    for figure, value, target in rows(measured):
        print(f"{figure:<38} {value}  [{target}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
