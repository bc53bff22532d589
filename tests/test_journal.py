"""The journal alone: atomic commands, replay, versions, read-only, paging, bad files."""

from __future__ import annotations

from pathlib import Path

import pytest

from store.errors import (
    CommandConflictError,
    DecisionError,
    InvalidInputError,
    JournalClosedError,
    JournalReadOnlyError,
    StorageError,
    VersionConflictError,
)
from store.journal import Change, Journal


def submit(loaded):  # a minimal decision: create one aggregate
    assert loaded["run:a"] is None
    return [Change("run:a", {"status": "queued"}, [("run.submitted", {"run_id": "a"})])]


def test_command_commits_state_receipt_events_and_outbox(tmp_path: Path) -> None:
    with Journal.open(tmp_path / "j.db") as j:
        out = j.execute(
            command_id="c1", payload={"op": "s"}, expected={"run:a": None}, decide=submit
        )
        assert not out.replayed and out.states["run:a"].version == 1
        assert [e.sequence for e in j.events_after(0)] == [1]
        assert j.outbox() == [(1, "run:a", "run.submitted")]
        again = j.execute(
            command_id="c1", payload={"op": "s"}, expected={"run:a": None}, decide=submit
        )
        assert again.replayed and again.states == out.states
        assert j.last_sequence() == 1


def test_refusals_record_nothing(tmp_path: Path) -> None:
    with Journal.open(tmp_path / "j.db") as j:
        j.execute(command_id="c1", payload={"op": "s"}, expected={"run:a": None}, decide=submit)
        with pytest.raises(CommandConflictError):
            j.execute(command_id="c1", payload={"op": "t"}, expected={"run:a": None}, decide=submit)
        with pytest.raises(VersionConflictError):
            j.execute(command_id="c2", payload={"op": "t"}, expected={"run:a": 3}, decide=submit)
        with pytest.raises(DecisionError):
            j.execute(
                command_id="c3",
                payload={"op": "t"},
                expected={"run:a": 1},
                decide=lambda loaded: 1 / 0,
            )
        assert j.last_sequence() == 1 and len(j.outbox()) == 1


def test_read_only_refuses_even_a_replay(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    with Journal.open(path) as j:
        j.execute(command_id="c1", payload={"op": "s"}, expected={"run:a": None}, decide=submit)
    with Journal.open(path, read_only=True) as ro:
        with pytest.raises(JournalReadOnlyError):
            ro.execute(
                command_id="c1", payload={"op": "s"}, expected={"run:a": None}, decide=submit
            )
        assert ro.load("run:a").state == {"status": "queued"}


def test_closed_and_paging_and_bad_files(tmp_path: Path) -> None:
    j = Journal.open(tmp_path / "j.db")
    for bad in (-1, True, 1.5):
        with pytest.raises(InvalidInputError):
            j.history("run:a", after_sequence=bad)
    for bad in (0, 1001, False):
        with pytest.raises(InvalidInputError):
            j.history("run:a", limit=bad)
    j.close()
    with pytest.raises(JournalClosedError):
        j.load("run:a")
    with pytest.raises(StorageError):
        Journal.open(tmp_path / "missing.db", read_only=True)
    assert not (tmp_path / "missing.db").exists()
    (tmp_path / "text.db").write_text("not sqlite " * 100)
    with pytest.raises(StorageError):
        Journal.open(tmp_path / "text.db")
    assert (tmp_path / "text.db").read_text() == "not sqlite " * 100
