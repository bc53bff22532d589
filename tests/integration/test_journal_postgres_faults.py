"""PostgreSQL journal across processes and faults: SIGKILL at the commit, racing writers, and
the server stopped under a command. Real processes, real signals, a real server."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest

from store.errors import StorageUnreachableError
from store.journal.core import Change
from store.journal.postgres import PostgresJournal
from tests.helpers.postgres_server import PostgresServer
from tests.helpers.run_support import Child as RunChild

PG_CHILD = Path(__file__).parents[1] / "helpers" / "pg_journal_child.py"


def Child(url: str, spec: dict[str, Any]) -> RunChild:
    """The shared JSON-lines child, running the PostgreSQL journal script."""
    return RunChild(url, spec, script=PG_CHILD)


def bump(loaded):  # type: ignore[no-untyped-def]
    return [
        Change(agg, {"n": (s.version if s else 0) + 1}, [("bumped", {"agg": agg})])
        for agg, s in loaded.items()
    ]


def footprint(url: str) -> tuple[Any, ...]:
    with psycopg.connect(url) as conn:
        return tuple(
            conn.execute(sql).fetchall()
            for sql in (
                "SELECT * FROM refine.aggregates ORDER BY aggregate_id",
                "SELECT * FROM refine.events ORDER BY sequence",
                "SELECT * FROM refine.receipts ORDER BY command_id",
                "SELECT * FROM refine.outbox ORDER BY sequence",
                "SELECT * FROM refine.head",
            )
        )


def run(journal: PostgresJournal, command_id: str, expected: dict[str, int | None]) -> bool:
    out = journal.execute(command_id=command_id, payload={"op": "bump"}, expected=expected,
                          decide=bump)  # fmt: skip
    return out.replayed


@pytest.mark.parametrize("boundary", ["before-commit", "after-commit"])
def test_sigkill_at_the_commit_leaves_nothing_or_everything(
    boundary: str, postgres_url: str
) -> None:
    with PostgresJournal.connect(postgres_url) as journal:
        run(journal, "c0", {"run:a": None})
        baseline = footprint(postgres_url)
        command = {"command_id": "c1", "expected": {"run:a": 1, "run:b": None}}
        child = Child(postgres_url, {"commands": [command], "pause": boundary})
        child.wait_stopped()
        if boundary == "before-commit":
            assert footprint(postgres_url) == baseline  # every write done, none visible
        else:
            assert journal.last_sequence() == 3
        child.kill()
        after = footprint(postgres_url)
        assert (after == baseline) == (boundary == "before-commit")
        # The crashed caller repeats its command: a replay means it had committed.
        assert run(journal, "c1", {"run:a": 1, "run:b": None}) == (boundary == "after-commit")
        assert [e.sequence for e in journal.events_after(0)] == [1, 2, 3]
        assert journal.load("run:a").version == 2  # type: ignore[union-attr]


def test_racing_writers_from_eight_processes_have_one_winner_each(postgres_url: str) -> None:
    aggs = [f"run:r{n}" for n in range(5)]
    with PostgresJournal.connect(postgres_url) as journal:
        for agg in aggs:
            run(journal, f"create:{agg}", {agg: None})
        children = [
            Child(
                postgres_url,
                {
                    "wait_go": True,
                    "commands": [
                        {"command_id": f"claim:{n}:{agg}", "expected": {agg: 1}} for agg in aggs
                    ],
                },
            )
            for n in range(8)
        ]
        for child in children:
            child.go()
        results = [[child.line() for _ in aggs] for child in children]
        for child in children:
            child.proc.wait(timeout=60)
        for index, agg in enumerate(aggs):
            outcomes = [r[index] for r in results]
            assert outcomes.count({"ok": False}) == 1, outcomes
            assert outcomes.count({"error": "VERSION_CONFLICT"}) == 7, outcomes
            assert journal.load(agg).version == 2  # type: ignore[union-attr]
        events = journal.events_after(0)
        assert [e.sequence for e in events] == list(range(1, 11))


def test_a_server_stopped_under_a_command_is_typed_and_the_command_runs_once(
    postgres_server: PostgresServer, postgres_url: str
) -> None:
    if not postgres_server.owned:
        pytest.skip("an external server ($REFINE_TEST_POSTGRES_URL) is not stopped by tests")
    with PostgresJournal.connect(postgres_url) as journal:
        run(journal, "c0", {"run:a": None})
        baseline = footprint(postgres_url)
        stopped = threading.Event()

        def stop_then_decide(loaded):  # type: ignore[no-untyped-def]
            postgres_server.stop("immediate")  # the server dies inside the transaction
            stopped.set()
            return bump(loaded)

        with pytest.raises(StorageUnreachableError) as refused:
            journal.execute(command_id="c1", payload={"op": "bump"}, expected={"run:a": 1},
                            decide=stop_then_decide)  # fmt: skip
        assert stopped.is_set() and refused.value.code == "STORAGE"
        with pytest.raises(StorageUnreachableError):  # still down: typed again, no hang
            journal.load("run:a")
        postgres_server.start_on_same_port()
        assert footprint(postgres_url) == baseline  # nothing half-written
        # The same journal object reconnects; the repeated command runs exactly once.
        assert run(journal, "c1", {"run:a": 1}) is False
        assert run(journal, "c1", {"run:a": 1}) is True
        assert journal.load("run:a").version == 2  # type: ignore[union-attr]
        assert [e.sequence for e in journal.events_after(0)] == [1, 2]
