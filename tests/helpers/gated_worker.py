"""``python gated_worker.py GATE <worker args>``: the real worker, held still right after it
has written its process record until the file GATE exists (at most 30 s).

It opens the claim → launch window on purpose, so a test can commit something inside it (a
cancellation) and see what the worker does next. Nothing else about the worker changes.
"""

from __future__ import annotations

import os
import sys
import time

from store.host.processes import ProcessRecord, ProcessRegistry
from store.node import worker

_record = ProcessRegistry.record


def _held(self: ProcessRegistry, rec: ProcessRecord, *, sync: bool = True) -> object:
    written = _record(self, rec, sync=sync)
    deadline = time.monotonic() + 30
    while not os.path.exists(GATE) and time.monotonic() < deadline:
        time.sleep(0.02)
    return written


if __name__ == "__main__":
    GATE = sys.argv[1]
    ProcessRegistry.record = _held  # type: ignore[method-assign]
    sys.exit(worker.main(sys.argv[2:]))
