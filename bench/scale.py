"""The dashboard on 100,000 Goals (DESIGN §9: ≤ 200 MB RSS, first paint ≤ 2 s), and its feel.

    python -m bench.scale [--size 100000] [--repeats 3] [--mix busy|history] [--pulses on|off|both]
                          [--postgres] [--settle 3 ...]

- first paint and memory, real terminal: ``refine tui`` is launched in tmux (120×40); first paint
  is the time from launching the process until the Goals table shows rows and the header says
  live; RSS is the process's resident memory a few seconds later (psutil). The journal's history
  is moved to end a minute before (``HISTORY_ENDS_S``), so that the pulses (drawn from the last
  hour's history at start) have a full hour to read; ``--mix history``: the long-history journal
  (bench.common); ``--pulses both``: each repeat with and without the pulses (``refine tui
  --no-pulses``), one after the other.
- responsiveness, headless (``run_test``): page-down and end key presses, and applying a
  filter, timed from the key until the table moved (or the filtered rows arrived) and the
  screen refresh after it finished. A filter's first screen is timed to the end of the first
  frame that shows its rows: a callback asked for with the rows (before the app's own), not
  after polling for them — a poll that noticed the rows as that frame began timed the next
  frame (the filter box closing) instead. ``--settle``: how long the headless dashboard is left
  after its first screen before the keys (its filter index of every Goal is built in that
  time: 12 s at a million on SQLite); several values measure the feel once after each.

``--postgres``: the journal ``refine copy``-ed into a database of a server of the run's own
first (bench/postgres.py), and the dashboard on that.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from textual.widgets import Input

from bench.common import (
    NODE,
    PULSE_ARMS,
    TmuxDashboard,
    arm_label,
    journal_with,
    shift_history,
    summary,
    tui_args,
)
from bench.latency import SIZE, ProbeApp, ready
from refine_tui.widgets.keyed_table import KeyedTable

SETTLE_S = 3.0
HISTORY_ENDS_S = 60.0  # the journal's last commit this long before the run
# Typed filters: an id prefix (100 hits), common words (≥ 1,200 hits: the list's cap), a node,
# and the cleared filter between them.
FILTERS = ("g0012", "queued", "", "completed", "n2", "", "held", "running", "")


def first_paint(path: str | Path, pulses: bool = True) -> dict[str, float] | None:
    """(seconds to first paint, RSS MB) of ``refine tui`` launched in tmux (``--no-pulses``)."""
    if not TmuxDashboard.available():
        return None
    with TmuxDashboard(path, SIZE, tui_args(pulses)) as tui:
        shown = tui.wait_for(lambda screen: "live" in screen and " queued " in screen)
        painted = shown - tui.started
        time.sleep(SETTLE_S)
        rss = tui.process.memory_info().rss / 2**20
    return {"first_paint_s": painted, "rss_mb": rss}


async def _painted(app: ProbeApp) -> float:
    done: asyncio.Future[float] = asyncio.get_running_loop().create_future()
    app.call_after_refresh(lambda: done.set_result(time.monotonic()))
    return await done


async def _until(condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError("the dashboard did not respond")
        await asyncio.sleep(0.001)


async def _longest_stall(until: asyncio.Event) -> float:
    """The longest the event loop went without a turn until ``until`` (ms): what a key
    pressed meanwhile waits at most."""
    longest, last = 0.0, time.monotonic()
    while not until.is_set():
        await asyncio.sleep(0.001)
        now = time.monotonic()
        longest, last = max(longest, now - last), now
    return longest * 1000


async def _responsiveness(
    path: str | Path, presses: int, pulses: bool = True, settle_s: float = SETTLE_S
) -> dict[str, Any]:
    app = ProbeApp(journal=path, node=NODE, pulses=pulses)
    began = time.monotonic()
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        load = time.monotonic() - began
        await asyncio.sleep(settle_s)
        table = app.query_one("#goals", KeyedTable)
        goals = app.dashboard.goals
        pages: list[float] = []
        for n in range(presses):
            before = table.scroll_y
            pressed = time.monotonic()
            app.simulate_key("pagedown" if n < presses // 2 else "pageup")
            await _until(lambda b=before: table.scroll_y != b)
            pages.append((await _painted(app) - pressed) * 1000)
        ends: list[float] = []
        for key in ("ctrl+end", "ctrl+home", "ctrl+end", "ctrl+home"):
            before = table.cursor_row
            pressed = time.monotonic()
            app.simulate_key(key)
            await _until(lambda b=before: table.cursor_row != b)
            ends.append((await _painted(app) - pressed) * 1000)
        firsts: list[float] = []
        cpus: list[float] = []  # process CPU from enter to the first screen
        filters: list[float] = []
        stalls: list[float] = []
        for text in FILTERS:
            await pilot.press("slash")
            app.query_one("#filter", Input).value = text
            await pilot.pause()  # the operator typed; the clock starts at enter
            app.complete = False
            listed = asyncio.Event()
            stall = asyncio.create_task(_longest_stall(listed))
            app.lists_painted.clear()
            pressed, cpu = time.monotonic(), time.process_time()
            app.simulate_key("enter")
            await _until(lambda t=text: app.header_state.filter == t and _filtered(app, t))
            await _until(lambda t=text: any(f == t for _, f in app.lists_painted))
            painted_at = next(at for at, f in app.lists_painted if f == text)
            firsts.append((painted_at - pressed) * 1000)
            cpus.append((time.process_time() - cpu) * 1000)
            await _until(lambda g=goals: app.complete and not g.filling)  # its last chunk too
            filters.append((await _painted(app) - pressed) * 1000)
            listed.set()
            stalls.append(await stall)
            shown = len(app.goal_rows)
    return {
        "settle_s": settle_s,
        "load_s": load,
        "pages": summary(pages),
        "ends": summary(ends),
        "filters": summary(filters),
        "first_screens": summary(firsts),
        "first_screen_cpu": summary(cpus),
        "stalls": summary(stalls),
        "shown": shown,
    }


def _filtered(app: ProbeApp, text: str) -> bool:
    """The table holds rows, only rows matching ``text`` (the header says which filter)."""
    rows = app.goal_rows.values()
    return bool(rows) and all(app.dashboard.goals.matches(r) for r in rows)


def measure(
    size: int,
    repeats: int,
    presses: int = 20,
    log=print,
    mix: str = "busy",
    pulses: str = "on",
    postgres: bool = False,
    settles: tuple[float, ...] = (SETTLE_S,),
) -> dict[str, Any]:
    """``pulses``: the first paints with them, without, or both (alternating, one repeat of each
    at a time); the feel is measured with the first arm, once after each of ``settles``."""
    arms = PULSE_ARMS[pulses]
    results: dict[str, Any] = {"size": size, "mix": mix, "arms": arms, "postgres": postgres}
    results |= {f"paints{arm_label(arm, arms)}": [] for arm in arms}
    with tempfile.TemporaryDirectory(prefix="refine-bench-") as folder:
        path = journal_with(size, Path(folder), mix=mix, log=log)
        shift_history(path, HISTORY_ENDS_S)
        with _located(path, postgres, log) as location:
            for _ in range(repeats):
                for arm in arms:
                    paint = first_paint(location, arm)
                    if paint is not None:
                        results[f"paints{arm_label(arm, arms)}"].append(paint)
            results["feels"] = [
                asyncio.run(_responsiveness(location, presses, arms[0], settle))
                for settle in settles
            ]
    return results


@contextlib.contextmanager
def _located(path: Path, postgres: bool, log: Callable[[str], None]) -> Iterator[str]:
    """The journal at ``path``, or its ``refine copy`` into a server of the run's own."""
    if not postgres:
        yield str(path)
        return
    from bench import postgres as server_bench
    from bench.million import _run  # here: bench.million imports this module

    with server_bench.server() as server:
        url = server.create_database()
        took = _run(["copy", str(path), url], lambda: server_bench.server_cpu(server))
        log(f"refine copy into PostgreSQL: {took.wall:.0f} s, server CPU {took.server_cpu:.0f} s")
        yield url


def rows(r: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(figure, value, target) lines for the summary table."""
    out = []
    n, arms = r["size"], r.get("arms", (True,))
    of = f", {r['mix']} journal" if r.get("mix", "busy") != "busy" else ""
    of += ", PostgreSQL" if r.get("postgres") else ""
    for arm in arms:
        label = of + arm_label(arm, arms)
        if paints := r[f"paints{arm_label(arm, arms)}"]:
            out += _paint_rows(n, paints, label)
    for feel in r["feels"]:
        out += _feel_rows(n, feel, of)
    return out


def _feel_rows(n: int, feel: dict[str, Any], of: str) -> list[tuple[str, str, str]]:
    out = []
    of += f", {feel['settle_s']:g} s after ready"
    p, e, f, s = feel["pages"], feel["ends"], feel["filters"], feel["first_screens"]
    stall, cpu = feel["stalls"], feel["first_screen_cpu"]
    out.append((
        f"scroll, {n:,} goals{of} (headless)",
        f"page p50 {p['p50']:.0f} ms p95 {p['p95']:.0f} ms; top/bottom p50 {e['p50']:.0f} ms"
        f" max {e['max']:.0f} ms (load {feel['load_s']:.2f} s)",
        "responsive",
    ))  # fmt: skip
    out.append((
        f"filter, {n:,} goals{of} (headless)",
        f"first screen p50 {s['p50']:.0f} ms p95 {s['p95']:.0f} ms (process CPU p50"
        f" {cpu['p50']:.0f} ms); all rows listed p50"
        f" {f['p50']:.0f} ms p95 {f['p95']:.0f} ms (n={f['n']}, enter → painted); longest"
        f" UI stall p50 {stall['p50']:.0f} ms max {stall['max']:.0f} ms",
        "≤ 100 ms p95",
    ))  # fmt: skip
    return out


def _paint_rows(n: int, paints: list[dict[str, float]], label: str) -> list[tuple[str, str, str]]:
    times = [p["first_paint_s"] for p in paints]
    rss = [p["rss_mb"] for p in paints]
    return [
        (
            f"first paint, {n:,} goals{label} (tmux)",
            f"median {statistics.median(times):.2f} s (min {min(times):.2f}, max"
            f" {max(times):.2f}, n={len(times)})",
            "≤ 2 s",
        ),
        (
            f"dashboard RSS, {n:,} goals{label} (tmux)",
            f"median {statistics.median(rss):.0f} MB (max {max(rss):.0f})",
            "≤ 200 MB",
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--mix", choices=("busy", "history"), default="busy")
    parser.add_argument("--pulses", choices=sorted(PULSE_ARMS), default="on")
    parser.add_argument("--postgres", action="store_true", help="the journal on PostgreSQL")
    parser.add_argument("--settle", type=float, nargs="+", default=[SETTLE_S])
    args = parser.parse_args(argv)
    measured = measure(
        args.size,
        args.repeats,
        mix=args.mix,
        pulses=args.pulses,
        postgres=args.postgres,
        settles=tuple(args.settle),
    )
    for figure, value, target in rows(measured):
        print(f"{figure:<38} {value}  [{target}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
