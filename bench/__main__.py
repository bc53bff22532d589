"""Every figure of DESIGN §9 in one run, printed as one table with the date and the core count.

    python -m bench            # the full run (builds the 100k journal once, then cached)
    python -m bench --quick    # smaller journals, fewer samples, shorter windows
    python -m bench --only latency idle
    python -m bench --only latency-pg   # commit → row with the journal on PostgreSQL
    python -m bench --only million      # the 1,000,000-goal journal (issue 27)
    python -m bench --only fanout       # PostgreSQL: server CPU per commit, 1+1 vs 10+5 listeners
    python -m bench --only batch        # 100 claims: one commit each, or one transaction

Each benchmark module also runs alone (``python -m bench.latency`` …) with its own options.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from bench import (
    attempts,
    batch,
    bulk,
    claims,
    cli,
    commands,
    fanout,
    idle,
    latency,
    lifecycle,
    million,
    postgres,
    scale,
)
from bench.common import cores

Row = tuple[str, str, str]


@dataclass(frozen=True)
class Settings:
    sizes: tuple[int, int]
    samples: int
    tmux_samples: bool
    idle_s: float
    races: int
    scale_size: int
    scale_repeats: int
    cycles: int
    repeats: int
    lifecycle_jobs: int
    lifecycle_rounds: int


FULL = Settings((1000, 100_000), 100, True, 60.0, 1000, 100_000, 3, 500, 5, 2000, 5)
QUICK = Settings((1000, 10_000), 20, False, 20.0, 200, 10_000, 1, 200, 3, 300, 5)


def _log(line: str) -> None:
    print(f"  · {line}", file=sys.stderr, flush=True)


def run_commands(s: Settings) -> list[Row]:
    out = []
    for sync in ("FULL", "NORMAL"):
        m = commands.measure(sync, s.cycles, s.repeats)
        ours, raw, es = m["ours"][0], m["raw"][0], m["eventsourcing"][0]
        out.append((
            f"claim+complete cycles/s, {sync}",
            f"ours {ours:,.0f} · raw {raw:,.0f} · eventsourcing {es:,.0f}:"
            f" {ours / raw:.0%} of raw, {ours / es:.2f}× eventsourcing",
            "≥ 50 % of raw, ≥ 1× es",
        ))  # fmt: skip
    return out


def run_lifecycle(s: Settings) -> list[Row]:
    out = []
    for sync in ("FULL", "NORMAL"):
        m = lifecycle.measure(sync, s.lifecycle_jobs, s.lifecycle_rounds, 200, log=_log)
        out += lifecycle.rows(m, sync)
    return out


def run_postgres(s: Settings) -> list[Row]:
    jobs = s.lifecycle_jobs // 4
    return postgres.rows(postgres.measure(jobs, 3, log=_log), jobs, False)


def run_bulk(s: Settings) -> list[Row]:
    return bulk.rows(bulk.measure(1000, 3, False, log=_log), 1000, False)


def run_cli(s: Settings) -> list[Row]:
    return cli.rows(cli.measure(30 if s.samples >= 100 else 15))


def run_attempts(s: Settings) -> list[Row]:
    counts = [1, 100] if s.samples >= 100 else [1, 20]
    idle_s = min(s.idle_s, 10.0)
    modes = ("forked", "fresh")
    serial = 30 if s.samples >= 100 else 10  # one attempt's p95: that many, one after another
    return attempts.rows(
        [attempts.measure_one(n, idle_s, m, serial=serial) for n in counts for m in modes]
    )


def run_latency(s: Settings) -> list[Row]:
    return latency.rows(latency.measure(list(s.sizes), s.samples, s.tmux_samples, log=_log))


def run_latency_pg(s: Settings) -> list[Row]:
    measured = latency.measure(list(s.sizes), s.samples, False, log=_log, backend="postgresql")
    return latency.rows(measured, "postgresql")


def run_idle(s: Settings) -> list[Row]:
    return idle.rows(idle.measure([s.sizes[0]], s.idle_s, 50.0, log=_log))


def run_claims(s: Settings) -> list[Row]:
    out = []
    for slot in (0.0, 0.005):
        out += claims.rows(claims.measure(8, s.races, slot))
    return out


def run_scale(s: Settings) -> list[Row]:
    return scale.rows(scale.measure(s.scale_size, s.scale_repeats, log=_log))


def run_million(s: Settings) -> list[Row]:
    full = s.samples >= 100
    size, mid = (1_000_000, 100_000) if full else (20_000, 5_000)
    return million.rows(million.measure(size, 1000, mid, 7 if full else 3, set(), log=_log))


def run_batch(s: Settings) -> list[Row]:
    return batch.sqlite_rows(100, 7 if s.samples >= 100 else 3)


def run_fanout(s: Settings) -> list[Row]:
    seconds = 20.0 if s.samples >= 100 else 10.0
    return fanout.rows([fanout.measure(n, f, 50.0, seconds) for n, f in ((1, 1), (10, 5))])


BENCHMARKS: dict[str, Callable[[Settings], list[Row]]] = {
    "commands": run_commands,
    "lifecycle": run_lifecycle,
    "postgres": run_postgres,
    "cli": run_cli,
    "bulk": run_bulk,
    "attempts": run_attempts,
    "latency": run_latency,
    "latency-pg": run_latency_pg,
    "idle": run_idle,
    "claims": run_claims,
    "scale": run_scale,
    "million": run_million,
    "fanout": run_fanout,
    "batch": run_batch,
}


def table(rows: list[Row]) -> str:
    width = max(len(figure) for figure, _, _ in rows)
    lines = [f"| {'figure':<{width}} | value | target |", f"|{'-' * (width + 2)}|---|---|"]
    lines += [f"| {figure:<{width}} | {value} | {target} |" for figure, value, target in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small journals, short windows")
    parser.add_argument("--only", nargs="+", choices=list(BENCHMARKS), default=list(BENCHMARKS))
    args = parser.parse_args(argv)
    settings = QUICK if args.quick else FULL
    began = time.monotonic()
    rows: list[Row] = []
    for name in args.only:
        _log(f"{name}…")
        rows += BENCHMARKS[name](settings)
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    machine = platform.processor() or platform.machine()
    print(
        f"refine-tui benchmarks — {when} — {cores()} cores, {machine},"
        f" Python {platform.python_version()}{' — quick' if args.quick else ''}"
        f" — {time.monotonic() - began:.0f} s"
    )
    print()
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
