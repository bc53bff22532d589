"""refine on PostgreSQL with real nodes, workers and a dashboard (issues 11 and 12, DESIGN §12).

The operator story through the CLI (add, node, stop, cancel, cleanup, release, check), and a
server restart under a running node, its workers and a watching dashboard. Every process gets
the journal URL (with its password) by environment; the tests check that the password never
shows in any output and never in any process's argv.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from typing import Any

import psutil
import pytest

from refine_tui.app import RefineApp
from store.goals import Goals
from store.journal.api import Journal
from store.node.scheduler import FORKSERVER_ENV
from tests.helpers.node_env import HANG, HANG_ONCE, QUICK, WAIT_FOR_GO
from tests.helpers.pg_env import PgEnv
from tests.helpers.postgres_server import PASSWORD, PostgresServer
from tests.helpers.waits import wait_until

PY = sys.executable
pytestmark = pytest.mark.postgres


def argv_of(proc: psutil.Process) -> list[str]:
    with contextlib.suppress(psutil.Error):  # it may have ended since it was found
        return proc.cmdline()
    return []


def status(pg: PgEnv, goal_id: str) -> str:
    return pg.read(goal_id)[0]


def test_the_operator_story_on_postgresql_with_a_real_node(pg: PgEnv) -> None:
    pg.refine("goal", "add", "--title", "quick", "--id", "quick", "--", PY, "-c", QUICK, pg.marker)
    pg.goal("long", HANG)
    pg.node()
    wait_until(lambda: status(pg, "quick") == "completed", what="quick completed")
    first = wait_until(lambda: pg.running_record("long"), what="a recorded attempt")
    # A URL's password never reaches argv of this test's node, workers and recipes (not the
    # whole machine's: other tests' helper children carry test URLs in argv).
    ours = pg.ours()
    assert len(ours) >= 3  # the node, the long goal's worker and its recipe
    assert not [p for p in ours if PASSWORD in " ".join(argv_of(p))]
    assert first.journal_id == pg.journal.journal_id  # node records name their journal

    stopped = json.loads(pg.refine("stop", "long", "--grace", "1", "--json"))
    assert stopped["outcome"] == "requeued"
    again = wait_until(
        lambda: (rec := pg.running_record("long")) and rec.epoch == 2 and rec, what="relaunch"
    )
    cancelled = json.loads(pg.refine("cancel", "long", "--reason", "enough", "--grace", "1",
                                     "--json"))  # fmt: skip
    assert cancelled["outcome"] == "cancelled"
    assert status(pg, "long") == "cancelled"
    wait_until(lambda: not psutil.pid_exists(again.pid), what="the recipe's worker gone")

    # A crash of the node and its worker: reconciled on restart, an operator goal is held.
    pg.goal("payment", HANG_ONCE, redelivery="operator")
    node = pg.started[-1]
    rec = wait_until(lambda: pg.running_record("payment"), what="payment running")
    wait_until(lambda: (pg.dir / "ran").exists(), what="the recipe started")
    node.kill()
    node.wait(timeout=10)
    os.killpg(rec.pgid, signal.SIGKILL)
    pg.node()
    wait_until(lambda: status(pg, "payment") == "held", what="held after reconciliation")
    pg.refine("release", "payment")
    wait_until(lambda: status(pg, "payment") == "completed", what="released and completed")

    # An attempt nobody recorded (a claim without a process here): confirmed by the operator.
    pg.goal("orphan", HANG, node_id="n9")
    pg.goals.start(goal_id="orphan", node_id="n9", worker="n9/gone", token="t1")
    refused = pg.refine("cleanup", "orphan.r1", "--epoch", "2", code=1)
    assert refused == ""
    confirmed = json.loads(pg.refine("cleanup", "orphan.r1", "--epoch", "1", "--json"))
    assert confirmed["outcome"] in ("confirmed", "requeued", "queued", "ended"), confirmed
    assert status(pg, "orphan") != "running"

    goals = {g["goal_id"]: g["status"] for g in json.loads(pg.refine("goals", "--json"))}
    assert goals["quick"] == "completed" and goals["long"] == "cancelled"
    assert "clean" in pg.refine("check")
    pg.never_printed_a_password()


# Prints its environment (`env`), says so in <dir>/printed, then runs until <dir>/go.
PRINT_ENV = 'env; touch "$0/printed"; while [ ! -e "$0/go" ]; do sleep 0.05; done'


@pytest.mark.parametrize("forkserver", ["1", "0"])
def test_a_recipe_gets_no_journal_credentials_and_no_process_shows_the_password(
    pg: PgEnv, forkserver: str
) -> None:
    """Issue 21.2: a recipe's environment carried `$REFINE_JOURNAL` with the password, so a
    recipe that prints its environment put it in its log (the log pane, the browser). The
    node, its forkserver, its workers (and their claim helpers, forks of them) and the recipe
    show it in no argv either."""
    pg.env.update({"PGPASSWORD": PASSWORD, FORKSERVER_ENV: forkserver})
    node = pg.node()
    pg.goals.create(
        goal_id="env", title="env", node_id="n1", argv=["sh", "-c", PRINT_ENV, pg.marker]
    )
    printed = pg.dir / "printed"
    wait_until(printed.exists, timeout=60, what="the recipe printed its environment")
    tree = psutil.Process(node.pid).children(recursive=True)
    assert any("store.worker" in argv_of(p) for p in tree)  # the worker was looked at too
    assert not [p for p in [psutil.Process(node.pid), *tree] if PASSWORD in " ".join(argv_of(p))]
    (pg.dir / "go").touch()
    wait_until(lambda: status(pg, "env") == "completed", timeout=60, what="the recipe completed")

    log = pg.registry().log_path("env.r1", 1).read_text()
    assert f"REFINE_TEST_MARK={pg.marker}" in log  # the environment was printed
    assert PASSWORD not in log
    for hidden in ("REFINE_JOURNAL", "PGPASSWORD"):
        assert f"{hidden}=" not in log
    pg.never_printed_a_password()


def test_an_unreachable_server_exits_3_in_one_line_without_the_password(
    pg: PgEnv, postgres_server: PostgresServer
) -> None:
    if not postgres_server.owned:
        pytest.skip("an external server ($REFINE_TEST_POSTGRES_URL) is not stopped by tests")
    postgres_server.stop("immediate")
    try:
        for args in (("goals",), ("goal", "add", "--title", "x", "--", "true"), ("check",)):
            done = subprocess.run(
                [PY, "-m", "refine_tui.cli", *args], env=pg.env, capture_output=True, text=True,
                timeout=60,
            )  # fmt: skip
            assert done.returncode == 3, done.stderr
            assert done.stderr.startswith("refine: STORAGE: ") and done.stderr.count("\n") == 1
            assert PASSWORD not in done.stderr + done.stdout
    finally:
        postgres_server.start_on_same_port()
    assert pg.refine("goals").startswith("GOAL")


# --- server restarts (DESIGN §12) --------------------------------------------------------------


def test_a_server_restart_under_a_node_its_workers_and_a_dashboard(
    pg: PgEnv, postgres_server: PostgresServer
) -> None:
    if not postgres_server.owned:
        pytest.skip("an external server ($REFINE_TEST_POSTGRES_URL) is not stopped by tests")
    for i in range(3):
        pg.goal(f"w{i}", WAIT_FOR_GO)
    pg.node()
    for i in range(3):
        wait_until(lambda i=i: pg.running_record(f"w{i}"), what=f"w{i} running")
    asyncio.run(_restart_while_watching(pg, postgres_server))
    for i in range(3):
        _, run = pg.read(f"w{i}")
        assert [a.state for a in run.attempts] == ["completed"], run.attempts  # once each
    assert "clean" in pg.refine("check")
    pg.never_printed_a_password()


async def _restart_while_watching(pg: PgEnv, server: PostgresServer) -> None:
    app = RefineApp(journal=pg.url, node="n1")
    async with app.run_test(size=(120, 30)) as pilot:
        await _until(pilot, lambda: app.header_state.state == "live" and len(app.goal_rows) == 3)
        assert PASSWORD not in app.header_state.journal
        assert app.header_state.journal.startswith("postgresql://")
        states: list[str] = []
        done = threading.Event()

        def record_states() -> None:  # every header state, in order
            while not done.is_set():
                if not states or states[-1] != app.header_state.state:
                    states.append(app.header_state.state)
                done.wait(0.005)

        watcher = threading.Thread(target=record_states)
        watcher.start()
        try:
            # Down: commands fail typed; the workers finish meanwhile and wait to report.
            await asyncio.to_thread(server.stop, "immediate")
            (pg.dir / "go").touch()
            done_cli = await asyncio.to_thread(
                subprocess.run, [PY, "-m", "refine_tui.cli", "goals"], env=pg.env,
                capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            assert done_cli.returncode == 3 and "STORAGE" in done_cli.stderr
            await _until(pilot, lambda: app.header_state.state == "reconnecting")
            await asyncio.sleep(1.0)  # the workers' recipes have ended by now
            await asyncio.to_thread(server.start_on_same_port)
            # A restart while it is up, too (pg_ctl restart: a clean shutdown, same port).
            await _until(pilot, lambda: app.header_state.state == "live")
            await asyncio.to_thread(server.restart)
            await _until(
                pilot,
                lambda: (
                    app.header_state.state == "live"
                    and all(r.status == "completed" for r in app.goal_rows.values())
                ),
                timeout=60,
            )
        finally:
            done.set()
            watcher.join()
        assert "reconnecting" in states and states[-1] == "live", states
        with Journal.open(pg.url, read_only=True) as journal:
            assert app.header_state.last_sequence == journal.last_sequence()
            shown = {k: (r.status, r.round) for k, r in app.goal_rows.items()}
            stored = {g.goal_id: (g.status, g.round) for g in Goals(journal).list()}
        assert shown == stored


async def _until(pilot: Any, condition: Any, timeout: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() > deadline:
            pytest.fail("timed out waiting for the dashboard")
        await pilot.pause(0.05)
