"""Transactional batching of claims (ADR-003; issue 27 item 3): 100 claims at once.

    python -m bench.batch [--claims 100] [--rounds 7] [--no-postgres]

For each journal (SQLite at ``synchronous=FULL`` and ``NORMAL``; PostgreSQL with fsync on, a
server of the bench's own), each round makes ``--claims`` fresh queued Goals, then claims them
(``Goals.start``, each with its own token, as a worker does) two ways, side by side, in turn:
one command each (a commit each), and all in one ``Goals.start_many`` (one transaction: each
claim keeps its command id, receipt, events and refusal). Printed: the median over rounds of
the time until the last claim committed, and of the CPU of this process, with the ratio.

This is the claims' share of a burst of launches. One process commits one claim after another
here; a node's workers claiming at once also wait for each other's write lock.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from store.journal.api import Journal
from store.model.goals import Goals, Start

Row = tuple[str, str, str]
Timing = tuple[float, float]  # wall, CPU seconds
TARGET = "100 at once: launch p95 ≤ 150 ms"


def _goals(journal: Journal, prefix: str, n: int) -> list[Start]:
    goals = Goals(journal)
    for i in range(n):
        goals.create(goal_id=f"{prefix}-{i}", title="batch", node_id="n1", argv=["true"])
    return [Start(f"{prefix}-{i}", "n1", f"n1/{prefix}-{i}", f"{prefix}-{i}", 1) for i in range(n)]


def _one_by_one(journal: Journal, starts: list[Start]) -> None:
    goals = Goals(journal)
    for s in starts:
        goals.start(goal_id=s.goal_id, node_id=s.node_id, worker=s.worker, token=s.token, round=1)


def _batched(journal: Journal, starts: list[Start]) -> None:
    results = Goals(journal).start_many(starts)
    refused = [r for r in results if isinstance(r, Exception)]
    if refused:
        raise RuntimeError(f"{len(refused)} claims refused: {refused[0]}")


def _timed(
    claim: Callable[[Journal, list[Start]], None], journal: Journal, starts: list[Start]
) -> Timing:
    wall, cpu = time.perf_counter(), time.process_time()
    claim(journal, starts)
    return time.perf_counter() - wall, time.process_time() - cpu


def measure(location: str, n: int, rounds: int, **options: object) -> dict[str, list[Timing]]:
    """Per way: (wall, CPU) seconds of each round's ``n`` claims."""
    out: dict[str, list[Timing]] = {"one by one": [], "batched": []}
    with Journal.open(location, **options) as journal:  # type: ignore[arg-type]
        for r in range(rounds):
            for way, claim in (("one by one", _one_by_one), ("batched", _batched)):
                starts = _goals(journal, f"r{r}-{way[0]}", n)
                out[way].append(_timed(claim, journal, starts))
    return out


def rows(label: str, n: int, m: dict[str, list[Timing]]) -> list[Row]:
    one = statistics.median(w for w, _ in m["one by one"])
    batched = statistics.median(w for w, _ in m["batched"])
    one_cpu = statistics.median(c for _, c in m["one by one"])
    batched_cpu = statistics.median(c for _, c in m["batched"])
    value = (
        f"one by one {1000 * one:.0f} ms ({1000 * one_cpu / n:.2f} ms CPU a claim);"
        f" batched {1000 * batched:.0f} ms ({1000 * batched_cpu / n:.2f} ms CPU a claim);"
        f" {one / batched:.1f}×"
    )
    return [(f"{n} claims committed, {label} (last one committed after)", value, TARGET)]


@contextlib.contextmanager
def _postgres() -> Iterator[str]:
    from bench.postgres import server

    with server(fsync=True) as pg:
        url = pg.create_database()
        try:
            yield url
        finally:
            pg.drop_database(url)


def sqlite_rows(claims: int, rounds: int) -> list[Row]:
    """The figures on a new SQLite journal, at FULL then at NORMAL."""
    out: list[Row] = []
    for sync in ("FULL", "NORMAL"):
        with tempfile.TemporaryDirectory(prefix="refine-bench-") as folder:
            m = measure(str(Path(folder) / "journal.db"), claims, rounds, synchronous=sync)
            out += rows(f"SQLite {sync}", claims, m)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--claims", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--no-postgres", action="store_true")
    args = parser.parse_args(argv)
    out = sqlite_rows(args.claims, args.rounds)
    if not args.no_postgres:
        with _postgres() as url:
            m = measure(url, args.claims, args.rounds)
            out += rows("PostgreSQL (fsync on)", args.claims, m)
    for figure, value, target in out:
        print(f"{figure} | {value} | {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
