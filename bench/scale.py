"""The dashboard on 100,000 Goals (DESIGN §9: ≤ 200 MB RSS, first paint ≤ 2 s), and its feel.

    python -m bench.scale [--size 100000] [--repeats 3]

- first paint and memory, real terminal: ``refine tui`` is launched in tmux (120×40); first paint
  is the time from launching the process until the Goals table shows rows and the header says
  live; RSS is the process's resident memory a few seconds later (psutil).
- responsiveness, headless (``run_test``): page-down and end key presses, and applying a
  filter, timed from the key until the table moved (or the filtered rows arrived) and the
  screen refresh after it finished. A filter's first screen is timed to the end of the first
  frame that shows its rows: a callback asked for with the rows (before the app's own), not
  after polling for them — a poll that noticed the rows as that frame began timed the next
  frame (the filter box closing) instead.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from textual.widgets import Input

from bench.common import NODE, TmuxDashboard, journal_with, summary
from bench.latency import SIZE, ProbeApp, ready
from refine_tui.widgets.keyed_table import KeyedTable

SETTLE_S = 3.0
# Typed filters: an id prefix (100 hits), common words (≥ 1,200 hits: the list's cap), a node,
# and the cleared filter between them.
FILTERS = ("g0012", "queued", "", "completed", "n2", "", "held", "running", "")


def first_paint(path: Path) -> dict[str, float] | None:
    """(seconds to first paint, RSS MB) of ``refine tui`` launched in tmux."""
    if not TmuxDashboard.available():
        return None
    with TmuxDashboard(path, SIZE) as tui:
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


async def _responsiveness(path: Path, presses: int) -> dict[str, Any]:
    app = ProbeApp(journal=path, node=NODE)
    began = time.monotonic()
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        load = time.monotonic() - began
        await asyncio.sleep(SETTLE_S)
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


def measure(size: int, repeats: int, presses: int = 20, log=print) -> dict[str, Any]:
    results: dict[str, Any] = {"size": size, "paints": []}
    with tempfile.TemporaryDirectory(prefix="refine-bench-") as folder:
        path = journal_with(size, Path(folder), log=log)
        for _ in range(repeats):
            paint = first_paint(path)
            if paint is not None:
                results["paints"].append(paint)
        results["feel"] = asyncio.run(_responsiveness(path, presses))
    return results


def rows(r: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(figure, value, target) lines for the summary table."""
    out = []
    n, paints, feel = r["size"], r["paints"], r["feel"]
    if paints:
        times = [p["first_paint_s"] for p in paints]
        rss = [p["rss_mb"] for p in paints]
        out.append((
            f"first paint, {n:,} goals (tmux)",
            f"median {statistics.median(times):.2f} s (min {min(times):.2f}, max"
            f" {max(times):.2f}, n={len(times)})",
            "≤ 2 s",
        ))  # fmt: skip
        out.append((
            f"dashboard RSS, {n:,} goals (tmux)",
            f"median {statistics.median(rss):.0f} MB (max {max(rss):.0f})",
            "≤ 200 MB",
        ))  # fmt: skip
    p, e, f, s = feel["pages"], feel["ends"], feel["filters"], feel["first_screens"]
    stall, cpu = feel["stalls"], feel["first_screen_cpu"]
    out.append((
        f"scroll, {n:,} goals (headless)",
        f"page p50 {p['p50']:.0f} ms p95 {p['p95']:.0f} ms; top/bottom p50 {e['p50']:.0f} ms"
        f" max {e['max']:.0f} ms (load {feel['load_s']:.2f} s)",
        "responsive",
    ))  # fmt: skip
    out.append((
        f"filter, {n:,} goals (headless)",
        f"first screen p50 {s['p50']:.0f} ms p95 {s['p95']:.0f} ms (process CPU p50"
        f" {cpu['p50']:.0f} ms); all rows listed p50"
        f" {f['p50']:.0f} ms p95 {f['p95']:.0f} ms (n={f['n']}, enter → painted); longest"
        f" UI stall p50 {stall['p50']:.0f} ms max {stall['max']:.0f} ms",
        "≤ 100 ms p95",
    ))  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    for figure, value, target in rows(measure(args.size, args.repeats)):
        print(f"{figure:<38} {value}  [{target}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
