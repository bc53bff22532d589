"""Two source trees side by side on one large journal: `refine check` on PostgreSQL, and the
dashboard's filter index (``GoalIndex.build``) on SQLite.

    python -m bench.trees OLD NEW [--size 100000] [--index-size 1000000] [--rounds 2]

``OLD`` and ``NEW`` are checkouts (e.g. ``git worktree add /tmp/old <commit>``). The cached
``history`` journals (bench.common) are used as they are: ``check`` first copies the
``--size`` one into a PostgreSQL server of its own (``refine copy``, from NEW), then runs
``refine --journal URL check`` from each tree in turn, ``--rounds`` times; ``index`` builds the
index of the ``--index-size`` SQLite journal in a process of each tree in turn. Each figure is
the wall time, the process's CPU and (index) its peak RSS; the trees alternate so both see the
same machine. Each process runs with its tree's directory first on ``sys.path``.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from bench.common import cached_journal
from bench.postgres import server

INDEX_BUILD = """
import resource, sys, time
from refine_tui.goal_index import GoalIndex
from store.journal.api import Journal
with Journal.open(sys.argv[1], read_only=True) as journal:
    start = time.monotonic()
    _, index = GoalIndex.build(journal)
    wall = time.monotonic() - start
print(len(index), wall, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
"""


def run_in(tree: str, argv: list[str]) -> tuple[subprocess.CompletedProcess[str], float, float]:
    """``argv`` run with ``tree`` first on sys.path: (done, wall s, CPU s of the process)."""
    env = {**os.environ, "PYTHONPATH": tree, "PYTHONDONTWRITEBYTECODE": "1"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    done = subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    if done.returncode != 0:
        raise SystemExit(f"{tree}: {argv[2:]} failed: {done.stderr.strip()}")
    return done, wall, cpu


def check_on_postgres(trees: list[str], size: int, rounds: int) -> None:
    source = cached_journal(size, mix="history", log=print)
    with server(fsync=True) as pg:
        url = pg.create_database()
        run_in(trees[-1], [sys.executable, "-m", "refine_tui.cli", "copy", str(source), url])
        for n in range(rounds):
            for tree in trees:
                argv = [sys.executable, "-m", "refine_tui.cli", "--journal", url, "check"]
                done, wall, cpu = run_in(tree, argv)
                said = done.stdout.strip().splitlines()[0]
                print(f"check, {size:,} goals, PostgreSQL, round {n + 1}, {tree}:"
                      f" wall {wall:.1f} s, CPU {cpu:.1f} s ({said})", flush=True)  # fmt: skip


def index_on_sqlite(trees: list[str], size: int, rounds: int) -> None:
    source = cached_journal(size, mix="history", log=print)
    for n in range(rounds):
        for tree in trees:
            done, _, cpu = run_in(tree, [sys.executable, "-c", INDEX_BUILD, str(source)])
            goals, wall, rss = done.stdout.split()
            print(f"index build, {int(goals):,} goals, SQLite, round {n + 1}, {tree}:"
                  f" {float(wall):.1f} s, process CPU {cpu:.1f} s,"
                  f" peak RSS {float(rss):.0f} MB", flush=True)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs=2, help="OLD NEW: source trees")
    parser.add_argument("--size", type=int, default=100_000, help="goals for check")
    parser.add_argument("--index-size", type=int, default=1_000_000, help="goals for the index")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--only", choices=("check", "index"))
    args = parser.parse_args(argv)
    trees = [str(Path(t).resolve()) for t in args.trees]
    print(f"load average {os.getloadavg()[0]:.2f}", flush=True)
    if args.only != "index":
        check_on_postgres(trees, args.size, args.rounds)
    if args.only != "check":
        index_on_sqlite(trees, args.index_size, args.rounds)
    print(f"load average {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
