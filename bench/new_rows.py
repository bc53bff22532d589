"""What a new Goal costs a dashboard: its CPU per new row, and commit → row, on SQLite.

    python -m bench.new_rows [--trees DIR ...] [--rate 10] [--goals 150] [--rounds 2] [--size 0]

A journal of ``--size`` Goals and one more; the real dashboard (``bench.fanout_dashboard``,
headless, 120×40) on it, in a process of its own run from each tree in turn (that tree's
directory first on ``sys.path``); then ``--goals`` new Goals at ``--rate`` a second from this
process, each sorting above the one the cursor is on, so each moves every row on the screen, as
a stream of new Goals does. Reported per tree: the dashboard's CPU per new Goal (user + system
over the stream, divided by the Goals) and commit → row painted p50 / p95, the median of the
rounds and each round's. At a low rate each Goal is a frame of its own; at a high rate frames
take several.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from statistics import median
from typing import Any

import psutil

_ROOT = Path(__file__).resolve().parent.parent
if str(_ROOT) not in sys.path:  # tests/helpers lives beside the package, not in it
    sys.path.insert(0, str(_ROOT))

from bench.attempts import _cpu  # noqa: E402
from bench.common import percentile  # noqa: E402
from bench.fanout import _dashboard, _painted, _ready  # noqa: E402
from store.journal.api import Journal  # noqa: E402
from store.model.goals import Goals  # noqa: E402


def measure(tree: str, rate: float, goals: int, size: int = 0) -> dict[str, Any]:
    """One round: the dashboard of ``tree`` on ``size`` + 1 Goals while ``goals`` Goals are
    added at ``rate``."""
    env = {**os.environ, "PYTHONPATH": tree}
    with tempfile.TemporaryDirectory(prefix="refine-new-rows-") as scratch:
        path = f"{scratch}/journal.db"
        with Journal.open(path) as journal:
            earlier = Goals(journal)
            for k in range(size):  # "p…": below the new ones, above the cursor's "seed"
                earlier.create(
                    goal_id=f"p{k:07d}", title="earlier", node_id="elsewhere", argv=["true"]
                )
            earlier.create(goal_id="seed", title="seed", node_id="elsewhere", argv=["true"])
        board = _dashboard(
            [sys.executable, "-m", "bench.fanout_dashboard", "--journal", path], env, cwd=tree
        )
        try:
            _ready(board)
            time.sleep(1.0)  # its start-up reads end
            process = [psutil.Process(board.pid)]
            committed: dict[str, float] = {}
            with Journal.open(path) as journal:
                new = Goals(journal)
                before = _cpu(process)
                began = time.monotonic()
                for k in range(goals):  # "g…" sorts above "seed": every row on screen moves
                    time.sleep(max(0.0, began + k / rate - time.monotonic()))
                    committed[f"g{k:05d}"] = time.monotonic()
                    new.create(goal_id=f"g{k:05d}", title="new", node_id="elsewhere", argv=["true"])
                time.sleep(1.0)  # the last rows are painted
                cpu = _cpu(process) - before
            painted = _painted(board, committed)
        finally:
            if board.poll() is None:
                board.kill()
                board.wait()
    latency = [ms for ms in painted if ms is not None]
    return {
        "tree": tree,
        "size": size,
        "cpu_ms": cpu / goals * 1000,
        "p50_ms": percentile(latency, 50) if latency else float("inf"),
        "p95_ms": percentile(latency, 95) if latency else float("inf"),
        "missed": goals - len(latency),
    }


def rows(results: list[dict[str, Any]], rate: float) -> list[tuple[str, str, str]]:
    """A line per tree: the medians of its rounds, each round's CPU after them."""
    lines = []
    for tree in dict.fromkeys(r["tree"] for r in results):
        mine = [r for r in results if r["tree"] == tree]
        rounds = ", ".join(f"{r['cpu_ms']:.1f}" for r in mine)
        missed = sum(r["missed"] for r in mine)
        figure = (
            f"CPU {median(r['cpu_ms'] for r in mine):.1f} ms per new Goal (rounds: {rounds}); "
            f"commit → row p50 {median(r['p50_ms'] for r in mine):.0f} ms, "
            f"p95 {median(r['p95_ms'] for r in mine):.0f} ms; missed {missed}"
        )
        listed = mine[0]["size"] + 1
        size = f"{listed:,} Goal{'s' if listed != 1 else ''}"
        name = f"dashboard, new Goals at {rate:g}/s (SQLite, {size} before), {tree}"
        lines.append((name, figure, "—"))
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", nargs="+", default=[str(_ROOT)])
    parser.add_argument("--rate", type=float, default=10.0)
    parser.add_argument("--goals", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--size", type=int, default=0, help="Goals in the journal before")
    args = parser.parse_args(argv)
    trees = [str(Path(t).resolve()) for t in args.trees]
    results = [
        measure(tree, args.rate, args.goals, args.size)
        for _ in range(args.rounds)
        for tree in trees
    ]
    for name, figure, target in rows(results, args.rate):
        print(f"{name} | {figure} | {target}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
