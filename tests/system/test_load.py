"""Load (issues 6, 12): 4 writer processes commit ~200 commands/s while a ChangeFeed follower and
the real dashboard follow; at the end both show exactly the journal's final state. Runs on each
backend: SQLite (inotify wake-ups) and PostgreSQL (LISTEN/NOTIFY wake-ups).

CI runs 15 s of commands (3,000: fewer per second on a busy machine, never fewer in all);
``REFINE_LOAD_SECONDS=60`` runs the full minute.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any, cast

import psutil

from store.errors import StorageError
from store.journal.sqlite import Event, Journal, Stored
from store.journal.watch import ChangeFeed
from store.model.goals import goal_from_stored
from store.model.run import fold_run, run_from_stored
from store.ops.check import check_journal, fold_goal
from tests.helpers.soak_recipes import ROOT, refine_json

SECONDS = float(os.environ.get("REFINE_LOAD_SECONDS", "15"))
WRITERS = 4
RATE = 200 / WRITERS  # commands/s per writer
WRITER = Path(__file__).parents[1] / "helpers" / "load_writer.py"
RSS_GROWTH_LIMIT = 150 * 2**20


class Follower:
    """What a ChangeFeed consumer learns: every event, by aggregate, in sequence order."""

    def __init__(self, location: str) -> None:
        self.feed = ChangeFeed(location, after_sequence=0)
        self.events: dict[str, list[Event]] = defaultdict(list)
        self.sequences: list[int] = []
        self.wakes = 0

    def take(self) -> None:
        with contextlib.suppress(StorageError):
            for event in self.feed.poll():
                self.sequences.append(event.sequence)
                self.events[event.aggregate_id].append(event)

    async def follow(self, stop: asyncio.Event) -> None:
        watcher = Journal.watch(self.feed.location)  # the backend's own wake-ups
        batches = aiter(watcher)
        # One pending anext() kept across waits: cancelling it would end the generator.
        pending = asyncio.ensure_future(anext(batches))
        try:
            while not stop.is_set():
                done, _ = await asyncio.wait([pending], timeout=0.5)
                if done:
                    pending.result()
                    self.wakes += 1
                    pending = asyncio.ensure_future(anext(batches))
                self.take()
        finally:
            watcher.stop()
            pending.cancel()

    def view(self, kind: str) -> dict[str, dict[str, Any]]:
        """The final states the events imply, in the CLI's JSON shape."""
        out = {}
        for agg, events in self.events.items():
            if not agg.startswith(kind + ":"):
                continue
            version = events[-1].version
            if kind == "goal":
                out[agg[5:]] = goal_from_stored(Stored(agg, version, fold_goal(events))).to_json()
            else:
                out[agg[4:]] = run_from_stored(Stored(agg, version, fold_run(events))).to_json()
        return out


async def start_writers(location: str) -> list[asyncio.subprocess.Process]:
    return [
        await asyncio.create_subprocess_exec(
            sys.executable,
            str(WRITER),
            location,
            str(i),
            str(int(SECONDS * RATE)),  # commands
            str(RATE),
            str(1000 + i),
            cwd=ROOT,
            stdout=asyncio.subprocess.PIPE,
        )
        for i in range(1, WRITERS + 1)
    ]


async def until(predicate: Any, what: str, timeout: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, f"{what} never caught up"
        await asyncio.sleep(0.05)


async def key_latency(app: Any, table: Any, n: int) -> float:
    """Press down/up and wait until the cursor is on another Goal: the key was handled.

    Not its row number: a Goal listed above moves the cursor's row with its Goal, and one
    listed between the press and its handling brings the row number back where it was.
    Up follows down, so the cursor is never at the edge it is pushed towards."""
    loop = asyncio.get_running_loop()
    before, start = table.selected_key, loop.time()
    app.simulate_key("down" if n % 2 == 0 else "up")
    await until(lambda: table.selected_key != before, "the cursor", timeout=10.0)
    return loop.time() - start


async def test_feed_and_dashboard_show_the_final_state_exactly_under_load(
    backend: str, journal_location: str
) -> None:
    from refine_tui.app import RefineApp
    from refine_tui.widgets.keyed_table import KeyedTable

    with Journal.open(journal_location) as created:
        # Children get the printable location: on PostgreSQL the password goes by $PGPASSWORD.
        path = created.location
    follower = Follower(path)
    me = psutil.Process()
    app = RefineApp(journal=path, node="n1", operator="tester")
    async with app.run_test(size=(120, 40)) as pilot:
        stop = asyncio.Event()
        following = asyncio.ensure_future(follower.follow(stop))
        writers = await start_writers(path)
        began = asyncio.get_running_loop().time()
        rss_start, rss_peak, latencies = me.memory_info().rss, 0, list[float]()
        table = app.query_one("#goals", KeyedTable)
        while any(w.returncode is None for w in writers):
            if table.row_count >= 2:  # the operator keeps using the dashboard under load
                latencies.append(await key_latency(app, table, len(latencies)))
            rss_peak = max(rss_peak, me.memory_info().rss)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*(w.wait() for w in writers)), 0.5)
        took = asyncio.get_running_loop().time() - began
        counts = [json.loads((await w.stdout.read()).decode()) for w in writers]  # type: ignore[union-attr]
        with Journal.open(path, read_only=True) as journal:
            last = journal.last_sequence()
            report = check_journal(journal)
        await until(lambda: follower.feed.last_sequence == last, "the feed")
        await until(lambda: app.header_state.last_sequence == last, "the dashboard")
        await pilot.pause()
        stop.set()
        await following

        commands = sum(c["commands"] for c in counts)
        print(
            f"\nload ({backend}): {took:.1f} s, {commands} commands ({commands / took:.0f}/s),"
            f" {last} events, {len(follower.events)} aggregates, follower woke"
            f" {follower.wakes} times; {len(latencies)} keys handled (max"
            f" {max(latencies, default=0) * 1000:.0f} ms); RSS growth"
            f" {(rss_peak - rss_start) / 2**20:.1f} MiB"
        )
        assert all(c["locked"] == 0 and c["refused"] == 0 for c in counts), counts
        assert commands == WRITERS * int(SECONDS * RATE)  # each writer did all its commands
        assert report.clean, report.text()

        # The feed missed nothing: every sequence, once, in order.
        assert follower.sequences == list(range(1, last + 1))
        goals = {g["goal_id"]: g for g in cast(list[dict[str, Any]], refine_json(path, "goals"))}
        runs = {r["run_id"]: r for r in cast(list[dict[str, Any]], refine_json(path, "runs"))}
        assert follower.view("goal") == goals
        assert follower.view("run") == runs

        # The dashboard's rows and cells equal the journal's final state.
        assert set(app.goal_rows) == set(goals) == set(table.keys())
        for goal_id, goal in goals.items():
            row = app.goal_rows[goal_id]
            run = runs[goal["run_id"]]
            attempts = f"{len(run['attempts'])}/{run['budget']['max_attempts']}"
            shown = (row.status, row.round, row.node_id, row.title, row.attempts)
            assert shown == (
                goal["status"],
                goal["round"],
                goal["node_id"],
                goal["title"],
                attempts,
            )
            cells = {k: str(table.get_cell(goal_id, k)) for k in ("status", "attempts")}
            assert cells == {"status": goal["status"], "attempts": attempts}
        assert rss_peak - rss_start < RSS_GROWTH_LIMIT


async def test_dashboard_updates_do_not_grow_the_footer(tmp_path: Path) -> None:
    """Regression (found by the 60 s load): every update refreshed the bindings, and Textual's
    Footer keeps each key widget it recomposes: memory grew ≈ 1.5 MiB/s under load."""
    import gc

    from textual.widget import Widget

    from refine_tui.app import RefineApp

    path = tmp_path / "journal.db"
    Journal.open(path).close()
    app = RefineApp(journal=path, node="n1")

    def widgets() -> int:
        gc.collect()
        return sum(1 for o in gc.get_objects() if isinstance(o, Widget))

    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        before = widgets()
        for _ in range(100):  # what every JournalUpdate does after applying its rows
            app.dashboard.selection_changed()
            await pilot.pause()
        assert widgets() - before < 20
