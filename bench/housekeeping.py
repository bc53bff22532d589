"""A node's housekeeping with many running attempts, in this process (issue 22 item 5).

    python -m bench.housekeeping [--attempts 1000] [--rounds 20] [--serve 40] [--profile]
                                 [--tree DIR]

A fresh SQLite journal with ``--attempts`` Goals of one node, each started (Goals API) by a
worker that is a real ``sleep`` process with its process record; then a ``Node`` of that name,
which finds them running as after a restart. Reported, in CPU time of this process:
- a round: ``tick()`` with housekeeping, and each of its parts (reap, relay, schedule,
  reconcile, cleanup of cancellations), per round over ``--rounds``;
- with ``--serve S``: the node serving (its loop, heartbeat, safety poll) for S seconds once
  settled, as % of one core (``--profile``: cProfile's top of that window).

``--tree DIR`` measures another checkout's node (this file run with its ``PYTHONPATH``): a
before/after on the same box.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import os
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from store.host.processes import ProcessRecord, ProcessRegistry, create_time, this_host
from store.journal.api import Journal
from store.model.goals import Goals
from store.node import scheduler
from store.node.scheduler import Node

NODE = "bench-node"
SETTLE_S = 10.0  # records and folders older than the registry's RACY_NS, the first rounds done


def _attempts(path: Path, count: int) -> list[subprocess.Popen[bytes]]:
    """``count`` running attempts, each with a recorded ``sleep`` as its worker."""
    journal = Journal.open(str(path))
    goals, registry = Goals(journal), ProcessRegistry.for_journal(journal, NODE)
    sleeps = []
    try:
        with journal.durable_at_end():
            for n in range(count):
                goals.create(goal_id=f"h{n}", title=f"h{n}", node_id=NODE, argv=["true"])
                goals.start(goal_id=f"h{n}", node_id=NODE, worker=f"{NODE}/t{n}", token=f"t{n}")
        for n in range(count):
            sleep = subprocess.Popen(["sleep", "3600"], start_new_session=True)
            sleeps.append(sleep)
            rec = _record(journal, registry, f"h{n}.r1", f"{NODE}/t{n}", sleep.pid)
            registry.record(rec, sync=False)
    finally:
        journal.close()
    return sleeps


def _record(
    journal: Journal, registry: ProcessRegistry, run_id: str, worker: str, pid: int
) -> ProcessRecord:
    created = create_time(pid)
    assert created is not None
    return ProcessRecord(
        node_id=NODE,
        pid=pid,
        create_time=created,
        pgid=pid,
        run_id=run_id,
        epoch=1,
        worker=worker,
        argv=("sleep", "3600"),
        log_path=str(registry.log_path(run_id, 1)),
        started_at=time.time(),
        journal_id=journal.journal_id,
        host=this_host(),
    )


def _per_round_ms(step: object, rounds: int) -> float:
    began = time.process_time()
    for _ in range(rounds):
        step()  # type: ignore[operator]
    return (time.process_time() - began) / rounds * 1000


def rounds(node: Node, count: int) -> dict[str, float]:
    parts = ("reap", "relay_wakeups", "schedule", "reconcile", "cleanup_cancelled")
    found = {"round": _per_round_ms(node.tick, count)}
    found.update({part: _per_round_ms(getattr(node, part), count) for part in parts})
    return found


def serve(node: Node, seconds: float, profile: bool) -> tuple[float, int, str]:
    """% of a core over ``seconds`` of the node serving once settled, its rounds, a profile."""
    profiler = cProfile.Profile()
    marks: dict[str, float] = {}

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()

        def begin() -> None:
            marks.update(cpu=time.process_time(), at=time.monotonic(), rounds=node.rounds)
            if profile:
                profiler.enable()

        def end() -> None:
            if profile:
                profiler.disable()
            marks["cpu"] = time.process_time() - marks["cpu"]
            marks["at"] = time.monotonic() - marks["at"]
            marks["rounds"] = node.rounds - marks["rounds"]
            stop.set()

        loop.call_later(SETTLE_S, begin)
        loop.call_later(SETTLE_S + seconds, end)
        await node.serve(stop)

    asyncio.run(run())
    text = io.StringIO()
    if profile:
        pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(30)
    return marks["cpu"] / marks["at"] * 100, int(marks["rounds"]), text.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attempts", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--serve", type=float, default=0.0)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--tree", default=None)
    args = parser.parse_args(argv)
    if args.tree is not None:
        rest = [
            a for a in (sys.argv[1:] if argv is None else argv) if a not in ("--tree", args.tree)
        ]
        env = {**os.environ, "PYTHONPATH": args.tree}
        command = [sys.executable, str(Path(__file__).resolve()), *rest]
        return subprocess.run(command, env=env, cwd=args.tree, check=False).returncode
    os.environ.setdefault("REFINE_FORKSERVER", "0")  # nothing is launched: no forkserver
    tree = str(Path(scheduler.__file__).resolve().parents[2])
    with tempfile.TemporaryDirectory(prefix="refine-housekeeping-") as scratch:
        sleeps = _attempts(Path(scratch) / "journal.db", args.attempts)
        try:
            with Node(str(Path(scratch) / "journal.db"), NODE, capacity=args.attempts) as node:
                time.sleep(SETTLE_S)
                node.tick()  # the first round reads every record and Run once
                found = rounds(node, args.rounds)
                parts = ", ".join(f"{k} {v:.2f}" for k, v in found.items() if k != "round")
                print(
                    f"{tree}: {args.attempts:,} running attempts: a round {found['round']:.2f} ms"
                    f" of CPU ({parts} ms), {found['round'] / scheduler.SAFETY_POLL_S / 10:.2f} %"
                    f" of a core at one round every {scheduler.SAFETY_POLL_S:g} s"
                )
                if args.serve > 0:
                    pct, n, profile = serve(node, args.serve, args.profile)
                    print(f"{tree}: serving {args.serve:g} s: {pct:.2f} % of a core, {n} rounds")
                    print(profile, end="")
        finally:
            for sleep in sleeps:
                sleep.kill()
                sleep.wait()
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
