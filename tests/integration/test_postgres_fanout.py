"""The fan-out on PostgreSQL (issue 27 item 2): a node reads only on commits that may concern it.

Each command's NOTIFY names the nodes it touches; a node's listener wakes only for its own, for
those that name none (a Run written alone, too many nodes) and on every (re)connection. Reads are
counted by the node's journal handle (``PostgresJournal.reads``), never timed: node ``a`` serves
in this process with both safety polls off, so only a wake-up can make it read; node ``b`` is a
real ``refine node`` in another process.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator

import psycopg
import pytest

from store.journal.api import Journal
from store.journal.core import Change
from store.journal.listen import ListenWakeUps
from store.journal.locations import STATE_DIR_ENV
from store.journal.postgres import NOTICE_NODES_MAX, PostgresJournal
from store.model.execution import Execution
from store.node import scheduler
from store.node.scheduler import Node
from tests.helpers.node_env import QUICK
from tests.helpers.run_support import PINS, budget
from tests.helpers.waits import wait_until
from tests.integration.test_postgres_operation import PgEnv, pg, status

__all__ = ["pg"]  # the fixture, shared with the operator story's tests
pytestmark = pytest.mark.postgres


@pytest.fixture
def node_a(pg: PgEnv, monkeypatch: pytest.MonkeyPatch) -> Iterator[Node]:
    """Node ``a`` (served by ``serving``), with no safety poll: it reads only when woken."""
    monkeypatch.setattr(scheduler, "SAFETY_POLL_S", 3600.0)
    monkeypatch.setattr("store.journal.listen.SAFETY_POLL_S", 3600.0)
    monkeypatch.setenv(STATE_DIR_ENV, str(pg.state_dir("a")))
    monkeypatch.setenv("REFINE_TEST_MARK", pg.marker)  # its workers are found as leftovers
    with Node(pg.url, "a", capacity=4) as node:
        yield node


def serving(node: Node, drive: Callable[[], None]) -> None:
    """Serve ``node`` on this thread's loop (signal handlers need the main thread) while
    ``drive`` runs on another; re-raise what ``drive`` raised."""
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    failures: list[BaseException] = []

    def run() -> None:
        try:
            drive()
        except BaseException as exc:
            failures.append(exc)
        finally:
            loop.call_soon_threadsafe(stop.set)

    driver = threading.Thread(target=run)
    driver.start()
    try:
        loop.run_until_complete(node.serve(stop))
    finally:
        driver.join()
        loop.close()
    if failures:
        raise failures[0]


def listener(node: Node) -> ListenWakeUps:
    wakeups = node.wakeups
    assert isinstance(wakeups, ListenWakeUps)
    return wakeups


def reads(node: Node) -> int:
    assert isinstance(node.journal, PostgresJournal)
    return node.journal.reads


def settled(node: Node) -> None:
    """Wait until ``node`` listens and has done the round its connection woke (then nothing
    wakes it but a notification: no worker of its runs, both safety polls are off)."""
    wait_until(
        lambda: (
            isinstance(node.wakeups, ListenWakeUps)
            and node.wakeups.connects >= 1
            and node.rounds >= 2
        ),
        what="node a listening, its first rounds done",
    )


def heard_everything(pg: PgEnv, node: Node) -> None:
    """Node ``a``'s listener has been told of every commit so far (skipped or not)."""
    last = pg.journal.last_sequence()
    wait_until(lambda: listener(node).last_notified >= last, what=f"a notified of {last}")


def test_commits_of_another_node_cause_no_read_and_its_own_wake_it_at_once(
    pg: PgEnv, node_a: Node
) -> None:
    pg.node("b")
    mine = [f"b{n}" for n in range(8)]

    def drive() -> None:
        settled(node_a)
        before, rounds = reads(node_a), node_a.rounds
        for goal_id in mine:
            pg.goal(goal_id, QUICK, node_id="b")
        wait_until(
            lambda: all(status(pg, g) == "completed" for g in mine),
            timeout=60,
            what="b's goals completed",
        )
        heard_everything(pg, node_a)
        # Created, started and settled by b: not one read, not one round on a.
        assert reads(node_a) == before
        assert node_a.rounds == rounds
        assert listener(node_a).skipped >= 3 * len(mine)
        # Its own goal: the notification alone wakes it (no poll would for an hour).
        pg.goal("a1", QUICK, node_id="a")
        wait_until(lambda: status(pg, "a1") == "completed", what="a1 completed")
        assert reads(node_a) > before

    serving(node_a, drive)


def test_a_commit_that_names_no_node_or_too_many_wakes_every_node(pg: PgEnv, node_a: Node) -> None:
    def wakes_a(commit: Callable[[], object], what: str) -> None:
        before, rounds = reads(node_a), node_a.rounds
        commit()
        wait_until(lambda: node_a.rounds > rounds, what=f"a woken by {what}")
        assert reads(node_a) > before

    def many_nodes() -> object:
        # One command writing aggregates of more nodes than a notification names.
        names = [f"n{i:02d}-{'x' * 60}" for i in range(20)]
        assert len("".join(f" {n}" for n in names)) > NOTICE_NODES_MAX
        changes = [Change(f"probe:{n}", {"node_id": n}, [("probe.made", {})]) for n in names]
        return pg.journal.execute(
            command_id="probe:many-nodes",
            payload={"op": "probe"},
            expected={f"probe:{n}": None for n in names},
            decide=lambda loaded: changes,
        )

    def drive() -> None:
        settled(node_a)
        solo = Execution(pg.journal)  # a Run written alone names no node
        wakes_a(
            lambda: solo.submit(command_id="solo", run_id="solo", pins=PINS, budget=budget()),
            "a Run",
        )
        wakes_a(many_nodes, "a commit of many nodes")
        # One that names b (and only b) still does not.
        heard_everything(pg, node_a)
        before = reads(node_a)
        pg.goal("b1", QUICK, node_id="b")
        heard_everything(pg, node_a)
        assert reads(node_a) == before

    serving(node_a, drive)


def test_a_node_whose_listen_connection_is_lost_reads_once_it_listens_again(
    pg: PgEnv, node_a: Node
) -> None:
    def drive() -> None:
        settled(node_a)
        before, rounds = reads(node_a), node_a.rounds
        with psycopg.connect(pg.url, autocommit=True) as admin:
            ended = admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND query LIKE 'LISTEN %%'"
            ).fetchall()
        assert ended == [(True,)]
        pg.goal("a1", QUICK, node_id="a")  # committed while it may not listen
        wait_until(lambda: listener(node_a).connects >= 2, what="a listening again")
        wait_until(lambda: status(pg, "a1") == "completed", what="a1 completed")
        assert node_a.rounds > rounds and reads(node_a) > before

    serving(node_a, drive)


def test_a_dashboard_listener_wakes_for_every_nodes_commits(pg: PgEnv) -> None:
    """No node id (the dashboard's, ``refine wait``'s): a commit of b's wakes it; a listener
    for node a counts the same notification as skipped."""
    dashboard, node = ListenWakeUps(pg.url), ListenWakeUps(pg.url, node_id="a")
    assert isinstance(Journal.watch(pg.url), ListenWakeUps)

    async def follow() -> tuple[int, int]:
        woken = {"dashboard": 0, "node": 0}

        async def count(name: str, wakeups: ListenWakeUps) -> None:
            async for _ in wakeups:
                woken[name] += 1

        tasks = [
            asyncio.create_task(count("dashboard", dashboard)),
            asyncio.create_task(count("node", node)),
        ]
        await until(lambda: woken["dashboard"] >= 1 and woken["node"] >= 1)  # connected
        first = dict(woken)
        await asyncio.to_thread(pg.goal, "b1", QUICK, node_id="b")
        await until(lambda: woken["dashboard"] > first["dashboard"] and node.skipped >= 1)
        dashboard.stop(), node.stop()
        await asyncio.gather(*tasks)
        return woken["node"] - first["node"], node.skipped

    node_woken, skipped = asyncio.run(follow())
    assert (node_woken, skipped) == (0, 1)


async def until(condition: Callable[[], bool], timeout: float = 20.0) -> None:
    """``wait_until`` on an event loop (the listeners wake it from their threads)."""
    for _ in range(int(timeout / 0.02)):
        if condition():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition not met in time")
