"""A node's housekeeping round with many running attempts (issue 22 item 5): its cost does not
grow with them, and it still cleans up every cancellation.

Real parts: a journal on each backend, real ``sleep`` processes as the attempts' workers, their
process records written by the registry, a ``Node`` ticking in this process. Costs are counted,
never timed: the journal's reads on PostgreSQL (``PostgresJournal.reads``), the record files
the registry parsed (``ProcessRegistry.parsed``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from store.host import processes
from store.host.processes import ProcessRecord, ProcessRegistry, create_time, this_host
from store.journal.api import Journal
from store.journal.postgres import PostgresJournal
from store.model.goals import Goals
from store.node.scheduler import Node
from store.node.touched import TouchedGoals
from tests.conftest import postgres_location
from tests.helpers.node_env import HANG, Env
from tests.helpers.waits import wait_until

NODE = "n1"


class Attempts:
    """Goals of ``NODE`` started by workers that are real ``sleep`` processes, each recorded."""

    def __init__(self, location: str) -> None:
        self.location = location
        self.journal = Journal.open(location)
        self.goals = Goals(self.journal)
        self.registry = ProcessRegistry.for_journal(self.journal, NODE)
        self.sleeps: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, count: int, *, record: bool = True) -> list[str]:
        """``count`` more running attempts (recorded unless ``record`` is False)."""
        goal_ids = []
        for _ in range(count):
            goal_id = f"g{len(self.sleeps):03d}"
            self.goals.create(goal_id=goal_id, title=goal_id, node_id=NODE, argv=["true"])
            self.goals.start(goal_id=goal_id, node_id=NODE, worker=f"{NODE}/t{goal_id}", token="t")
            self.sleeps[goal_id] = subprocess.Popen(["sleep", "3600"], start_new_session=True)
            if record:
                self.record(goal_id)
            goal_ids.append(goal_id)
        return goal_ids

    def record(self, goal_id: str) -> None:
        pid = self.sleeps[goal_id].pid
        created = create_time(pid)
        assert created is not None
        rec = ProcessRecord(
            node_id=NODE,
            pid=pid,
            create_time=created,
            pgid=pid,
            run_id=f"{goal_id}.r1",
            epoch=1,
            worker=f"{NODE}/t{goal_id}",
            argv=("sleep", "3600"),
            log_path=str(self.registry.log_path(f"{goal_id}.r1", 1)),
            started_at=time.time(),
            journal_id=self.journal.journal_id,
            host=this_host(),
        )
        self.registry.record(rec, sync=False)

    def cancel(self, goal_id: str) -> None:
        self.goals.cancel(goal_id=goal_id, reason="not needed", command_id=f"cancel-{goal_id}")

    def run_status(self, goal_id: str) -> str:
        run = self.goals.current_run(self.goals.read(goal_id))  # type: ignore[arg-type]
        assert run is not None
        return run.status

    def close(self) -> None:
        for proc in self.sleeps.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        self.journal.close()


@pytest.fixture
def pg_location(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from postgres_location(request, tmp_path)


def _attempts(location: str) -> Iterator[Attempts]:
    attempts = Attempts(location)
    try:
        yield attempts
    finally:
        attempts.close()


@pytest.fixture
def attempts(journal_location: str) -> Iterator[Attempts]:
    """On each backend."""
    yield from _attempts(journal_location)


@pytest.fixture
def pg_attempts(pg_location: str) -> Iterator[Attempts]:
    yield from _attempts(pg_location)


def _round_reads(node: Node) -> int:
    """The journal reads of one more round with housekeeping (the node's own count)."""
    assert isinstance(node.journal, PostgresJournal)
    before = node.journal.reads
    node.tick()
    return node.journal.reads - before


@pytest.mark.postgres
def test_a_round_reads_the_journal_as_often_with_30_attempts_as_with_3(
    pg_attempts: Attempts,
) -> None:
    pg_attempts.start(3)
    with Node(pg_attempts.location, NODE, capacity=100) as node:
        node.tick()  # the first round reads every Run once (all in one read)
        few = _round_reads(node)
        pg_attempts.start(27)
        node.tick()  # the new records' Runs are read once
        many = _round_reads(node)
        assert len(node.launched) == 30  # all found running (the records' sleeps)
    # Before: one read of each attempt's Run per round (3, then 30 more than these).
    assert many == few
    assert few <= 4


def test_a_cancellation_after_rounds_that_read_no_run_is_cleaned_up(attempts: Attempts) -> None:
    goal_ids = attempts.start(3)
    with Node(attempts.location, NODE, capacity=10, grace_s=5.0) as node:
        node.tick()
        node.tick()  # nothing new: no Run read
        attempts.cancel(goal_ids[1])
        node.tick()

        attempts.sleeps[goal_ids[1]].wait(timeout=10)  # stopped (maybe reaped by the stop)
        assert attempts.run_status(goal_ids[1]) == "cancelled"
        assert [attempts.run_status(g) for g in (goal_ids[0], goal_ids[2])] == ["running"] * 2
        assert attempts.registry.get(f"{goal_ids[1]}.r1", 1) is None


def test_a_record_written_after_its_cancellation_was_seen_is_still_cleaned_up(
    attempts: Attempts,
) -> None:
    (goal_id,) = attempts.start(1, record=False)  # the worker has not recorded itself yet
    with Node(attempts.location, NODE, capacity=10, grace_s=5.0) as node:
        node.tick()
        attempts.cancel(goal_id)
        node.tick()  # the cancellation's events are read, with no record to act on
        attempts.record(goal_id)
        node.tick()

        attempts.sleeps[goal_id].wait(timeout=10)
        assert attempts.run_status(goal_id) == "cancelled"


def test_a_node_started_after_a_cancellation_cleans_it_up(attempts: Attempts) -> None:
    (goal_id,) = attempts.start(1)
    attempts.cancel(goal_id)  # while no node ran: a new node reads every Run once
    with Node(attempts.location, NODE, capacity=10, grace_s=5.0) as node:
        node.tick()

        attempts.sleeps[goal_id].wait(timeout=10)
        assert attempts.run_status(goal_id) == "cancelled"


# --- the records, parsed once -----------------------------------------------------------------


def test_unchanged_records_are_parsed_once_and_a_replaced_one_again(
    attempts: Attempts, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(processes, "RACY_NS", 200_000_000)  # 0.2 s instead of 2 s
    goal_ids = attempts.start(4)
    registry = ProcessRegistry.for_journal(attempts.journal, NODE)
    time.sleep(0.3)  # older than RACY_NS: their times would show any change
    assert len(registry.all()) == 4
    parsed = registry.parsed
    assert len(registry.all()) == 4
    assert registry.parsed == parsed  # nothing changed: nothing read

    attempts.sleeps[goal_ids[0]].kill()
    attempts.sleeps[goal_ids[0]].wait()
    attempts.sleeps[goal_ids[0]] = subprocess.Popen(["sleep", "3600"], start_new_session=True)
    attempts.record(goal_ids[0])  # rewritten at once: another process
    found = {rec.run_id: rec.pid for rec in registry.all()}
    assert found[f"{goal_ids[0]}.r1"] == attempts.sleeps[goal_ids[0]].pid
    assert registry.parsed == parsed + 1

    registry.remove(f"{goal_ids[1]}.r1", 1)
    assert f"{goal_ids[1]}.r1" not in {rec.run_id for rec in registry.all()}


def test_a_record_replaced_within_the_clock_tick_of_its_read_is_read_again(
    attempts: Attempts,
) -> None:
    """The file system's clock may not tell a read and a rewrite just after apart: a record
    changed that recently is read again, whatever its times say."""
    (goal_id,) = attempts.start(1)
    registry = ProcessRegistry.for_journal(attempts.journal, NODE)
    for _ in range(20):
        registry.all()
        old = attempts.sleeps[goal_id]
        attempts.sleeps[goal_id] = subprocess.Popen(["sleep", "3600"], start_new_session=True)
        attempts.record(goal_id)
        old.kill()
        old.wait()
        (rec,) = registry.all()
        assert rec.pid == attempts.sleeps[goal_id].pid


# --- a node's workers, watched by pidfd -------------------------------------------------------


def test_a_node_with_descriptors_past_1024_still_sees_its_workers_run(env: Env) -> None:
    """1,000 attempts are 1,000 pidfds: a worker's pidfd numbered past select()'s 1024 is
    watched all the same (select refused it, and the round failed)."""
    env.goal("first", HANG)
    spare: list[int] = []
    try:
        with Node(env.path, "n1", grace_s=0.3) as node:
            assert node.tick() == ["first"]  # the forkserver started: its descriptors made
            env.goal("far", HANG)
            spare.append(os.open(os.devnull, os.O_RDONLY))
            while spare[-1] <= 1100:  # every lower number taken: the next ones are past 1024
                spare.append(os.open(os.devnull, os.O_RDONLY))
            assert node.tick() == ["far"]
            launch = node.launched["far"]
            assert launch.pidfd is not None and launch.pidfd > 1024
            wait_until(lambda: env.running_record("far"), what="a running, recorded attempt")
            node.tick()
            assert node.launched["far"] is launch and launch.alive()
            env.goals.cancel(goal_id="far", reason="done", command_id="op:cancel:far")
            node.tick()
            wait_until(lambda: env.status("far") == "cancelled", what="cancelled")
    finally:
        for fd in spare:
            os.close(fd)


def test_a_journal_that_went_back_is_read_whole_again(tmp_path: Path) -> None:
    """A journal whose events now end before the cursor (a backup restored in place under
    the same id) holds what was never read here: which Goals changed is unknown (None, so
    the node reads every Run), and the cursor goes on from where the journal now ends."""
    path = tmp_path / "journal.db"

    def add(journal: Journal, goal_id: str) -> None:
        Goals(journal).create(goal_id=goal_id, title=goal_id, node_id="n1", argv=["true"])

    with Journal.open(path) as writer, Journal.open(path) as journal:
        add(writer, "a")
        touched = TouchedGoals()
        assert touched.since(journal) is None  # a journal first seen: unknown
        before_b = writer.last_sequence()
        add(writer, "b")
        assert touched.since(journal) == {"b"}
        with contextlib.closing(sqlite3.connect(path)) as raw, raw:  # the backup from before b
            raw.execute("DELETE FROM events WHERE sequence > ?", (before_b,))
        assert touched.since(journal) is None
        assert touched.since(journal) == set()  # from where it now ends
        add(writer, "c")
        assert touched.since(journal) == {"c"}
