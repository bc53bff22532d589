"""``python crashing_claim_worker.py <worker args>``: the real worker, whose claim helper
raises (not an OSError: a bug) when it writes the process record, after the claim committed.

A test sees that such a crash ends only this attempt's worker, before any recipe starts.
"""

from __future__ import annotations

import sys
from pathlib import Path

from store.host.processes import ProcessRecord, ProcessRegistry
from store.node import worker


def _crash(self: ProcessRegistry, rec: ProcessRecord, *, sync: bool = True) -> Path:
    raise RuntimeError("the claim helper crashed")


if __name__ == "__main__":
    ProcessRegistry.record = _crash  # type: ignore[method-assign]
    sys.exit(worker.main(sys.argv[1:]))
