"""``python gated_worker.py GATE [--at-handover] <store.worker args>``: the real worker, held
still until the file GATE exists (at most 30 s), with ``GATE.held`` made once it waits:

- by default right after it has written its process record;
- ``--at-handover``: when its claim helper hands the claimed, recorded attempt over (the Ready
  it tells the worker), the last step before the launch that an older worker took after its
  reread and before it started the recipe;
- ``--after-reread``: right after the claim helper's reread before the launch found the attempt
  still ours (the window the last look before the exec closes on SQLite);
- ``--before-report``: when the recipe has ended and the worker, its reread done, is about
  to report that end;
- ``--before-exec``: at the exec itself, everything before it done, the journal held still
  (SQLite's write lock, or on PostgreSQL the helper's lock on the Run), which the exec releases;
  the recipe starts with SIGTERM blocked
  (the mask survives the exec), so a stop that comes at once waits until it unblocks it.

It opens the claim → launch window on purpose, so a test can commit something inside it (a
cancellation) and see what the worker does next. Nothing else about the worker changes.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from store.host.processes import ProcessRecord, ProcessRegistry
from store.node import worker

_record = ProcessRegistry.record
_to_json = worker.Ready.to_json
_reread = worker._reread
_execvpe = os.execvpe
_settle = worker._settle


def _hold() -> None:
    """Once: a later call (the second reread) goes on at once."""
    held = Path(GATE + ".held")
    if held.exists():
        return
    held.touch()
    deadline = time.monotonic() + 30
    while not os.path.exists(GATE) and time.monotonic() < deadline:
        time.sleep(0.02)


def _held_record(self: ProcessRegistry, rec: ProcessRecord, *, sync: bool = True) -> object:
    written = _record(self, rec, sync=sync)
    _hold()
    return written


def _held_handover(self: worker.Ready) -> str:
    text = _to_json(self)
    _hold()
    return text


def _held_exec(file: str, args: list[str], env: dict[str, str]) -> None:
    _hold()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    _execvpe(file, args, env)


def _held_settle(goals: worker.Goals, claim: worker.Claim, **report: Any) -> int:
    _hold()
    return _settle(goals, claim, **report)


def _held_reread(goals: worker.Goals, claim: worker.Claim, tries: int = 20) -> str:
    verdict = _reread(goals, claim, tries)
    _hold()
    return verdict


if __name__ == "__main__":
    GATE, args = sys.argv[1], sys.argv[2:]
    if args[:1] == ["--at-handover"]:
        args = args[1:]
        worker.Ready.to_json = _held_handover  # type: ignore[method-assign]
    elif args[:1] == ["--after-reread"]:
        args = args[1:]
        worker._reread = _held_reread
    elif args[:1] == ["--before-report"]:
        args = args[1:]
        worker._settle = _held_settle
    elif args[:1] == ["--before-exec"]:
        args = args[1:]
        os.execvpe = _held_exec
    else:
        ProcessRegistry.record = _held_record  # type: ignore[method-assign]
    sys.exit(worker.main(args))
