"""A node's process registry for a journal given by path, as its node and dashboard find it."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import psutil

from store.host.processes import ProcessRecord, ProcessRegistry
from store.journal.api import Journal


def node_registry(journal: Path | str, node_id: str) -> ProcessRegistry:
    """``node_id``'s registry for the journal at ``journal`` (its journal id names the folder)."""
    with Journal.open(journal, read_only=True) as opened:
        return ProcessRegistry.for_journal(opened, node_id)


def record_worker(
    journal: Path | str,
    node_id: str,
    run_id: str,
    proc: subprocess.Popen[bytes],
    *,
    worker: str,
    argv: Sequence[str] = ("sleep", "60"),
) -> ProcessRecord:
    """Record ``proc`` (a group leader) as the worker of attempt 1 of ``run_id``."""
    registry = node_registry(journal, node_id)
    rec = ProcessRecord(
        node_id=node_id,
        pid=proc.pid,
        create_time=psutil.Process(proc.pid).create_time(),
        pgid=proc.pid,
        run_id=run_id,
        epoch=1,
        worker=worker,
        argv=tuple(argv),
        log_path=str(registry.log_path(run_id, 1)),
        started_at=time.time(),
    )
    registry.record(rec)
    return rec
