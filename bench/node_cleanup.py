"""Confirming a whole node's attempts (DESIGN §14: `refine cleanup --node N`), timed.

    python -m bench.node_cleanup [--attempts 300 1000] [--rounds 2] [--trees DIR ...]

For each count N: a fresh SQLite journal with N running attempts of node ``b7``, whose
heartbeat has gone silent, then ``cleanup_node`` from another node's name on this machine (as
an operator's `refine cleanup --node b7` does): wall and CPU time of the whole cleanup, which
confirms each attempt as its own command and looks for each attempt's worker among this
machine's processes. ``--trees A B``: each tree's code in turn (its ``PYTHONPATH``), rounds
alternating, for before/after side by side.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

NODE = "b7"


def measure(attempts: int) -> dict[str, float]:
    """Wall and CPU seconds of one node's cleanup of ``attempts`` running attempts."""
    from store.journal.presence import MISSED_BEATS, Beat
    from store.journal.sqlite import Journal
    from store.model.goals import Goals
    from store.ops.node_cleanup import cleanup_node

    with (
        tempfile.TemporaryDirectory(prefix="refine-node-cleanup-") as scratch,
        Journal.open(Path(scratch) / "journal.db", synchronous="NORMAL") as journal,
    ):
        goals = Goals(journal)
        for i in range(attempts):
            goals.create(goal_id=f"g{i}", title=f"g{i}", node_id=NODE, argv=["true"])
            goals.start(goal_id=f"g{i}", node_id=NODE, worker=f"{NODE}/t{i}", token=f"t{i}")
        beat_s = 0.05
        journal.write_presence(Beat(NODE, "start", "gone", 4, "0.1.0", beat_s))
        time.sleep(beat_s * (MISSED_BEATS + 1))  # silent
        wall, cpu = time.perf_counter(), time.process_time()
        done = cleanup_node(journal, NODE, here="c1", operator="bench")
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    confirmed = sum(report.outcome != "refused" for report in done.reports)
    return {"attempts": attempts, "confirmed": confirmed, "wall_s": wall, "cpu_s": cpu}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attempts", type=int, nargs="+", default=[300, 1000])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--trees", nargs="+", default=None)
    parser.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one is not None:  # one measurement, in this process (run by --trees)
        r = measure(args.one)
        print(f"{r['attempts']:,} attempts: {r['wall_s']:.2f} s wall, {r['cpu_s']:.2f} s CPU,"
              f" {r['confirmed']:,} confirmed", flush=True)  # fmt: skip
        return 0
    for r in range(args.rounds):
        for n in args.attempts:
            for tree in args.trees or [None]:
                env = {**os.environ, **({"PYTHONPATH": tree} if tree else {})}
                command = [sys.executable, str(Path(__file__).resolve()), "--one", str(n)]
                out = subprocess.run(
                    command, env=env, cwd=tree, capture_output=True, text=True, check=True
                )
                print(f"round {r} {tree or '.'} | {out.stdout.strip()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
