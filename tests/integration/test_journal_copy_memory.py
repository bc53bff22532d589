"""`refine copy` into SQLite keeps its memory flat as the journal grows (issue 27, item 1).

Each size is copied by a child process of its own, which measures its resident memory's peak
(``VmHWM``) over the copy alone: the high-water mark is reset (``/proc/self/clear_refs``) after
the imports and the source's opening, which cost the same at any size and would hide the copy's
share. The copy is then compared row for row, ``prev`` included, with its source.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

from tests.helpers.soak_recipes import ROOT

SMALL, BIG = 2_000, 40_000  # Goals; the history mix has two aggregates per Goal
# The old copy kept every aggregate's newest event in a dict (≈ 110 bytes per aggregate): its
# peak grew 5.7 MB from SMALL to BIG. What the copy may hold now is bounded by SQLite's page
# caches (the source's and the target's 2 MB, full at both sizes; the scratch table's 0.5 MB):
# measured 0.8 MB. The bound sits between, with room for the allocator's noise either way.
GROWTH_MB = 2.5

CHILD = """
import json, sys
from pathlib import Path
from store.journal.sqlite import Journal
from store.ops.journal_copy import copy_to
import store.ops.check

def kb(key):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key):
            return int(line.split()[1])

with Journal.open(sys.argv[1], read_only=True) as source:
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS now
    base = kb("VmRSS:")
    report = copy_to(source, sys.argv[2])
    print(json.dumps({"clean": report.check.clean, "events": report.events,
                      "growth_mb": (kb("VmHWM:") - base) / 1024}))
"""


def copied(source: Path, target: Path) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(source), str(target)],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=True,
    )  # fmt: skip
    return json.loads(done.stdout)


def same_rows(source: Path, target: Path) -> None:
    """Every stored row of both files equal, in key order (the events with their ``prev``)."""
    a, b = sqlite3.connect(source), sqlite3.connect(target)
    try:
        for table, key in (("events", "sequence"), ("aggregates", "aggregate_id"),
                           ("receipts", "command_id")):  # fmt: skip
            query = f"SELECT * FROM {table} ORDER BY {key}"
            count = 0
            for left, right in zip(a.execute(query), b.execute(query), strict=True):
                assert left == right, table
                count += 1
            assert count > 0
    finally:
        a.close()
        b.close()


def test_copy_memory_stays_flat_as_the_journal_grows(tmp_path: Path) -> None:
    from bench.common import cached_journal

    growth = {}
    for n in (SMALL, BIG):
        source, target = cached_journal(n, mix="history"), tmp_path / f"copy-{n}.db"
        report = copied(source, target)
        assert report["clean"] and report["events"] > n
        same_rows(source, target)
        growth[n] = report["growth_mb"]
    assert growth[BIG] - growth[SMALL] < GROWTH_MB, growth
