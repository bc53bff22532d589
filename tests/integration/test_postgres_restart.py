"""A PostgreSQL server restarted under a fleet (maintenance, a crash): found from outside, on a
real server stopped for half a minute under two live nodes, their dashboard and `refine events`.

Every node of the fleet looked ``silent`` as soon as the server was back, before its next beat
(a dashboard alerted "node a went silent", and ``refine cleanup --node a`` would have confirmed
the end of live work); and each node said the same error two or three times every five seconds
for as long as the server stayed down, its workers one more line every few seconds each. Real
server (its own: these tests stop and start it), real node, workers and recipes."""

from __future__ import annotations

import collections
import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from store.errors import StorageUnreachableError
from store.journal.api import Journal
from store.journal.presence import MISSED_BEATS, Beat
from store.ops import operator
from store.ops.operator import stop_goal
from tests.conftest import own_server
from tests.helpers.node_env import WAIT_FOR_GO
from tests.helpers.pg_env import PgEnv
from tests.helpers.postgres_server import PostgresServer
from tests.helpers.waits import node_recorded_exit, wait_until

pytestmark = pytest.mark.postgres
INTERVAL_S = 2.0  # the beats' interval here: silent after MISSED_BEATS of them (6 s)
# A recipe that ignores SIGTERM: a Stop's SIGKILL comes after its grace.
STUBBORN = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"


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


def stubborn_running(pg: PgEnv, goal_id: str) -> None:
    """``goal_id`` running STUBBORN, its SIGTERM ignored by now (the handler is set as Python
    starts, after the attempt is recorded)."""
    pg.goal(goal_id, STUBBORN)
    rec = wait_until(lambda: pg.running_record(goal_id), timeout=90, what=f"{goal_id} running")
    wait_until(
        lambda: any(_ignores_sigterm(c.pid) for c in psutil.Process(rec.pid).children()),
        what="the recipe ignoring SIGTERM",
    )


def _ignores_sigterm(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as status:
            ignored = next(line for line in status if line.startswith("SigIgn:"))
    except OSError:
        return False
    return bool(int(ignored.split()[1], 16) & (1 << (signal.SIGTERM - 1)))


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


def test_a_stop_whose_kill_lands_while_the_server_restarts_records_the_end_once_it_is_back(
    server: PostgresServer, pg: PgEnv
) -> None:
    """The kill cannot be taken back: before, the Stop said `STORAGE: journal unreachable`
    (exit 3, read as "nothing happened") with the process dead, and the node later recorded a
    plain `process-exited`. Now its end is recorded by the Stop itself once the server is back."""
    pg.node()
    stubborn_running(pg, "stuck")
    argv = [sys.executable, "-m", "refine_tui.cli", "--node", "n1", "--state-dir",
            str(pg.state_dir("n1")), "stop", "stuck", "--grace", "2", "--json"]  # fmt: skip
    stop = subprocess.Popen(argv, env=pg.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(0.5)  # SIGTERM sent, ignored: the grace runs
    down_for(server, 3)  # the SIGKILL lands while the server is down
    out, err = stop.communicate(timeout=60)
    assert stop.returncode == 0, err
    report = json.loads(out)
    assert (report["outcome"], report["process"]) == ("requeued", "killed")
    assert report["recorded_by"].endswith("@n1")
    _, run = pg.read("stuck")
    assert run.attempts[0].cleanup is not None
    assert run.attempts[0].cleanup["method"] == "sigkill"  # the Stop's, not the node's
    assert run.attempts[0].cleanup["confirmed_by"] == report["recorded_by"]


def test_a_stop_whose_end_cannot_be_recorded_says_the_process_was_stopped(
    server: PostgresServer, pg: PgEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server stays down past the Stop's patience (shortened here): STORAGE, saying what
    was done and what was not; the node records the end once the server is back."""
    monkeypatch.setattr(operator, "RECORD_PATIENCE_S", 1.0)
    monkeypatch.setenv("REFINE_STATE_DIR", str(pg.state_dir("n1")))  # as `--state-dir` says
    pg.node()
    stubborn_running(pg, "stuck")
    going_down = threading.Timer(0.5, server.stop, args=("fast",))  # during the grace
    with Journal.open(pg.url) as journal:
        going_down.start()
        with pytest.raises(StorageUnreachableError) as refused:
            stop_goal(journal, "stuck", node="n1", operator="op", grace_s=2.0)
    going_down.join()
    words = refused.value.message
    assert words.startswith("the process was stopped (SIGTERM to process group "), words
    assert "SIGKILL after 2 s) but its end is not recorded: journal unreachable: " in words
    assert words.endswith("; node n1 records it once the journal answers"), words
    server.start_on_same_port()
    node_recorded_exit(pg.read, "stuck")


def _lines(path: Path) -> list[str]:
    return path.read_text(errors="replace").splitlines() if path.exists() else []


def _repeated(lines: list[str]) -> list[str]:
    return [line for line, n in collections.Counter(lines).items() if n > 1]
