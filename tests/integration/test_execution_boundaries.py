"""Across processes: racing claims, and SIGKILL just before and just after a command's COMMIT
(nothing / everything), including both commit orders of a cancel racing a settle."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from store.errors import CancelPendingError, RunTerminalError, StorageError
from store.journal.sqlite import Journal
from store.model.execution import Execution
from tests.helpers.run_support import (
    PINS,
    Child,
    assert_consistent,
    budget,
    claim,
    footprint,
    submit,
)

REASON = "operator: not needed"
CLEANUP = {"epoch": 1, "confirmed_by": "w1", "method": "owner-stopped"}


def _command(op: str, command_id: str, version: int | None, **args: Any) -> dict[str, Any]:
    if version is not None:
        args["expected_version"] = version
    return {"op": op, "args": {"command_id": command_id, "run_id": "r1", **args}}


COMMANDS: dict[str, dict[str, Any]] = {
    "submit": _command("submit", "k:submit", None, pins=PINS, budget=budget()),
    "claim": _command("claim", "k:claim", 1, worker="w2"),
    "complete": _command("complete", "k:complete", 2, epoch=1, evidence=["out:1"]),
    "fail": _command("fail", "k:fail", 2, epoch=1, reason="tests failed", evidence=[]),
    "interrupt": _command("interrupt", "k:interrupt", 2, cleanup=CLEANUP),
    "request_cancel": _command("request_cancel", "k:request_cancel", 2, reason=REASON),
    "cancel": _command("cancel", "k:cancel", 2, reason=REASON, cleanup=CLEANUP),
}


def _prepare(ex: Execution, op: str) -> None:
    if op != "submit":
        submit(ex)
    if op not in ("submit", "claim"):
        claim(ex, worker="w1")


def _rows_of(path: Path, command_id: str) -> tuple[int, int, int]:
    """(receipts, events, outbox rows) a command left behind."""
    conn = sqlite3.connect(path)
    try:
        receipts = conn.execute(
            "SELECT count(*) FROM receipts WHERE command_id = ?", (command_id,)
        ).fetchone()[0]
        events = conn.execute(
            "SELECT count(*) FROM events WHERE command_id = ?", (command_id,)
        ).fetchone()[0]
        outbox = conn.execute(
            "SELECT count(*) FROM outbox JOIN events USING (sequence) WHERE command_id = ?",
            (command_id,),
        ).fetchone()[0]
        return receipts, events, outbox
    finally:
        conn.close()


def _assert_writer_blocked(path: Path) -> None:
    """Another writer cannot start: the paused child holds the write lock mid-transaction."""
    with Journal.open(path, busy_timeout_ms=50) as probe:
        before = footprint(probe)
        with pytest.raises(StorageError):
            Execution(probe).submit(command_id="probe", run_id="probe", pins=PINS, budget=budget())
        assert footprint(probe) == before


@pytest.mark.parametrize("boundary", ["before-commit", "after-commit"])
@pytest.mark.parametrize("op", list(COMMANDS))
def test_sigkill_at_the_commit_leaves_nothing_or_everything(
    op: str, boundary: str, tmp_path: Path
) -> None:
    path = tmp_path / "journal.db"
    command = COMMANDS[op]
    with Journal.open(path) as journal:
        ex = Execution(journal)
        _prepare(ex, op)
        baseline = footprint(journal)
        child = Child(path, {"commands": [command], "pause": boundary})
        child.wait_stopped()
        if boundary == "before-commit":
            assert footprint(journal) == baseline  # every write done, none visible
            _assert_writer_blocked(path)
        else:
            receipts, events, outbox = _rows_of(path, command["args"]["command_id"])
            assert receipts == 1 and events >= 1 and outbox == events
        child.kill()

    with Journal.open(path) as journal:  # a fresh process's view after the crash
        ex = Execution(journal)
        rows = _rows_of(path, command["args"]["command_id"])
        if boundary == "before-commit":
            assert footprint(journal) == baseline and rows == (0, 0, 0)
        else:
            assert rows[0] == 1 and rows[1] == rows[2] >= 1
        assert_consistent(journal)
        # The crashed caller repeats its command: a replay means it committed.
        again = getattr(ex, command["op"])(**command["args"])
        assert again.replayed == (boundary == "after-commit")
        assert_consistent(journal)


RACES = [
    # (first to commit, the racer that loses the order)
    ("request_cancel", "complete"),
    ("complete", "request_cancel"),
    ("fail", "request_cancel"),
]


@pytest.mark.parametrize("boundary", ["before-commit", "after-commit"])
@pytest.mark.parametrize(("first", "second"), RACES)
def test_a_cancel_racing_a_settle_is_decided_by_commit_order(
    first: str, second: str, boundary: str, tmp_path: Path
) -> None:
    path = tmp_path / "journal.db"
    with Journal.open(path) as journal:
        ex = Execution(journal)
        _prepare(ex, "complete")  # attempt 1 of 3 running, version 2
        one = Child(path, {"commands": [COMMANDS[first]], "pause": boundary})
        one.wait_stopped()
        two = Child(path, {"commands": [COMMANDS[second]], "announce_begin": True})
        # The racer is at its BEGIN: before the commit it now waits for the lock the first holds.
        assert two.line() == {"begin": True}
        one.kill()
        outcome = two.line()
        two.finish()
        run = ex.read("r1")
        assert run is not None
        if boundary == "before-commit":
            # The first never committed: the second's command is the only one there.
            assert "ok" in outcome
            assert _rows_of(path, COMMANDS[first]["args"]["command_id"]) == (0, 0, 0)
            winner = second
        else:
            assert outcome == {"error": "VERSION_CONFLICT"}
            winner = first
        _finish_after(ex, winner, run.version)
        assert_consistent(journal)


def _finish_after(ex: Execution, winner: str, version: int) -> None:
    """The loser re-reads and tries again: commit order alone has decided the ending."""
    run = ex.read("r1")
    assert run is not None
    if winner == "request_cancel":
        assert run.cancel_requested == {"reason": REASON}
        with pytest.raises(CancelPendingError):  # a completion cannot bypass it
            ex.complete(
                command_id="owner:done",
                run_id="r1",
                expected_version=version,
                epoch=1,
                evidence=["out:1"],
            )
        ended = ex.fail(
            command_id="owner:fail",
            run_id="r1",
            expected_version=version,
            epoch=1,
            reason="stopped for cancel",
            evidence=[],
        ).run
        assert (ended.status, ended.cancel_reason) == ("cancelled", REASON)
    elif winner == "complete":
        assert run.status == "completed"
        with pytest.raises(RunTerminalError):
            ex.request_cancel(
                command_id="late:cancel", run_id="r1", expected_version=version, reason=REASON
            )
    else:  # failed with attempts left: queued, and the request cancels it at once
        assert run.status == "queued"
        ended = ex.request_cancel(
            command_id="late:cancel", run_id="r1", expected_version=version, reason=REASON
        ).run
        assert (ended.status, ended.cancel_reason) == ("cancelled", REASON)


def test_racing_claims_across_processes_have_one_winner(journal_location: str) -> None:
    path = journal_location
    runs = [f"r{n}" for n in range(5)]
    with Journal.open(path) as journal:
        ex = Execution(journal)
        for run_id in runs:
            submit(ex, run_id)
        children = [
            Child(
                path,
                {
                    "wait_go": True,
                    "commands": [
                        {
                            "op": "claim",
                            "args": {
                                "command_id": f"claim:{n}:{run_id}",
                                "run_id": run_id,
                                "expected_version": 1,
                                "worker": f"worker{n}",
                            },
                        }
                        for run_id in runs
                    ],
                },
            )
            for n in range(8)
        ]
        for child in children:
            child.go()
        results = [[child.line() for _ in runs] for child in children]
        for child in children:
            child.finish()
        for index, run_id in enumerate(runs):
            outcomes = [r[index] for r in results]
            winners = [n for n, o in enumerate(outcomes) if "ok" in o]
            assert len(winners) == 1, outcomes
            assert all(o == {"error": "VERSION_CONFLICT"} for o in outcomes if "ok" not in o)
            run = ex.read(run_id)
            assert run is not None and len(run.attempts) == 1
            assert run.attempts[0].worker == f"worker{winners[0]}"
        assert_consistent(journal)
