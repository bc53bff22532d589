"""A PostgreSQL server restarted under a fleet (maintenance, a crash): found from outside, on a
real server stopped for half a minute under two live nodes, their dashboard and `refine events`.

Every node of the fleet looked ``silent`` as soon as the server was back, before its next beat
(a dashboard alerted "node a went silent", and ``refine cleanup --node a`` would have confirmed
the end of live work); and each node said the same error two or three times every five seconds
for as long as the server stayed down, its workers one more line every few seconds each. Real
server (its own: these tests stop and start it), real node, workers and recipes."""

from __future__ import annotations

import collections
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from store.journal.api import Journal
from store.journal.presence import MISSED_BEATS, Beat
from tests.conftest import own_server
from tests.helpers.node_env import WAIT_FOR_GO
from tests.helpers.pg_env import PgEnv
from tests.helpers.postgres_server import PostgresServer
from tests.helpers.waits import wait_until

pytestmark = pytest.mark.postgres
INTERVAL_S = 2.0  # the beats' interval here: silent after MISSED_BEATS of them (6 s)


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    with own_server(max_connections=30) as owned:
        yield owned


@pytest.fixture
def pg(server: PostgresServer, tmp_path: Path) -> Iterator[PgEnv]:
    url = server.create_database()
    env = PgEnv(url, tmp_path)
    try:
        yield env
    finally:
        env.cleanup()
        server.drop_database(url)


def down_for(server: PostgresServer, seconds: float) -> None:
    """Stop the server (its sessions end), leave it down, start it where clients expect it."""
    server.stop("fast")
    time.sleep(seconds)
    server.start_on_same_port()


def state(journal: Journal, node_id: str) -> str:
    now, rows = journal.presence()
    return next(r.state(now) for r in rows if r.node_id == node_id)


def test_a_server_restart_does_not_make_a_node_look_silent_before_it_could_beat(
    server: PostgresServer, pg: PgEnv
) -> None:
    pg.journal.write_presence(Beat("n1", "start", "host-1", 4, "0.1.0", INTERVAL_S))
    pg.goal("g", WAIT_FOR_GO)  # work for the node, which no node runs here: nothing beats again
    down_for(server, MISSED_BEATS * INTERVAL_S + 1)  # longer than its node's silence takes

    # Back up: the node had no way to beat while the server was down, so it is not silent yet
    # (before: silent at once, and its cleanup accepted).
    assert state(pg.journal, "n1") == "live"
    refused = pg.refine("cleanup", "--node", "n1", code=1, node="operator")
    assert refused == ""
    assert pg.outputs[-1].startswith("refine: NODE_LIVE: ") and pg.outputs[-1].count("\n") == 1

    # No beat for MISSED_BEATS intervals of the server's time up: now it is silent.
    wait_until(lambda: state(pg.journal, "n1") == "silent", timeout=30, what="n1 silent")
    assert pg.read("g")[0] == "queued"  # presence ended nothing


def test_a_node_and_its_workers_say_an_outage_once_and_when_the_journal_answers_again(
    server: PostgresServer, pg: PgEnv
) -> None:
    pg.env["REFINE_HEARTBEAT_S"] = "0.5"
    pg.goal("ends-while-down", WAIT_FOR_GO)
    pg.node()
    wait_until(lambda: pg.running_record("ends-while-down"), timeout=90, what="the goal running")

    server.stop("fast")
    (pg.dir / "go").touch()  # the recipe ends while the server is down: its worker waits to report
    time.sleep(12)  # the node's rounds (every 5 s at least) find the journal unreachable
    server.start_on_same_port()
    wait_until(lambda: pg.read("ends-while-down")[0] == "completed", timeout=60, what="reported")
    _, run = pg.read("ends-while-down")
    assert len(run.attempts) == 1  # reported once it could be, not run again

    wait_until(
        lambda: "the journal answers again" in "".join(_lines(pg.dir / "node-n1.out")),
        timeout=30, what="the node saying the journal answers",
    )  # fmt: skip
    node_said = _lines(pg.dir / "node-n1.out")
    assert _repeated(node_said) == [], node_said
    unreachable = [line for line in node_said if "journal unreachable" in line]
    # Once each reason ("shutting down", "Connection refused"), and the heartbeat's once: not
    # every round's (before: two lines every round, each repeated while the server was down).
    assert 1 <= len(unreachable) <= 4, node_said
    answers = [line for line in node_said if "the journal answers again, after" in line]
    assert len(answers) == 1, node_said

    worker_said = [
        line for line in _lines(pg.state_dir("n1") / "node.log") if line.startswith("worker ")
    ]
    assert _repeated(worker_said) == [], worker_said
    assert any("cannot reread the journal" in line for line in worker_said), worker_said
    assert any("the journal answers again, after" in line for line in worker_said), worker_said
    pg.never_printed_a_password()


def _lines(path: Path) -> list[str]:
    return path.read_text(errors="replace").splitlines() if path.exists() else []


def _repeated(lines: list[str]) -> list[str]:
    return [line for line, n in collections.Counter(lines).items() if n > 1]
