"""Commit by another process → row updated on the dashboard (DESIGN §9: p95 ≤ 100 ms, ratio ≤ 1.5).

    python -m bench.latency [--sizes 1000 100000] [--samples 100] [--tmux] [--postgres]
                            [--pulses on|off|both]

For each journal size, ``RefineApp`` runs headless (``run_test``) on a copy of the journal; a
writer process starts, then settles, Goals that are on screen, one commit at a time at random
spacing. The writer stamps ``time.monotonic()`` after its commit; the app stamps the moment the
Goals table's status cell of that row holds the new status (a hook that runs right after the
app's own ``JournalUpdate`` handler), and the moment the next screen refresh after it is done.

``--postgres`` puts the journal on PostgreSQL instead (a temp server of the bench's own,
bench/postgres.py; the cached SQLite journal copied in as ``refine copy`` does): the dashboard
then wakes on ``LISTEN``/``NOTIFY`` (store/journal_listen.py) rather than inotify.

``--tmux`` checks the same against a real terminal: ``refine tui`` runs inside a detached tmux
session (120×40) and the bench polls ``tmux capture-pane`` every few ms until the row's line
reads the new status. That figure includes tmux and the polling (≈ 5 ms resolution). Its first
commit is a warm-up, shown apart (at 100k goals the filter's index is still being built then).

``--pulses both`` measures each size twice, side by side on the same journal: with the pulses
(the default) and without them (``RefineApp(pulses=False)``, ``refine tui --no-pulses``: no
pulses line, no reads for it). A SQLite journal's history is moved to end
``HISTORY_ENDS_S`` before the run, so that the pulses have most of an hour to count.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import refine_tui.app
from bench.common import (
    NODE,
    PULSE_ARMS,
    TmuxDashboard,
    arm_label,
    journal_with,
    row_line,
    shift_history,
    summary,
    tui_args,
    writer_command,
)
from refine_tui.app import RefineApp
from refine_tui.messages import JournalUpdate
from refine_tui.widgets.keyed_table import KeyedTable

SIZE = (120, 40)
# The journal's last commit this long before the run: the pulses count most of an hour, and the
# running attempts' elapsed times show minutes (as before the shift), not ticking seconds.
HISTORY_ENDS_S = 900.0
Locations = Callable[[int], AbstractContextManager[str]]  # size -> a fresh journal's location


class ProbeApp(RefineApp):
    """The real app plus a hook that notes when an expected status reaches a row's cell."""

    CSS_PATH = str(Path(refine_tui.app.__file__).with_name("app.tcss"))  # relative to RefineApp

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.expect: dict[str, tuple[str, asyncio.Future[tuple[float, float]]]] = {}
        self.updates = 0
        self.complete = True  # the last full read was shown whole (not only its first screen)
        # When each list (a full read's rows) was on screen, and the filter it was for.
        self.lists_painted: list[tuple[float, str]] = []

    def on_journal_update(self, update: JournalUpdate) -> None:
        # Runs before RefineApp's own handler (Textual calls both, subclass first);
        # call_next runs the probe after that handler has updated the table.
        self.updates += 1
        if update.full:
            self.complete = not update.partial
            # Asked for before the handler's own (the read thread's "painted"): called after
            # the first frame that shows these rows, as the app knows it.
            self.call_after_refresh(self._list_painted)
        self.call_next(self._probe)

    def _list_painted(self) -> None:
        self.lists_painted.append((time.monotonic(), self.header_state.filter))

    def _probe(self) -> None:
        table = self.query_one("#goals", KeyedTable)
        for gid, (status, done) in list(self.expect.items()):
            try:
                cell = str(table.get_cell(gid, "status"))
            except Exception:
                continue
            if cell == status and not done.done():
                seen = time.monotonic()
                del self.expect[gid]
                self.call_after_refresh(lambda d=done, s=seen: d.set_result((s, time.monotonic())))


async def ready(app: RefineApp, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not (app.goal_rows and app.header_state.state == "live"):
        if time.monotonic() > deadline:
            raise RuntimeError("dashboard never loaded")
        await asyncio.sleep(0.02)


async def listed(app: ProbeApp, timeout: float = 120.0) -> None:
    """Until the whole list is shown, not only its first screen (the samples are taken from it),
    and the filter's index is built: the steady state. The index is built once after the first
    paint (≈ 1 s at 100k goals), beside the live reads."""
    deadline = time.monotonic() + timeout
    goals = app.dashboard.goals
    while not (app.complete and not goals.filling and app.live.indexed):  # last chunk too
        if time.monotonic() > deadline:
            raise RuntimeError("the dashboard never listed every goal")
        await asyncio.sleep(0.02)


async def _headless(
    path: str,
    samples: int,
    seed: int,
    gap_s: tuple[float, float] = (0.05, 0.25),
    pulses: bool = True,
    listed_s: float = 120.0,
) -> dict[str, Any]:
    """``gap_s``: the random pause between two samples' commits (a test asking only how many
    samples were taken needs none); ``pulses=False``: the dashboard without them; ``listed_s``:
    how long the dashboard may take to list every Goal and build its filter index first."""
    rng = random.Random(seed)
    app = ProbeApp(journal=path, node=NODE, pulses=pulses)
    writer = await asyncio.create_subprocess_exec(
        *writer_command(path), stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert writer.stdin is not None and writer.stdout is not None
    seen: list[float] = []
    painted: list[float] = []
    try:
        async with app.run_test(size=SIZE):
            await ready(app)
            await listed(app, listed_s)
            queued = [k for k, r in app.goal_rows.items() if r.status == "queued" and r.round == 1]
            queued = [k for k in queued if app.goal_rows[k].attempts.startswith("0/")]
            plan = [(op, gid) for gid in queued[: (samples + 1) // 2] for op in ("start", "settle")]
            await asyncio.sleep(0.5)  # let the first paint settle
            for op, gid in plan[:samples]:
                status = "running" if op == "start" else "completed"
                done: asyncio.Future[tuple[float, float]] = (
                    asyncio.get_running_loop().create_future()
                )
                app.expect[gid] = (status, done)
                writer.stdin.write(f"{op} {gid}\n".encode())
                await writer.stdin.drain()
                committed = float((await writer.stdout.readline()).decode())
                t_seen, t_painted = await asyncio.wait_for(done, 10)
                seen.append((t_seen - committed) * 1000)
                painted.append((t_painted - committed) * 1000)
                await asyncio.sleep(rng.uniform(*gap_s))
            updates = app.updates
    finally:
        writer.stdin.close()
        await writer.wait()
    return {"seen": summary(seen), "painted": summary(painted), "updates": updates}


def commit_to_row(location: str, samples: int, seed: int, listed_s: float) -> dict[str, Any]:
    """The headless figures on a journal that exists (bench.million's, a million Goals long)."""
    return asyncio.run(_headless(location, samples, seed, listed_s=listed_s))


def tmux_samples(path: str, samples: int, seed: int, pulses: bool = True) -> dict[str, Any] | None:
    """Commit → the row's line in a real terminal (tmux) shows it; None without tmux."""
    if not TmuxDashboard.available():
        return None
    rng = random.Random(seed)
    writer = subprocess.Popen(
        writer_command(path), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert writer.stdin is not None and writer.stdout is not None
    latencies: list[float] = []
    first = 0.0
    try:
        with TmuxDashboard(path, SIZE, tui_args(pulses)) as tui:
            tui.wait_for(lambda screen: "live" in screen and " queued " in screen)
            time.sleep(1.0)
            screen = tui.screen()
            lines = [line for line in screen.splitlines() if " queued " in line]
            visible = [line.split()[0] for line in lines if " 0/3 " in line]
            plan = [(op, g) for g in visible[: samples // 2 + 1] for op in ("start", "settle")]
            # The first commit is a warm-up, shown apart: at 100k goals the filter's index is
            # still being built after the first paint (tmux cannot see when that ends).
            for k, (op, gid) in enumerate(plan[: samples + 1]):
                status = "running" if op == "start" else "completed"
                writer.stdin.write(f"{op} {gid}\n")
                writer.stdin.flush()
                committed = float(writer.stdout.readline())

                def shows(screen: str, gid: str = gid, status: str = status) -> bool:
                    return f" {status} " in row_line(screen, gid)

                shown = tui.wait_for(shows, 10)
                if k == 0:
                    first = (shown - committed) * 1000
                else:
                    latencies.append((shown - committed) * 1000)
                time.sleep(rng.uniform(0.05, 0.25))
    finally:
        writer.stdin.close()
        writer.wait()
    return summary(latencies) | {"first": first} if latencies else None


@contextlib.contextmanager
def journals(backend: str, log: Callable[[str], None]) -> Iterator[Locations]:
    """Where the journals of each size go: files, or databases on a server started for the run."""
    if backend == "sqlite":

        @contextlib.contextmanager
        def on_file(n: int) -> Iterator[str]:
            with tempfile.TemporaryDirectory(prefix="refine-bench-") as folder:
                path = journal_with(n, Path(folder), log=log)
                shift_history(path, HISTORY_ENDS_S)
                yield str(path)

        yield on_file
    else:
        from bench import postgres

        with postgres.server() as pg:
            yield lambda n: postgres.journal_with_goals(pg, n, log=log)


def measure(
    sizes: list[int],
    samples: int,
    tmux: bool,
    log=print,
    backend: str = "sqlite",
    pulses: str = "on",
) -> dict[int, dict[str, Any]]:
    """Per size, the first arm's figures; with ``pulses="both"`` the second arm's (pulses off)
    under ``"pulses off"``, measured right after it on a fresh copy of the same journal."""
    arms = PULSE_ARMS[pulses]
    results: dict[int, dict[str, Any]] = {}
    with journals(backend, log) as location_of:
        for n in sizes:
            measured = [_measure_arm(location_of, n, samples, tmux, arm) for arm in arms]
            results[n] = measured[0] | {"arms": arms}
            if len(measured) > 1:
                results[n]["pulses off"] = measured[1]
    return results


def _measure_arm(
    location_of: Locations, n: int, samples: int, tmux: bool, pulses: bool
) -> dict[str, Any]:
    with location_of(n) as location:
        result = asyncio.run(_headless(location, samples, seed=n, pulses=pulses))
    if tmux:
        with location_of(n) as location:
            result["tmux"] = tmux_samples(location, max(10, samples // 5), seed=n, pulses=pulses)
    return result


def rows(results: dict[int, dict[str, Any]], backend: str = "sqlite") -> list[tuple[str, str, str]]:
    """(figure, value, target) lines for the summary table."""
    on = "" if backend == "sqlite" else ", PostgreSQL"
    arms = next(iter(results.values())).get("arms", (True,)) if results else (True,)
    out = []
    for arm in arms:  # an arm's figures together: its sizes, then their ratio
        label = on + arm_label(arm, arms)
        of_arm = {n: r if arm == arms[0] else r["pulses off"] for n, r in results.items()}
        for n, r in of_arm.items():
            out += _size_rows(n, r, label)
        sizes = sorted(of_arm)
        if len(sizes) >= 2:
            small, big = of_arm[sizes[0]]["seen"], of_arm[sizes[-1]]["seen"]
            out.append((
                f"latency ratio {sizes[-1]:,}/{sizes[0]:,}{label}",
                f"p50 {big['p50'] / small['p50']:.2f} · p95 {big['p95'] / small['p95']:.2f}",
                "≤ 1.5",
            ))  # fmt: skip
    return out


def _size_rows(n: int, r: dict[str, Any], on: str) -> list[tuple[str, str, str]]:
    """One size's lines, of one arm (``on``: the backend and the arm, in words)."""
    s, p = r["seen"], r["painted"]
    out = [(
        f"commit → row, {n:,} goals{on} (headless)",
        f"p50 {s['p50']:.0f} ms · p95 {s['p95']:.0f} ms · max {s['max']:.0f} ms"
        f" (painted p95 {p['p95']:.0f} ms, n={s['n']})",
        "p95 ≤ 100 ms",
    )]  # fmt: skip
    if t := r.get("tmux"):
        out.append((
            f"commit → row, {n:,} goals{on} (tmux)",
            f"p50 {t['p50']:.0f} ms · p95 {t['p95']:.0f} ms (n={t['n']};"
            f" first after start {t['first']:.0f} ms)",
            "p95 ≤ 100 ms",
        ))  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 100_000])
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--tmux", action="store_true")
    parser.add_argument("--postgres", action="store_true", help="the journal on PostgreSQL")
    parser.add_argument("--pulses", choices=sorted(PULSE_ARMS), default="on")
    args = parser.parse_args(argv)
    backend = "postgresql" if args.postgres else "sqlite"
    results = measure(args.sizes, args.samples, args.tmux, backend=backend, pulses=args.pulses)
    for figure, value, target in rows(results, backend):
        print(f"{figure:<38} {value:<60} {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
