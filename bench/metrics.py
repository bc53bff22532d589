"""What a Prometheus scrape costs (DESIGN §16), at 1,000 and at 100,000 Goals (SQLite).

    python -m bench.metrics [--sizes 1000 100000] [--scrapes 30]

- first scrape: the collector folds the whole history once (the exporter does it at start),
  wall clock and this process's CPU time (the figure a busy machine disturbs least);
- idle scrape: nothing committed since the last one (the change gate alone, then the text);
- scrape after a commit: one command committed by another connection before each scrape (the
  events after the last sequence, the moving Goals per status, the text).

Scrapes at both sizes are interleaved (medians), since this machine is shared and noisy.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from bench.common import journal_with
from store.goals import Goals
from store.journal.api import Journal
from store.ops.metrics import JournalCollector, exposition


def _timed(collector: JournalCollector) -> float:
    started = time.perf_counter()
    exposition(collector, None)
    return (time.perf_counter() - started) * 1000


def measure(sizes: list[int], scrapes: int, log=print) -> dict[int, dict[str, float]]:
    with tempfile.TemporaryDirectory() as scratch:
        paths = {}
        for size in sizes:
            folder = Path(scratch) / str(size)
            folder.mkdir()
            paths[size] = journal_with(size, folder, log=log)
        collectors = {size: JournalCollector(path) for size, path in paths.items()}
        writers = {size: Journal.open(path) for size, path in paths.items()}
        figures: dict[int, dict[str, float]] = {}
        idle: dict[int, list[float]] = {size: [] for size in sizes}
        changed: dict[int, list[float]] = {size: [] for size in sizes}
        try:
            for size in sizes:
                cpu = time.process_time()
                figures[size] = {"first_scrape_ms": _timed(collectors[size])}
                figures[size]["first_scrape_cpu_ms"] = (time.process_time() - cpu) * 1000
            for n in range(scrapes):
                for size in sizes:
                    idle[size].append(_timed(collectors[size]))
                    Goals(writers[size]).create(
                        goal_id=f"bench-metrics-{n}", title="t", node_id="n1", argv=["true"]
                    )
                    changed[size].append(_timed(collectors[size]))
        finally:
            for journal in writers.values():
                journal.close()
            for collector in collectors.values():
                collector.close()
        for size in sizes:
            figures[size]["idle_scrape_ms"] = statistics.median(idle[size])
            figures[size]["scrape_after_commit_ms"] = statistics.median(changed[size])
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 100_000])
    parser.add_argument("--scrapes", type=int, default=30)
    args = parser.parse_args(argv)
    figures = measure(args.sizes, args.scrapes)
    print(f"{'goals':>8}  {'first scrape (CPU)':>20}  {'idle scrape':>11}  {'after a commit':>14}")
    for size, f in figures.items():
        first = f"{f['first_scrape_ms']:.0f} ms ({f['first_scrape_cpu_ms']:.0f})"
        print(
            f"{size:>8,}  {first:>20}  {f['idle_scrape_ms']:>8.2f} ms"
            f"  {f['scrape_after_commit_ms']:>11.2f} ms"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
