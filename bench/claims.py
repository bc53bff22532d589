"""Racing claims (DESIGN §9): 8 processes claim the same Runs; one winner each, no duplicate.

    python -m bench.claims [--processes 8] [--runs 1000] [--slot-ms 5]

Every process opens its own connection and walks the same list of queued Runs in the same order,
reading each Run and claiming it at the version it read, as a worker would: every Run is a race
between all processes. Losers see VersionConflictError (the winner committed between their read
and their claim) or AttemptActiveError (they read after it). Afterwards the journal is the judge:
one ``attempt.claimed`` event per Run, and the winners the processes reported are its workers.
Two modes: free-running (throughput; processes drift apart, so most losers see the Run already
claimed) and lock-step (every process reads Run n at the same instant, then all claim: most
losers hit the version check).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from store.errors import RefineError
from store.journal.sqlite import Journal
from store.model.execution import Execution
from store.ops.check import check_journal

PINS = {
    "candidate_digest": "sha256:" + "cd" * 32,
    "recipe_revision": "recipe.v1",
    "scenario_revision": "scenario.v1",
}
BUDGET = {"max_attempts": 3, "attempt_timeout_ms": 3_600_000}


def _racer(path: str, worker: str, runs: int, start_at: float, slot: float) -> None:
    """(child) Claim every Run it can; print its wins, refusals by code and time spent.

    ``slot`` > 0: lock-step, Run n is read at ``start_at + n * slot`` and claimed half a slot
    later, so every process holds the same version when the claims collide.
    """
    refused: Counter[str] = Counter()
    won: list[str] = []
    with Journal.open(path, create=False) as journal:
        ex = Execution(journal)
        time.sleep(max(0.0, start_at - time.monotonic()))
        began = time.monotonic()
        for n in range(runs):
            run_id = f"race.r{n}"
            if slot:
                time.sleep(max(0.0, start_at + n * slot - time.monotonic()))
            run = ex.read(run_id)
            assert run is not None
            if slot:
                time.sleep(max(0.0, start_at + (n + 0.5) * slot - time.monotonic()))
            try:
                ex.claim(
                    command_id=f"{run_id}:claim:{worker}",
                    run_id=run_id,
                    expected_version=run.version,
                    worker=worker,
                )
                won.append(run_id)
            except RefineError as exc:
                refused[exc.code] += 1
        elapsed = time.monotonic() - began
    print(json.dumps({"won": won, "refused": refused, "elapsed": elapsed}))


def measure(processes: int = 8, runs: int = 1000, slot: float = 0.0) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="refine-bench-") as folder:
        path = Path(folder) / "journal.db"
        with Journal.open(path) as journal:
            ex = Execution(journal)
            for n in range(runs):
                ex.submit(command_id=f"race:{n}", run_id=f"race.r{n}", pins=PINS, budget=BUDGET)
        start_at = time.monotonic() + 1.5  # every racer has opened its journal by then
        children = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "bench.claims",
                    "--child",
                    str(path),
                    f"w{i}",
                    str(runs),
                    repr(start_at),
                    repr(slot),
                ],
                stdout=subprocess.PIPE,
                text=True,
            )
            for i in range(processes)
        ]
        reports = [json.loads(child.communicate()[0]) for child in children]
        with Journal.open(path, read_only=True) as journal:
            claimed: Counter[str] = Counter()
            owner: dict[str, str] = {}
            after = 0
            while page := journal.events_after(after):
                for event in page:
                    if event.type == "attempt.claimed":
                        run_id = event.aggregate_id.partition(":")[2]
                        claimed[run_id] += 1
                        owner[run_id] = str(event.data["worker"])
                after = page[-1].sequence
            clean = check_journal(journal).clean
    reported = Counter(run for i, r in enumerate(reports) for run in r["won"])
    mismatched = sum(
        1 for i, r in enumerate(reports) for run in r["won"] if owner.get(run) != f"w{i}"
    )
    refusals: Counter[str] = Counter()
    for r in reports:
        refusals.update(r["refused"])
    elapsed = max(r["elapsed"] for r in reports)
    return {
        "mode": f"lock-step {slot * 1000:.0f} ms" if slot else "free-running",
        "wins": sorted((len(r["won"]) for r in reports), reverse=True),
        "processes": processes,
        "races": runs,
        "winners": len(claimed),
        "duplicates": sum(c - 1 for c in claimed.values() if c > 1)
        + sum(c - 1 for c in reported.values() if c > 1)
        + mismatched,
        "unclaimed": runs - len(claimed),
        "refusals": dict(refusals),
        "attempts_per_s": processes * runs / elapsed,
        "claims_per_s": len(claimed) / elapsed,
        "check_clean": clean,
    }


def rows(r: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(figure, value, target) lines for the summary table."""
    refused = ", ".join(f"{code} {n}" for code, n in sorted(r["refusals"].items()))
    return [
        (
            f"racing claims, {r['processes']} processes, {r['mode']}",
            f"{r['races']:,} races: {r['winners']:,} winners, {r['duplicates']} duplicates,"
            f" {r['unclaimed']} unclaimed; check {'clean' if r['check_clean'] else 'FAILED'}",
            "0 duplicates",
        ),
        (
            f"  claims/s, {r['mode']}",
            f"{r['claims_per_s']:,.0f} won/s, {r['attempts_per_s']:,.0f} attempts/s; refused:"
            f" {refused}; wins per process {r['wins']}",
            "",
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--child":
        _racer(argv[1], argv[2], int(argv[3]), float(argv[4]), float(argv[5]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--slot-ms", type=float, default=5.0, help="lock-step slot (0: none)")
    args = parser.parse_args(argv)
    ok = True
    for slot in sorted({0.0, args.slot_ms / 1000}):
        result = measure(args.processes, args.runs, slot)
        for figure, value, target in rows(result):
            print(f"{figure:<44} {value} {target}")
        ok = ok and result["duplicates"] == 0 and result["unclaimed"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
