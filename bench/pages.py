"""Which b-trees each command of a job lifecycle writes: WAL frames attributed to tables/indexes.

    python -m bench.pages [--jobs 200] [--warm 200] [--systems execution goals] [--sync FULL]

Runs the lifecycle jobs of ``bench.lifecycle`` (three commits each) on a fresh journal while a
pinned reader keeps the WAL from restarting, then reads the ``-wal`` file's frame headers
(page number, and the database size that marks a commit's last frame) and maps each page to
its b-tree with the ``dbstat`` virtual table (pages dbstat does not name are free-list pages).
A commit's frames are labelled with the command's place in the job (commit i of 3). Prints the
WAL pages per command per b-tree, split into leaf / interior / overflow pages.
"""

from __future__ import annotations

import argparse
import sqlite3
import struct
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

from bench.lifecycle import OPENERS

COMMANDS = {
    "execution": ("submit", "claim", "complete"),
    "goals": ("create", "start", "settle"),
}
WAL_HEADER, FRAME_HEADER = 32, 24


def wal_commits(wal: Path, page_size: int, after: int = 0) -> list[list[int]]:
    """The page numbers of each commit in the WAL's current generation, after the first
    ``after`` frames. A restarted WAL is written over the old one from its first frame with new
    salts in its header: a frame with other salts is an older generation's and ends the list."""
    data = wal.read_bytes()
    salts = data[16:24]
    commits: list[list[int]] = []
    frame: list[int] = []
    for offset in range(WAL_HEADER, len(data) - FRAME_HEADER + 1, FRAME_HEADER + page_size):
        pgno, db_size = struct.unpack(">II", data[offset : offset + 8])
        if data[offset + 8 : offset + 16] != salts:
            break
        frame.append(pgno)
        if db_size:  # the last frame of a commit carries the database size
            commits.append(frame)
            frame = []
    frames = 0
    for i, pages in enumerate(commits):
        if frames >= after:
            return commits[i:]
        frames += len(pages)
    return []


def page_owners(db: Path) -> dict[int, tuple[str, str]]:
    """Page number → (b-tree name, leaf | interior | overflow) as of the last commit."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        kinds = {"leaf": "leaf", "internal": "interior", "overflow": "overflow"}
        return {
            int(pageno): (str(name), kinds.get(str(pagetype), str(pagetype)))
            for name, pageno, pagetype in conn.execute("SELECT name, pageno, pagetype FROM dbstat")
        }
    finally:
        conn.close()


def attribute(name: str, sync: str, jobs: int, warm: int, folder: Path) -> dict[str, Counter]:
    """Per command: Counter of (b-tree, page type) → frames written, summed over ``jobs``."""
    system = OPENERS[name](folder, sync)
    pin = sqlite3.connect(system.db, isolation_level=None)
    try:
        for n in range(warm):
            system.job(n)
        pin.execute("BEGIN")
        pin.execute("SELECT count(*) FROM sqlite_master").fetchone()
        page_size = int(pin.execute("PRAGMA page_size").fetchone()[0])
        wal = Path(f"{system.db}-wal")
        # The pinned snapshot keeps the WAL from restarting, unless every frame of it was
        # checkpointed (it then reads the file alone): then the next commit restarts the WAL
        # (new salts) and every frame of the current generation is ours.
        salts = wal.read_bytes()[16:24]
        before = sum(len(c) for c in wal_commits(wal, page_size))
        for n in range(warm, warm + jobs):
            system.job(n)
        restarted = wal.read_bytes()[16:24] != salts
        commits = wal_commits(wal, page_size, 0 if restarted else before)
    finally:
        pin.close()
        system.close()
    owners = page_owners(system.db)
    names = COMMANDS.get(name, ())
    if len(commits) != jobs * len(names):
        raise RuntimeError(f"{name}: {len(commits)} commits for {jobs} jobs")
    per: dict[str, Counter] = defaultdict(Counter)
    for i, pages in enumerate(commits):
        for pgno in pages:
            owner = ("page 1 (header)", "") if pgno == 1 else owners.get(pgno, ("free list", ""))
            per[names[i % len(names)]][owner] += 1
    return per


def table(name: str, per: dict[str, Counter], jobs: int) -> list[str]:
    commands = COMMANDS[name]
    trees = sorted({tree for c in per.values() for tree, _ in c})
    lines = [f"{name}: WAL pages per command, by b-tree (leaf+interior+overflow)"]
    lines.append(f"  {'b-tree':<24}" + "".join(f"{c:>16}" for c in commands) + f"{'per job':>10}")
    for tree in trees:
        cells, total = [], 0.0
        for command in commands:
            parts = {kind: n / jobs for (t, kind), n in per[command].items() if t == tree}
            value = sum(parts.values())
            total += value
            detail = "+".join(f"{v:.2g}{k[:1]}" for k, v in sorted(parts.items()) if k and v)
            cells.append(f"{value:5.2f} {detail:<9}"[:15] if value else "")
        lines.append(f"  {tree:<24}" + "".join(f"{c:>16}" for c in cells) + f"{total:>10.2f}")
    sums = [sum(per[c].values()) / jobs for c in commands]
    lines.append(f"  {'total':<24}" + "".join(f"{s:>16.2f}" for s in sums) + f"{sum(sums):>10.2f}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--warm", type=int, default=200, help="jobs run before counting")
    parser.add_argument("--sync", default="FULL", choices=["FULL", "NORMAL"])
    parser.add_argument("--systems", nargs="+", default=list(COMMANDS), choices=list(COMMANDS))
    args = parser.parse_args(argv)
    for name in args.systems:
        with tempfile.TemporaryDirectory(prefix="refine-pages-") as scratch:
            per = attribute(name, args.sync, args.jobs, args.warm, Path(scratch))
        print("\n".join(table(name, per, args.jobs)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
