"""Shared pieces of the Execution tests: valid inputs, journal facts, child processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from store.journal.api import Journal
from store.journal.core import COPY_TABLES
from store.model.execution import Execution, fold_run

ROOT = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).with_name("execution_child.py")

PINS = {
    "candidate_digest": "sha256:" + "ab" * 32,
    "recipe_revision": "recipe.v1",
    "scenario_revision": "scenario.v1",
}


def budget(max_attempts: int = 3, attempt_timeout_ms: int = 60_000) -> dict[str, int]:
    return {"max_attempts": max_attempts, "attempt_timeout_ms": attempt_timeout_ms}


def submit(ex: Execution, run_id: str = "r1", max_attempts: int = 3) -> int:
    """Submit a Run; returns its version (1)."""
    return ex.submit(
        command_id=f"{run_id}:submit", run_id=run_id, pins=PINS, budget=budget(max_attempts)
    ).run.version


def claim(ex: Execution, run_id: str = "r1", worker: str = "w1") -> tuple[int, int]:
    """Claim the Run at its current version; returns (version, epoch)."""
    run = ex.read(run_id)
    assert run is not None
    result = ex.claim(
        command_id=f"{run_id}:claim:{run.version}",
        run_id=run_id,
        expected_version=run.version,
        worker=worker,
    )
    return result.run.version, result.attempt.epoch


def footprint(journal: Journal) -> tuple[Any, ...]:
    """Everything a command could write (every stored table, on any backend), compared before
    and after a refusal."""
    with journal.snapshot():
        return tuple(
            tuple(row for batch in journal.export_rows(table) for row in batch)  # type: ignore[attr-defined]
            for table, _, _ in COPY_TABLES
        )


def assert_consistent(journal: Journal) -> None:
    """Each Run equals the fold of its events; events and outbox agree one to one, gap-free."""
    events = journal.events_after(0, 1000)
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert journal.outbox(0, 1000) == [(e.sequence, e.aggregate_id, e.type) for e in events]
    for stored in journal.aggregates("run"):
        mine = [e for e in events if e.aggregate_id == stored.aggregate_id]
        assert fold_run(mine) == stored.state
        assert mine[-1].version == stored.version
        assert all(e.data["run_id"] == stored.aggregate_id[4:] for e in mine)
        versions = sorted({e.version for e in mine})
        assert versions == list(range(1, stored.version + 1))  # one version per command


class Child:
    """A child process running ``script`` (execution_child.py by default) on a journal
    location; talks JSON lines."""

    def __init__(
        self, journal_path: Path | str, spec: dict[str, Any], script: Path = CHILD
    ) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(script), str(journal_path), json.dumps(spec)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        self.pid = self.proc.pid
        assert "ready" in self.line()

    def line(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        text = self.proc.stdout.readline()
        assert text, "child exited early"
        return json.loads(text)  # type: ignore[no-any-return]

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def wait_stopped(self) -> None:
        """Block until the child has SIGSTOPped itself at its pause point."""
        _, status = os.waitpid(self.pid, os.WUNTRACED)
        assert os.WIFSTOPPED(status), status

    def kill(self) -> None:
        os.kill(self.pid, signal.SIGKILL)
        self.proc.wait()
        assert self.proc.returncode == -signal.SIGKILL

    def finish(self) -> None:
        self.proc.wait(timeout=30)
        assert self.proc.returncode == 0
