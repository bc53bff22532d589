"""The worker: one process that owns one attempt of one Goal on its node.

``python -m store.worker --journal P --node N --goal G --token T [--round R]``

It claims the Goal's Run with a fresh token (Goals.start), records itself in the node's
process registry, runs the recipe (an argv list, no shell) into its log file and, while the
recipe runs, rereads the Goal and Run whenever the journal changed. Whoever owns the attempt
reports its end, and only the owner: exit 0 → completed, else failed; a pending cancellation →
cancelled with its own cleanup confirmation; a Goal that moved on (settled, reassigned, its
attempt ended by Stop or cleanup) → the recipe is stopped and nothing is reported.

The recipe runs in the worker's process group (the node starts the worker as a session
leader), so stopping the group stops both. Time never ends an attempt in the journal by itself;
the worker, as the owner, may stop a recipe that outlived ``attempt_timeout_ms`` and report it
failed. At-least-once: a replacement worker simply runs the recipe again.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import hashlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from store.errors import RefineError, StorageError
from store.execution import Execution
from store.goals import Goal, Goals
from store.journal_api import Journal
from store.processes import ProcessRecord, ProcessRegistry, stop_group_members

POLL_S = 0.25  # how often the worker looks whether the journal changed
STOP_GRACE_S = 5.0  # SIGTERM → SIGKILL for its own recipe

EXIT_SETTLED = 0  # the attempt was reported (completed, failed or cancelled)
EXIT_REFUSED = 3  # the start was refused: nothing was claimed
EXIT_SUPERSEDED = 4  # the Goal moved on or the report was refused: nothing reported
EXIT_UNAVAILABLE = 5  # the journal could not be opened

JOURNAL_ENV = "REFINE_JOURNAL"
# While the journal is unreachable (a server restart), the owner keeps trying to learn its
# verdict and to report, with the same command id: the report applies or replays exactly once.
REPORT_PATIENCE_S = 3600.0
RETRY_MAX_S = 5.0


@dataclass(frozen=True)
class Claim:
    goal_id: str
    node_id: str
    run_id: str
    round: int
    epoch: int
    worker: str


def worker_name(node_id: str, token: str) -> str:
    return f"{node_id}/{token}"


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m store.worker")
    # A postgresql:// URL comes by $REFINE_JOURNAL, not argv: it may hold a password (ps).
    parser.add_argument("--journal", default=os.environ.get(JOURNAL_ENV))
    parser.add_argument("--node", required=True)
    parser.add_argument("--goal", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--round", type=int, default=None)
    return parser


def main(argv: Sequence[str] | None = None, parser_: argparse.ArgumentParser | None = None) -> int:
    """``parser_``: one built before (the forkserver's, shared by its children)."""
    parser_ = parser_ or parser()
    args = parser_.parse_args(argv)
    if not args.journal:
        parser_.error(f"--journal or ${JOURNAL_ENV} is required")
    try:
        journal = Journal.open(args.journal, create=False)
    except RefineError as exc:
        _say(f"journal unavailable: {exc}")
        return EXIT_UNAVAILABLE
    with journal:
        return run_worker(
            journal, node_id=args.node, goal_id=args.goal, token=args.token, round=args.round
        )


def run_worker(
    journal: Journal, *, node_id: str, goal_id: str, token: str, round: int | None = None
) -> int:
    """Claim, run, report; returns the process exit code (EXIT_*)."""
    goals = Goals(journal)
    worker = worker_name(node_id, token)
    try:
        started = goals.start(
            goal_id=goal_id, node_id=node_id, worker=worker, token=token, round=round
        )
    except StorageError as exc:  # not a refusal: the node may try again
        _say(f"{goal_id}: not started, journal unavailable: {exc}")
        return EXIT_UNAVAILABLE
    except RefineError as exc:
        _say(f"{goal_id}: not started: {exc}")
        return EXIT_REFUSED
    assert started.run is not None and started.attempt is not None
    claim = Claim(
        goal_id, node_id, started.run.run_id, started.goal.round, started.attempt.epoch, worker
    )
    if started.replayed:  # seed: never launch work from a replayed claim; re-read ownership
        now = _reread(goals, claim)
        _say(
            f"{claim.run_id}/{claim.epoch}: this claim was replayed (token {token} was used"
            f" before; the attempt is {_ownership(now)}): not launching the recipe again"
        )
        return EXIT_REFUSED
    registry = ProcessRegistry.for_journal(journal, node_id)
    log_path = registry.log_path(claim.run_id, claim.epoch)
    try:
        registry.record(
            ProcessRecord.for_current_process(
                node_id=node_id,
                run_id=claim.run_id,
                epoch=claim.epoch,
                worker=worker,
                log_path=log_path,
                journal_id=journal.journal_id,
            )
        )
    except OSError as exc:  # e.g. disk full: as the owner, say so rather than vanish
        _say(f"{claim.run_id}/{claim.epoch}: cannot record this process: {exc}")
        why = f"cannot record the worker process: {exc}"[:400]
        return _report(goals, claim, exit_code=None, reason=why, log=log_path)
    try:
        return _own(goals, claim, started.goal, log_path)
    finally:
        registry.remove(claim.run_id, claim.epoch)


def _own(goals: Goals, claim: Claim, goal: Goal, log_path: Path) -> int:
    """Run the recipe while the attempt is ours, then report its end."""
    timeout_s = goal.budget["attempt_timeout_ms"] / 1000
    # Reread right before launching: a cancellation (or any change) that committed between the
    # claim and now must stop the recipe from ever starting.
    verdict = _reread(goals, claim)
    if verdict == "cancel":
        return _report_cancel(goals, claim)
    if verdict != "ours":
        _say(f"{claim.run_id}/{claim.epoch}: not launching: the attempt is {_ownership(verdict)}")
        return EXIT_SUPERSEDED
    with open(log_path, "ab") as log:
        try:
            recipe = _launch(goal, log)
        except OSError as exc:
            log.write(f"cannot start the recipe: {exc}\n".encode())
            why = f"cannot start the recipe: {exc}"[:400]
            return _report(goals, claim, exit_code=None, reason=why, log=log_path)
        verdict, timed_out = _supervise(goals, claim, recipe, time.monotonic() + timeout_s)
        _stop(recipe)  # whatever the recipe left running ends with the attempt
        if verdict == "superseded":
            return EXIT_SUPERSEDED
        if timed_out:
            log.write(f"\n[worker] stopped after the {timeout_s:g} s attempt timeout\n".encode())
    if verdict == "cancel":
        return _report_cancel(goals, claim)
    code = recipe.returncode
    reason = f"timeout: ran longer than {timeout_s:g} s" if timed_out else None
    return _report(goals, claim, exit_code=code, reason=reason, log=log_path)


def _launch(goal: Goal, log: IO[bytes]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        list(goal.recipe["argv"]),
        cwd=goal.recipe["cwd"],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        preexec_fn=_die_with_parent,  # stays in our process group (no new session)
    )


def _die_with_parent() -> None:
    # Linux: if the worker itself is killed alone, the recipe does not run on unowned.
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _supervise(
    goals: Goals, claim: Claim, recipe: subprocess.Popen[bytes], deadline: float
) -> tuple[str, bool]:
    """Wait for the recipe, rereading the journal when it changed.

    Returns (verdict, timed_out); verdict "ours" | "cancel" | "superseded" | "unknown". The
    recipe is stopped (and reaped) on "cancel" or "superseded" or when the deadline passed.
    """
    changes = goals.journal.changes()
    look = True  # first, and again after an "unknown" verdict
    while True:
        try:
            recipe.wait(timeout=POLL_S)
        except subprocess.TimeoutExpired:
            pass
        else:
            return _verdict(goals, claim), False
        try:
            changed = changes.changed()
        except RefineError:  # unreachable for now: look (the verdict says "unknown")
            changed = True
        if changed or look:
            verdict = _verdict(goals, claim)
            look = verdict == "unknown"
            if verdict not in ("ours", "unknown"):
                _stop(recipe)
                return verdict, False
        if time.monotonic() >= deadline:
            _stop(recipe)
            return _verdict(goals, claim), True


def _verdict(goals: Goals, claim: Claim) -> str:
    """Reread Goal and Run: is the attempt still ours to continue and report?"""
    try:
        goal = goals.read(claim.goal_id)
        run = Execution(goals.journal).read(claim.run_id)
    except RefineError as exc:  # e.g. locked for a while: keep going, look again
        _say(f"{claim.goal_id}: cannot reread the journal: {exc}")
        return "unknown"
    if goal is None or run is None or not run.runs_attempt(claim.epoch):
        return "superseded"
    if run.cancel_requested is not None:
        return "cancel"
    moved = goal.node_id != claim.node_id or goal.round != claim.round
    return "superseded" if moved or goal.status != "running" else "ours"


def _reread(goals: Goals, claim: Claim, tries: int = 20) -> str:
    for _ in range(tries):
        verdict = _verdict(goals, claim)
        if verdict != "unknown":
            return verdict
        time.sleep(POLL_S)
    return "unknown"


def _reread_patiently(goals: Goals, claim: Claim) -> str:
    """The verdict, waiting out an unreachable journal (up to ``REPORT_PATIENCE_S``)."""
    deadline = time.monotonic() + REPORT_PATIENCE_S
    delay = POLL_S
    while (verdict := _verdict(goals, claim)) == "unknown" and time.monotonic() < deadline:
        time.sleep(delay)
        delay = min(delay * 2, RETRY_MAX_S)
    return verdict


def _ownership(verdict: str) -> str:
    return {
        "ours": "still ours and running",
        "cancel": "being cancelled",
        "superseded": "no longer ours (ended, or the goal moved on)",
    }.get(verdict, "unreadable for now")


def _stop(recipe: subprocess.Popen[bytes]) -> None:
    """SIGTERM our recipe and all it started, wait the grace, SIGKILL; always reaped.

    Also called once the recipe exited by itself: children it left behind in our process
    group must not run on after the attempt ended.
    """
    stop_group_members(STOP_GRACE_S)  # our group but us (when the node started our session)
    if recipe.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        recipe.terminate()
    try:
        recipe.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            recipe.kill()
        recipe.wait()


def _report(
    goals: Goals, claim: Claim, *, exit_code: int | None, reason: str | None, log: Path
) -> int:
    verdict = _reread_patiently(goals, claim)  # right before the transition
    if verdict == "cancel":
        return _report_cancel(goals, claim)
    if verdict != "ours":
        return EXIT_SUPERSEDED
    evidence = [f"exit:{exit_code}" if exit_code is not None else "exit:none", _digest(log)]
    if exit_code == 0 and reason is None:
        outcome, why = "completed", None
    else:
        outcome, why = "failed", reason or f"exit code {exit_code}"
    return _settle(goals, claim, outcome=outcome, reason=why, evidence=evidence)


def _report_cancel(goals: Goals, claim: Claim) -> int:
    _reread_patiently(goals, claim)  # wait until the journal can take the report
    return _settle(goals, claim, outcome="cancelled", reason=None, evidence=())


def _settle(
    goals: Goals, claim: Claim, *, outcome: str, reason: str | None, evidence: Sequence[str]
) -> int:
    deadline = time.monotonic() + REPORT_PATIENCE_S
    delay = POLL_S
    while True:
        try:
            goals.settle(
                goal_id=claim.goal_id,
                run_id=claim.run_id,
                epoch=claim.epoch,
                outcome=outcome,
                reason=reason,
                evidence=list(evidence),
            )
        except StorageError as exc:  # maybe committed, maybe not: the same report again
            if time.monotonic() >= deadline:
                _say(f"{claim.run_id}/{claim.epoch}: report not delivered: {exc}")
                return EXIT_UNAVAILABLE
            _say(f"{claim.run_id}/{claim.epoch}: report waits for the journal: {exc}")
            time.sleep(delay)
            delay = min(delay * 2, RETRY_MAX_S)
            continue
        except RefineError as exc:  # superseded meanwhile: the journal refused, nothing written
            _say(f"{claim.run_id}/{claim.epoch}: report refused: {exc}")
            return EXIT_SUPERSEDED
        return EXIT_SETTLED


def _digest(path: Path) -> str:
    sha = hashlib.sha256()
    with contextlib.suppress(OSError), open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 16), b""):
            sha.update(block)
    return "sha256:" + sha.hexdigest()


def _say(message: str) -> None:
    print(f"worker {os.getpid()}: {message}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
