"""The fan-out on PostgreSQL (issue 27 item 2): a node is sent only commits that may concern it.

Each command's NOTIFY goes to the journal's channel (dashboards) and to the channels of the
nodes it touches, or to the all-nodes channel when it names none (a Run written alone, too many
nodes); a node's listener LISTENs to its own and the all-nodes channel only, so the server sends
it nothing of other nodes' commits (``ListenWakeUps.received`` counts what it was sent). It wakes
for its own, for those that name none and on every (re)connection. Reads are counted by the
node's journal handle (``PostgresJournal.reads``), never timed: node ``a`` serves in this process
with both safety polls off, so only a wake-up can make it read; node ``b`` is a real ``refine
node`` in another process. That nothing was sent is shown by a commit every node is sent
(``told``): notifications arrive in commit order, so once a listener has that one, it has all
that were sent to it before.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator

import psycopg
import pytest

from store.journal.api import Journal
from store.journal.core import Change
from store.journal.listen import ListenWakeUps
from store.journal.locations import STATE_DIR_ENV
from store.journal.postgres import NOTICE_NODES_MAX, PostgresJournal, node_channel
from store.model.execution import Execution
from store.node import scheduler
from store.node.scheduler import Node
from tests.helpers.node_env import QUICK
from tests.helpers.old_schema import as_pg_schema
from tests.helpers.pg_env import PgEnv
from tests.helpers.run_support import PINS, budget
from tests.helpers.waits import wait_until
from tests.integration.test_postgres_operation import status

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


def settled(node: Node, quiet_s: float = 2.0) -> None:
    """Wait until ``node`` listens and has done the rounds its start and its connection woke,
    none for ``quiet_s`` (then nothing wakes it but a notification: no worker of its runs,
    both safety polls are off). A loaded machine can hold back the connection's round."""
    wait_until(
        lambda: (
            isinstance(node.wakeups, ListenWakeUps)
            and node.wakeups.connects >= 1
            and node.rounds >= 2
        ),
        what="node a listening, its first rounds done",
    )
    rounds, since = node.rounds, time.monotonic()
    while time.monotonic() - since < quiet_s:
        if node.rounds != rounds:
            rounds, since = node.rounds, time.monotonic()
        time.sleep(0.05)


def told(pg: PgEnv, wakeups: ListenWakeUps) -> int:
    """Commit what every node is sent (a Run alone names no node) and wait until ``wakeups``
    has it: everything sent to it before has arrived too. The commit's sequence."""
    Execution(pg.journal).submit(
        command_id=f"told:{pg.journal.last_sequence()}",
        run_id=f"told:{pg.journal.last_sequence()}",
        pins=PINS,
        budget=budget(),
    )
    last = pg.journal.last_sequence()
    wait_until(lambda: wakeups.last_notified >= last, what=f"told of {last}")
    return last


def test_a_node_is_sent_nothing_of_another_nodes_commits_and_its_own_wake_it_at_once(
    pg: PgEnv, node_a: Node
) -> None:
    pg.node("b")
    mine = [f"b{n}" for n in range(8)]

    def drive() -> None:
        settled(node_a)
        before, rounds, received = reads(node_a), node_a.rounds, listener(node_a).received
        for goal_id in mine:
            pg.goal(goal_id, QUICK, node_id="b")
        wait_until(
            lambda: all(status(pg, g) == "completed" for g in mine),
            timeout=60,
            what="b's goals completed",
        )
        # Created, started and settled by b: not one read, not one round on a ...
        assert reads(node_a) == before
        assert node_a.rounds == rounds
        # ... and not one notification sent to it: the next it is sent is the first it has.
        told(pg, listener(node_a))
        assert listener(node_a).received == received + 1
        assert listener(node_a).skipped == 0
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
        # One that names b (and only b) is not even sent to a.
        received = listener(node_a).received
        pg.goal("b1", QUICK, node_id="b")
        told(pg, listener(node_a))
        assert listener(node_a).received == received + 1

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
        # Its own channel and the all-nodes one again, not the journal's.
        channel = listener(node_a).channel
        assert listener(node_a).listening == (
            node_channel(channel, "a"),
            node_channel(channel, None),
        )

    serving(node_a, drive)


def test_a_dashboard_listener_wakes_for_every_nodes_commits(pg: PgEnv) -> None:
    """No node id (the dashboard's, ``refine wait``'s): a commit of b's wakes it; a listener
    for node a is not even sent that notification."""
    dashboard, node = ListenWakeUps(pg.url), ListenWakeUps(pg.url, node_id="a")
    assert isinstance(Journal.watch(pg.url), ListenWakeUps)

    async def follow() -> tuple[int, int, int]:
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
        await until(lambda: woken["dashboard"] > first["dashboard"])
        last = await asyncio.to_thread(told, pg, node)  # sent to every node: a's first
        await until(lambda: woken["node"] > first["node"])
        await until(lambda: dashboard.last_notified >= last)  # it may arrive there later
        dashboard.stop(), node.stop()
        await asyncio.gather(*tasks)
        return woken["node"] - first["node"], node.received, dashboard.received

    node_woken, node_received, dashboard_received = asyncio.run(follow())
    assert (node_woken, node_received) == (1, 1)  # by the commit every node is sent, alone
    assert dashboard_received == 2


def test_a_node_of_a_journal_before_schema_7_listens_to_the_journals_channel(
    pg: PgEnv,
) -> None:
    """A journal that no writable open has migrated yet (its write_command() notifies the
    journal's channel alone, naming the nodes): a node's listener listens there and skips what
    names other nodes, as before; once migrated, its next connection listens to its own."""
    as_pg_schema(pg.url, 6)
    node = ListenWakeUps(pg.url, node_id="a")
    channel = node.channel

    def old_write(command_id: str, suffix: str) -> None:
        """A command as schema 6 wrote it (an event, its NOTIFY), by its write_command()."""
        with psycopg.connect(pg.url, autocommit=True) as conn:
            event = [f"run:{command_id}", 1, "run.submitted", "{}"]
            conn.execute(
                "SELECT refine.write_command(%s, 'key', 'result', 0, %s, %s::jsonb)",
                (command_id, channel, json.dumps([[event], [], suffix])),
            )

    async def follow() -> None:
        woken = 0

        async def count() -> None:
            nonlocal woken
            async for _ in node:
                woken += 1

        task = asyncio.create_task(count())
        await until(lambda: woken >= 1)  # connected
        assert node.listening == (channel,)
        await asyncio.to_thread(old_write, "c1", " b")
        await until(lambda: node.skipped == 1)
        await asyncio.to_thread(old_write, "c2", " a")
        await until(lambda: woken == 2)  # its own wakes it
        await asyncio.to_thread(lambda: PostgresJournal.connect(pg.url).close())  # to 7
        with psycopg.connect(pg.url, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND query LIKE 'LISTEN %%'"
            )
        await until(lambda: node.connects >= 2 and node.state == "live")
        assert node.listening == (node_channel(channel, "a"), node_channel(channel, None))
        node.stop()
        await task

    asyncio.run(follow())


async def until(condition: Callable[[], bool], timeout: float = 20.0) -> None:
    """``wait_until`` on an event loop (the listeners wake it from their threads)."""
    for _ in range(int(timeout / 0.02)):
        if condition():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition not met in time")
