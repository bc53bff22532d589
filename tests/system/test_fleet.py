"""A fleet on one PostgreSQL server at its limit (issue 22 item 1, DESIGN §14).

Five real nodes × twenty running attempts on a server with ``max_connections = 30``: without
a bound (one connection per worker, as before) a quarter of them would lock everyone out. Each
node and its workers hold at most five connections together (sampled from ``pg_stat_activity``
every 20 ms while launching and while running); all 100 attempts run; the operator's
``refine goals`` and ``refine cancel`` work throughout. ``python -m bench.fleet`` is the full
fleet (10 × 50 on a default server) with its figures.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import own_server
from tests.helpers.pg_activity import ConnectionSampler
from tests.helpers.pg_env import PgEnv
from tests.helpers.postgres_server import PostgresServer
from tests.helpers.waits import wait_until

pytestmark = pytest.mark.postgres
NODES, PER_NODE, SERVER_LIMIT, NODE_LIMIT = 5, 20, 30, 5
OPERATOR = "op"  # the operator's commands run as a node of their own: no local processes


@pytest.fixture(scope="module")
def fleet_server() -> Iterator[PostgresServer]:
    with own_server(max_connections=SERVER_LIMIT) as server:
        yield server


class FleetEnv(PgEnv):
    def start(self, node_id: str, *args: str) -> subprocess.Popen[bytes]:
        log = open(self.dir / f"node-{node_id}.out", "ab")  # noqa: SIM115
        argv = [sys.executable, "-m", "refine_tui.cli", "--node", node_id, "--state-dir",
                str(self.state_dir(node_id)), "node", *args]  # fmt: skip
        proc = subprocess.Popen(argv, env=self.env, start_new_session=True, stdout=log, stderr=log)
        log.close()
        self.started.append(proc)
        return proc

    def wait_connected(self, sampler: ConnectionSampler, nodes: list[str], what: str) -> None:
        """Until each node holds its two idle connections (its journal and its LISTEN); a slow
        start is not the bound under test, the peak is. On a timeout, says what was seen."""
        try:
            wait_until(
                lambda: sampler.now() == {n: 2 for n in nodes}, timeout=240, step=0.2, what=what
            )
        except AssertionError as exc:
            logs = {p.name: p.read_text(errors="replace")[-1500:] for p in self.dir.glob("*.out")}
            exits = [proc.poll() for proc in self.started]
            seen = dict(sampler.now())
            raise AssertionError(f"{exc}: saw {seen}, exits {exits}, {logs}") from None

    def statuses(self) -> dict[str, str]:
        """The operator's ``refine goals --json`` (it must work at every moment)."""
        return {g["goal_id"]: g["status"] for g in json.loads(self.refine("goals", "--json"))}


@pytest.fixture
def fleet(fleet_server: PostgresServer, tmp_path: Path) -> Iterator[FleetEnv]:
    url = fleet_server.create_database()
    env = FleetEnv(url, tmp_path)
    env.env.pop("REFINE_MAX_CONNECTIONS", None)  # the default limit is the one tested
    try:
        yield env
    finally:
        env.cleanup()
        fleet_server.drop_database(url)


def test_five_nodes_of_twenty_attempts_hold_at_most_five_connections_each(
    fleet: FleetEnv,
) -> None:
    nodes = [f"n{k}" for k in range(1, NODES + 1)]
    sleep = ["sleep", "600"]  # the operator, or the test's end, stops them
    with ConnectionSampler(fleet.url) as sampler:
        for node in nodes:
            fleet.start(node, "--capacity", str(PER_NODE))
        fleet.wait_connected(sampler, nodes, "every node connected")
        # One goal per node to cancel while the fleet launches, then the fleet's work.
        for node in nodes:
            fleet.goals.create(goal_id=f"x-{node}", title="extra", node_id=node, argv=sleep)
        work = [f"{node}-{i}" for node in nodes for i in range(PER_NODE)]
        for goal_id in work:
            fleet.goals.create(goal_id=goal_id, title=goal_id, node_id=goal_id[:2], argv=sleep)
        for node in nodes:
            fleet.refine("cancel", f"x-{node}", "--reason", "not needed", node=OPERATOR)

        def all_running() -> bool:
            statuses = fleet.statuses()  # refine goals, all along the launch
            return all(statuses[g] == "running" for g in work)

        wait_until(all_running, timeout=300, step=0.5, what="all 100 attempts running")
        statuses = fleet.statuses()
        assert all(statuses[f"x-{node}"] == "cancelled" for node in nodes)

        # Running: the operator cancels one attempt per node; each node's worker (or node)
        # ends its recipe and records the cancellation.
        for node in nodes:
            fleet.refine("cancel", f"{node}-0", "--reason", "enough", node=OPERATOR)
        wait_until(
            lambda: all(fleet.read(f"{n}-0")[1].status == "cancelled" for n in nodes),
            timeout=120,
            what="the cancelled attempts ended",
        )
        fleet.wait_connected(sampler, nodes, "idle workers hold none")
        statuses = fleet.statuses()
    assert not sampler.errors
    assert sampler.samples > 100
    assert set(sampler.peak_by_node) == set(nodes)
    over = {n: sampler.peak_rows[n] for n, k in sampler.peak_by_node.items() if k > NODE_LIMIT}
    assert max(sampler.peak_by_node.values()) <= NODE_LIMIT, (sampler.peak_by_node, over)
    # Everyone else: this test's own journal handle, one operator command, the sampler.
    assert sampler.peak_total <= NODES * NODE_LIMIT + 2, sampler.peak_total
    assert sum(s == "running" for s in statuses.values()) == NODES * (PER_NODE - 1)
    assert "clean" in fleet.refine("check", node=OPERATOR)
    fleet.never_printed_a_password()
