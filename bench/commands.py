"""Command throughput (DESIGN §9): claim+complete cycles per second, side by side in one run.

    python bench/commands.py [--cycles 500] [--repeats 5] [--sync FULL NORMAL]

Contenders, each on a fresh file with WAL and the same ``synchronous`` pragma, each given the
same Runs submitted through ours before the clock starts:
- ours: ``Execution.claim`` + ``Execution.complete`` (validation, checks, replay receipt, events
  whose outbox is a view of them; the complete writes two events);
- raw: one ``BEGIN IMMEDIATE`` transaction per command writing by hand exactly the rows ours
  writes (the events chained by ``prev``, the version-checked UPDATE of the row, the receipt),
  their texts made before the clock starts; test_bench.py checks both files are the same;
- eventsourcing: its ``SQLiteApplicationRecorder`` inserting one event per transaction.

Target: ours ≥ 50 % of raw and ≥ eventsourcing. Prints medians over the repeats and the ratios.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from eventsourcing.persistence import StoredEvent
from eventsourcing.sqlite import SQLiteApplicationRecorder, SQLiteDatastore

from store.canonical import canonical_json
from store.journal.core import command_key
from store.journal.sqlite import Journal, Stored
from store.model.execution import Execution, decide_run, run_aggregate_id, validate_run_command
from store.model.run import run_text
from store.records import dataclass

PINS = {
    "candidate_digest": "sha256:" + "ab" * 32,
    "recipe_revision": "recipe.v1",
    "scenario_revision": "scenario.v1",
}
BUDGET = {"max_attempts": 3, "attempt_timeout_ms": 3_600_000}

Timing = tuple[float, float]  # (wall seconds, CPU seconds) of the timed loop
Bench = Callable[[Path, str, int], Timing]  # (directory, synchronous, cycles)


class Clock:
    """Wall and CPU time of one loop; CPU time is the steadier figure on a busy machine."""

    def __enter__(self) -> Clock:
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self.wall
        self.cpu = time.process_time() - self.cpu

    @property
    def timing(self) -> Timing:
        return self.wall, self.cpu


def bench_ours(folder: Path, sync: str, cycles: int) -> Timing:
    path = folder / "ours.db"
    runs = _submitted(path, sync, cycles)
    with Journal.open(path, synchronous=sync) as journal:  # type: ignore[arg-type]
        ex = Execution(journal)
        with Clock() as clock:
            for run_id in runs:
                ex.claim(
                    command_id=f"{run_id}:claim", run_id=run_id, expected_version=1, worker="w1"
                )
                ex.complete(
                    command_id=f"{run_id}:settle:1",
                    run_id=run_id,
                    expected_version=2,
                    epoch=1,
                    evidence=["log:1"],
                )
        return clock.timing


def _connect(path: Path, sync: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA busy_timeout = 5000")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {sync}")
    return conn


@dataclass(frozen=True)
class RawCommand:
    """One command's rows as ours writes them: the raw contender writes exactly these."""

    aggregate_id: str
    command_id: str
    version: int  # the row's new version (checked against version - 1)
    status: str
    events: list[tuple[str, str]]  # (type, data text), in order
    state: str
    key: str  # the receipt's payload digest
    result: str  # the receipt's compact result


def command_writes(run_id: str) -> list[RawCommand]:
    """What ours writes for one Run's claim and complete, made outside the timed loop by the
    same decision and encoders (raw only writes it; test_bench.py compares the files)."""
    agg = run_aggregate_id(run_id)
    inputs = validate_run_command("submit", {"run_id": run_id, "pins": PINS, "budget": BUDGET})
    stored = Stored(agg, 1, decide_run("submit", None, inputs).state)
    out = []
    for op, command_id, fields in (
        ("claim", f"{run_id}:claim", {"worker": "w1"}),
        ("complete", f"{run_id}:settle:1", {"epoch": 1, "evidence": ["log:1"]}),
    ):
        inputs = validate_run_command(op, {"run_id": run_id, **fields})
        change = decide_run(op, stored, inputs)
        key = command_key({"op": op, **inputs}, {agg: stored.version})
        version = stored.version + 1
        events = [(type_, canonical_json(data)) for type_, data in change.events]
        state = run_text(change.state)
        result = f'{{"{agg}":{version}}}'
        out.append(
            RawCommand(agg, command_id, version, change.state["status"], events, state, key, result)
        )
        stored = Stored(agg, version, change.state)
    return out


def _submitted(path: Path, sync: str, cycles: int) -> list[str]:
    """A fresh journal with ``cycles`` Runs submitted through ours (untimed, for both)."""
    with Journal.open(path, synchronous=sync) as journal:  # type: ignore[arg-type]
        ex = Execution(journal)
        runs = [f"bench.r{n}" for n in range(cycles)]
        for run_id in runs:
            ex.submit(command_id=f"{run_id}:submit", run_id=run_id, pins=PINS, budget=BUDGET)
    return runs


def bench_raw(folder: Path, sync: str, cycles: int) -> Timing:
    path = folder / "raw.db"
    commands = [c for run_id in _submitted(path, sync, cycles) for c in command_writes(run_id)]
    conn = _connect(path, sync)

    def command(c: RawCommand) -> None:
        conn.execute("BEGIN IMMEDIATE")
        now = time.time()
        # The first event is chained to the aggregate's newest, each next one to the one before.
        (type_, data), *more = c.events
        seq = conn.execute(
            "INSERT INTO events (aggregate_id, version, type, data, committed_at, command_id,"
            " prev) VALUES (?, ?, ?, ?, ?, ?,"
            " (SELECT last_sequence FROM aggregates WHERE aggregate_id = ?))",
            (c.aggregate_id, c.version, type_, data, now, c.command_id, c.aggregate_id),
        ).lastrowid
        for type_, data in more:
            seq = conn.execute(
                "INSERT INTO events (aggregate_id, version, type, data, committed_at,"
                " command_id, prev) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (c.aggregate_id, c.version, type_, data, now, c.command_id, seq),
            ).lastrowid
        # The journal's row write (version, status, last_sequence: the newest event, state),
        # checked against the version the command was decided on.
        cur = conn.execute(
            "UPDATE aggregates SET version = ?, status = ?, last_sequence = ?, state = ?"
            " WHERE aggregate_id = ? AND version = ?",
            (c.version, c.status, seq, c.state, c.aggregate_id, c.version - 1),
        )
        if cur.rowcount != 1:
            raise RuntimeError("version conflict")
        conn.execute(
            "INSERT INTO receipts (command_id, payload, result, committed_at) VALUES (?,?,?,?)",
            (c.command_id, c.key, c.result, now),
        )
        conn.execute("COMMIT")

    with Clock() as clock:
        for c in commands:
            command(c)
    conn.close()
    return clock.timing


def bench_eventsourcing(folder: Path, sync: str, cycles: int) -> Timing:
    datastore = SQLiteDatastore(
        str(folder / "es.db"), originator_id_type="text", pool_size=1, max_overflow=0
    )
    recorder = SQLiteApplicationRecorder(datastore)
    recorder.create_table()
    with datastore.get_connection(commit=True) as conn:  # same pragma on its pooled connection
        conn._sqlite_conn.execute(f"PRAGMA synchronous = {sync}")
    with datastore.get_connection(commit=True) as conn:
        level = conn._sqlite_conn.execute("PRAGMA synchronous").fetchone()[0]
    assert level == {"NORMAL": 1, "FULL": 2}[sync], "eventsourcing pool lost the pragma"
    body = b'{"epoch":1,"run_id":"bench.r0","worker":"w1"}'
    with Clock() as clock:
        for n in range(cycles):
            run_id = f"bench.r{n}"
            recorder.insert_events([StoredEvent(run_id, 1, "attempt.claimed", body)])
            recorder.insert_events([StoredEvent(run_id, 2, "attempt.completed", body)])
    datastore.close()
    return clock.timing


CONTENDERS: dict[str, Bench] = {
    "ours": bench_ours,
    "raw": bench_raw,
    "eventsourcing": bench_eventsourcing,
}


def measure(sync: str, cycles: int, repeats: int) -> dict[str, tuple[float, float]]:
    """Median (wall, CPU) cycles/s per contender; the order rotates so no one always runs first."""
    runs: dict[str, list[Timing]] = {name: [] for name in CONTENDERS}
    names = list(CONTENDERS)
    for repeat in range(repeats):
        order = names[repeat % len(names) :] + names[: repeat % len(names)]
        for name in order:
            with tempfile.TemporaryDirectory(dir=Path(__file__).parent) as folder:
                runs[name].append(CONTENDERS[name](Path(folder), sync, cycles))
    return {
        name: (
            cycles / statistics.median(wall for wall, _ in timings),
            cycles / statistics.median(cpu for _, cpu in timings),
        )
        for name, timings in runs.items()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--sync", nargs="+", default=["FULL", "NORMAL"], choices=["FULL", "NORMAL"])
    args = parser.parse_args(argv)
    print(f"claim+complete cycles/s (wall clock), median of {args.repeats} x {args.cycles} cycles;")
    print("last two columns: the same ratios in CPU time (steadier when the machine is busy)")
    print(
        f"{'synchronous':<12}{'ours':>7}{'raw':>7}{'eventsrc':>10}{'ours/raw':>10}{'ours/es':>9}"
        f"{'cpu o/raw':>11}{'cpu o/es':>10}"
    )
    ok = True
    for sync in args.sync:
        m = measure(sync, args.cycles, args.repeats)
        (ours, ours_cpu), (raw, raw_cpu), (es, es_cpu) = m["ours"], m["raw"], m["eventsourcing"]
        ok = ok and ours / raw >= 0.5 and ours / es >= 1.0
        print(
            f"{sync:<12}{ours:>7.0f}{raw:>7.0f}{es:>10.0f}{ours / raw:>10.0%}{ours / es:>8.2f}x"
            f"{ours_cpu / raw_cpu:>11.0%}{ours_cpu / es_cpu:>9.2f}x"
        )
    print("targets (ours >= 50% of raw, >= eventsourcing):", "met" if ok else "NOT met")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
