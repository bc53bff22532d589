"""Several machines (issue 12, DESIGN §12): real PostgreSQL in a server host, real nodes and
workers on hosts a and b, each in its own network and PID namespace (tests/helpers/hosts.py).

The dashboard is a Pilot RefineApp in this process, its threads inside host a's network
(``net_entered``), as node a. Every command runs with ``refine`` inside a host; every byte of
traffic stays on the hosts' private subnet. One set of hosts and one server serve the module;
each test gets a fresh database and leaves no process on a or b. The password never appears in
any output.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import sys
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from refine_tui.app import RefineApp
from refine_tui.textual_private import notifications
from store.journal.api import Journal
from store.model.goal import PROCESS_GONE_METHOD
from store.model.goals import Goal, Goals
from store.model.run import Run
from tests.helpers.fleet import Fleet
from tests.helpers.host_postgres import PASSWORD, HostPostgres, ServerUnavailable
from tests.helpers.hosts import Host, HostProcess, Hosts, open_or_skip, required
from tests.helpers.soak_recipes import _DECOY, recipe_argv
from tests.helpers.soak_run import KINDS
from tests.helpers.waits import until, wait_until

pytestmark = pytest.mark.postgres
PY = sys.executable
# argv[1]: the goal's own folder (shared filesystem): the recipe finishes once <dir>/go exists.
WAIT_FOR_GO = (
    "import os, sys, time\n"
    "while not os.path.exists(os.path.join(sys.argv[1], 'go')):\n"
    "    time.sleep(0.05)\n"
)
HANG = "import time; time.sleep(600)"
RUN_COUNTED = "import os, sys\nopen(os.path.join(sys.argv[1], 'ran'), 'a').write('ran\\n')"
# A journal URL's own lost-peer settings (store.journal.postgres.LOST_PEER: 15 s idle, 4 probes
# 5 s apart, 15 s unacknowledged): a lost peer is an error on both ends within about 3 s. For
# the tests whose claim is what happens after that, not how long it takes by default.
QUICK_LOST_PEER = "keepalives_idle=2&keepalives_interval=1&keepalives_count=2&tcp_user_timeout=3000"
SIZE = (140, 30)


class Cluster:
    """The module's hosts and server."""

    def __init__(self, hosts: Hosts, pg: HostPostgres) -> None:
        self.hosts, self.pg = hosts, pg


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    hosts = open_or_skip(Hosts(["server", "a", "b"], base_dir=tmp_path_factory.mktemp("hosts")))
    try:
        try:
            pg = HostPostgres.start_in(hosts["server"], allow=hosts.subnet)
        except ServerUnavailable as exc:
            pytest.fail(str(exc)) if required() else pytest.skip(str(exc))
        try:
            yield Cluster(hosts, pg)
        finally:
            pg.destroy()
    finally:
        hosts.close()


class World:
    """One test's journal (a fresh database), its fleet, and what it starts on a and b."""

    def __init__(self, cluster: Cluster, tmp_path: Path) -> None:
        self.hosts, self.pg, self.dir = cluster.hosts, cluster.pg, tmp_path
        self.url = self.pg.client_url(self.pg.create_database())
        self.fleet = Fleet(self.hosts, self.url, self.pg.client_env)
        self.fleet.refine("a", "init")
        self.decoys: list[tuple[HostProcess, Path]] = []

    @property
    def a(self) -> Host:
        return self.hosts["a"]

    @property
    def b(self) -> Host:
        return self.hosts["b"]

    def add(self, host: str, goal_id: str, code: str, *options: str) -> Path:
        """A goal of node ``host`` (added there: its node is its hostname); its folder."""
        folder = self.dir / goal_id
        folder.mkdir()
        self.fleet.refine(
            host, "goal", "add", "--title", f"{goal_id} on {host}", "--id", goal_id, *options,
            "--", PY, "-c", code, str(folder),
        )  # fmt: skip
        return folder

    def recipe_pid(self, host: Host, goal_id: str) -> int | None:
        """The ns pid of ``goal_id``'s recipe in ``host`` (its argv names the goal's folder)."""
        folder = str(self.dir / goal_id)
        for p in host.processes():
            if folder in p.cmdline and "-c" in p.cmdline and p.status != "zombie":
                return p.ns_pid
        return None

    def running(self, host: Host, goal_id: str) -> int:
        """Wait for ``goal_id``'s recipe to run in ``host``; its ns pid there."""
        pid = wait_until(lambda: self.recipe_pid(host, goal_id), 60, f"{goal_id} to run")
        assert pid is not None
        return pid

    def record(self, goal_id: str) -> Path | None:
        """The process record file of ``goal_id``'s first attempt on node b (on b's disk)."""
        return next(self.b.state_home.glob(f"refine/*/b/processes/{goal_id}.r1.1.json"), None)

    def decoy_at(self, host: Host, ns_pid: int) -> HostProcess:
        """A process at exactly ``ns_pid`` in ``host`` that logs every signal it receives."""
        log = self.dir / f"decoy-{host.name}-{ns_pid}.log"
        proc = host.start_at_pid([PY, "-c", _DECOY, str(log)], ns_pid)
        self.decoys.append((proc, log))
        return proc

    def decoys_untouched(self) -> bool:
        return all(p.running() and not _read(log) for p, log in self.decoys)

    @contextlib.contextmanager
    def journal(self) -> Iterator[Journal]:
        """The journal, read from inside host a's network."""
        with self.a.net_entered(), Journal.open(self.url, read_only=True) as journal:
            yield journal

    def run_of(self, goal_id: str) -> Run:
        with self.journal() as journal:
            goals = Goals(journal)
            goal = goals.read(goal_id)
            assert goal is not None
            run = goals.current_run(goal)
            assert run is not None
            return run

    def status(self, goal_id: str) -> str:
        return str(self.fleet.goals("a")[goal_id]["status"])

    def lose_peers_quickly(self) -> None:
        """Every connection made from here on, the nodes' and the dashboard's, notices a lost
        peer within about 3 s (``QUICK_LOST_PEER``) instead of about half a minute."""
        assert not self.fleet.nodes, "before any node starts"
        self.url = f"{self.url}?{QUICK_LOST_PEER}"
        self.fleet = Fleet(self.hosts, self.url, self.pg.client_env)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.fleet.stop_nodes()
        for host in (self.a, self.b):
            host.kill_all()
            host.started.clear()
        with contextlib.suppress(Exception):
            self.pg.drop_database(self.url)

    def never_printed_a_password(self) -> None:
        texts = self.fleet.outputs + [self.fleet.node_output(h) for h in ("a", "b")]
        texts += [p.read_text(errors="replace") for p in self.hosts.base_dir.rglob("*.log")]
        assert not [t for t in texts if PASSWORD in t]


def cleaned_up_by_b(attempt: Any) -> bool:
    """The attempt's end was recorded on b: by its node's scheduler or by its own worker."""
    by = str((attempt.cleanup or {}).get("confirmed_by", ""))
    return by == "scheduler@b" or by.startswith("b/")


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


@pytest.fixture(name="w")
def world(cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    # The in-process dashboard is node a: host a's state dir, the password by environment.
    monkeypatch.setenv("PGPASSWORD", PASSWORD)
    monkeypatch.setenv("XDG_STATE_HOME", str(cluster.hosts["a"].state_home))
    for name in ("REFINE_JOURNAL", "REFINE_STATE_DIR", "REFINE_NODE"):
        monkeypatch.delenv(name, raising=False)
    w = World(cluster, tmp_path)
    try:
        yield w
    finally:
        w.close()


def dashboard(w: World, body: Callable[[RefineApp, Any], Any], node: str = "a") -> None:
    """Run ``body(app, pilot)`` on a dashboard of ``node``, inside that host's network and with
    its state dir (its process records)."""
    host = w.hosts[node]
    os.environ["XDG_STATE_HOME"] = str(host.state_home)  # the fixture's monkeypatch restores it

    async def main() -> None:
        app = RefineApp(journal=w.url, node=node, operator="dana")
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.header_state.state == "live", timeout=30)
            assert PASSWORD not in app.header_state.journal
            await body(app, pilot)

    with host.net_entered():
        asyncio.run(main())


async def select(pilot: Any, goal_id: str) -> None:
    from refine_tui.widgets.keyed_table import KeyedTable

    pilot.app.query_one("#goals", KeyedTable).select(goal_id)
    await pilot.pause()
    assert pilot.app.selected_goal().goal_id == goal_id


def notes(app: RefineApp) -> list[str]:
    return [n.message for n in notifications(app)]


async def in_thread(call: Callable[..., Any], *args: Any) -> Any:
    return await asyncio.to_thread(call, *args)


# --- 1. both nodes, one dashboard --------------------------------------------------------------


def test_goals_on_both_nodes_complete_and_the_dashboard_shows_both_live(w: World) -> None:
    folders = {name: w.add(name, f"g{name}", WAIT_FOR_GO) for name in ("a", "b")}
    seen: dict[str, list[tuple[str, str]]] = {"ga": [], "gb": []}

    def note_rows(app: RefineApp) -> bool:
        for goal_id, history in seen.items():
            row = app.goal_rows.get(goal_id)
            if row is not None and (not history or history[-1] != (row.status, row.node_id)):
                history.append((row.status, row.node_id))
        return True

    async def body(app: RefineApp, pilot: Any) -> None:
        await until(pilot, lambda: set(app.goal_rows) == {"ga", "gb"}, timeout=30)
        for name in ("a", "b"):
            await in_thread(w.fleet.start_node, name, "--capacity", "2")

        async def watching(condition: Callable[[], bool]) -> None:
            await until(pilot, lambda: note_rows(app) and condition(), timeout=60)

        await watching(lambda: all(app.goal_rows[g].status == "running" for g in seen))
        for folder in folders.values():
            (folder / "go").touch()
        await watching(lambda: all(app.goal_rows[g].status == "completed" for g in seen))

    dashboard(w, body)
    # Each row went queued → running → completed live, its node column telling whose it is.
    for name in ("a", "b"):
        assert seen[f"g{name}"] == [("queued", name), ("running", name), ("completed", name)]
    goals = w.fleet.goals("b")
    assert {g: goals[g]["node_id"] for g in goals} == {"ga": "a", "gb": "b"}
    assert w.fleet.refine("b", "check").returncode == 0
    w.fleet.stop_nodes()
    assert not w.a.processes() and not w.b.processes()
    w.never_printed_a_password()


# --- 3. Stop from a of b's goal ----------------------------------------------------------------


def test_stop_from_a_of_bs_goal_is_refused_naming_b_and_signals_nothing(w: World) -> None:
    w.add("b", "gb", HANG)
    w.fleet.start_node("b", "--capacity", "2")
    w.fleet.wait_for(lambda: w.recipe_pid(w.b, "gb"), "b's recipe to run")
    pid = w.recipe_pid(w.b, "gb")
    assert pid is not None
    decoy = w.decoy_at(w.a, pid)  # a's process with the very pid number of b's recipe
    assert decoy.ns_pid == pid

    refused = w.fleet.refine("a", "stop", "gb", "--grace", "1", check=False)
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr.count("\n") == 1 and "node b" in refused.stderr, refused.stderr

    async def body(app: RefineApp, pilot: Any) -> None:
        await until(
            pilot, lambda: "gb" in app.goal_rows and app.goal_rows["gb"].status == "running"
        )
        await select(pilot, "gb")
        await pilot.press("s")
        await until(pilot, lambda: any("node b" in n for n in notes(app)))
        await pilot.pause(0.5)  # anything a Stop would have started has had time to act

    dashboard(w, body)
    assert w.b.ns_pid_running(pid) and w.recipe_pid(w.b, "gb") == pid  # b's recipe runs on
    assert w.status("gb") == "running" and len(w.run_of("gb").attempts) == 1
    assert decoy.running() and w.decoys_untouched()  # a's same-numbered process: no signal
    w.never_printed_a_password()


# --- 2. Cancel from the dashboard of b's goal --------------------------------------------------


def test_cancel_from_the_dashboard_of_bs_goal_is_cleaned_up_by_b(w: World) -> None:
    from refine_tui.screens.confirm import CancelModal

    w.add("b", "gb", HANG)
    w.fleet.start_node("b", "--capacity", "2")
    w.fleet.wait_for(lambda: w.recipe_pid(w.b, "gb"), "b's recipe to run")
    pid = w.recipe_pid(w.b, "gb")
    assert pid is not None

    async def body(app: RefineApp, pilot: Any) -> None:
        await until(
            pilot, lambda: "gb" in app.goal_rows and app.goal_rows["gb"].status == "running"
        )
        await select(pilot, "gb")
        await pilot.press("c")
        await until(pilot, lambda: isinstance(app.screen, CancelModal))
        await pilot.press(*"not needed", "enter")
        await until(pilot, lambda: app.goal_rows["gb"].status == "cancelled")
        # b's node stops its process and records the cancellation with its cleanup
        await until(pilot, lambda: app.goal_rows["gb"].worker == "", timeout=30)

    dashboard(w, body)
    w.fleet.wait_for(lambda: not w.b.ns_pid_running(pid), "b's recipe gone in b's namespace")
    run = w.run_of("gb")
    assert run.status == "cancelled" and run.cancel_reason == "not needed"
    (attempt,) = run.attempts
    cleanup = attempt.cleanup or {}
    assert cleanup.get("confirmed_by", "").endswith("@b"), cleanup  # b's node cleaned up
    assert "cancel cleanup by node b" in cleanup.get("method", ""), cleanup
    shown = w.fleet.refine("a", "show", "gb").stdout
    assert "cancel cleanup by node b" in shown, shown
    w.never_printed_a_password()


# --- 5. the server restarts mid-run ------------------------------------------------------------


def test_a_server_restart_mid_run_under_two_nodes_and_a_dashboard(w: World) -> None:
    folders = {g: w.add(g[-1], g, WAIT_FOR_GO) for g in ("w1a", "w2a", "w1b", "w2b")}
    go = [folder / "go" for folder in folders.values()]
    nodes = {name: w.fleet.start_node(name, "--capacity", "2") for name in ("a", "b")}
    for goal_id in folders:
        w.running(w.hosts[goal_id[-1]], goal_id)
    workers_before = {g: w.run_of(g).attempts[0].worker for g in folders}
    down = False

    def outage_commands() -> None:
        for name, args in (("a", ("goals",)), ("b", ("goal", "add", "--title", "x", "--", "true"))):
            done = w.fleet.refine(name, *args, check=False)
            assert done.returncode == 3 and done.stdout == "", done.stderr
            assert done.stderr.startswith("refine: STORAGE: ") and done.stderr.count("\n") == 1

    async def body(app: RefineApp, pilot: Any) -> None:
        nonlocal down
        await until(pilot, lambda: len(app.goal_rows) == 4)
        states: list[str] = []

        async def watching(condition: Callable[[], bool], timeout: float = 60) -> None:
            def seen() -> bool:
                if not states or states[-1] != app.header_state.state:
                    states.append(app.header_state.state)
                return condition()

            await until(pilot, seen, timeout=timeout)

        down = True
        await in_thread(w.pg.stop, "immediate")
        await in_thread(outage_commands)
        for path in go:  # the recipes end while the server is down; reports wait for it
            path.touch()
        await watching(lambda: app.header_state.state == "reconnecting")
        await pilot.pause(1.0)
        await in_thread(w.pg.start_on_same_port)
        down = False
        await watching(lambda: app.header_state.state == "live")
        await in_thread(w.pg.restart)  # pg_ctl restart: a clean shutdown, the same port
        await watching(lambda: all(r.status == "completed" for r in app.goal_rows.values()))
        # scheduling resumed on both nodes: new goals run and complete
        for name in ("a", "b"):
            await in_thread(w.add, name, f"after{name}", "pass")
        await watching(
            lambda: (
                len(app.goal_rows) == 6
                and all(r.status == "completed" for r in app.goal_rows.values())
                and app.header_state.state == "live"
            )
        )
        assert "reconnecting" in states and states[-1] == "live", states
        with Journal.open(w.url, read_only=True) as journal:
            await until(pilot, lambda: app.header_state.last_sequence == journal.last_sequence())
            stored = {g.goal_id: (g.status, g.round, g.node_id) for g in Goals(journal).list()}
        assert {k: (r.status, r.round, r.node_id) for k, r in app.goal_rows.items()} == stored

    try:
        dashboard(w, body)
    finally:
        if down:
            w.pg.start_on_same_port()
    assert all(node.running() for node in nodes.values())  # the nodes rode it out
    for goal_id, worker in workers_before.items():  # each worker reported once, after the outage
        run = w.run_of(goal_id)
        assert [(a.state, a.worker) for a in run.attempts] == [("completed", worker)]
    assert "clean" in w.fleet.refine("b", "check").stdout
    w.fleet.stop_nodes()
    assert not w.a.processes() and not w.b.processes()
    w.never_printed_a_password()


def test_a_dashboard_cut_off_from_the_server_says_so_and_is_live_again_after(w: World) -> None:
    """b's cable is pulled while its dashboard reads: a read in flight gets no answer and no
    error from the network; it must not hang (it did for the kernel's ≈ 15 minutes of TCP
    retransmissions, the header saying live all along). The URL's own lost-peer settings make
    that read fail within ≈ 3 s: the claim is that it fails and recovers, not how long the
    defaults take (test_lost_peer_settings_default_on_both_ends... pins those)."""
    w.lose_peers_quickly()
    w.add("a", "before", "pass")

    async def body(app: RefineApp, pilot: Any) -> None:
        await until(pilot, lambda: "before" in app.goal_rows)
        w.b.unplug()
        try:  # the safety poll reads within 5 s; that read fails after TCP_USER_TIMEOUT
            await until(pilot, lambda: app.header_state.state == "reconnecting", timeout=90)
        finally:
            w.b.plug()
        await in_thread(w.add, "a", "after", "pass")
        await until(
            pilot,
            lambda: app.header_state.state == "live" and "after" in app.goal_rows,
            timeout=90,
        )

    dashboard(w, body, node="b")
    w.never_printed_a_password()


def test_b_cut_off_while_its_attempts_run_ends_each_goal_once_when_it_is_back(w: World) -> None:
    """While b's cable is out, a Cancel from a commits and one of b's recipes ends: b learns
    and reports once it is back; nothing runs twice, the cancelled recipe never outlives it."""
    go = w.add("b", "finishes", WAIT_FOR_GO) / "go"
    w.add("b", "cancelled", HANG)
    w.fleet.start_node("b", "--capacity", "2")
    pids = {g: w.running(w.b, g) for g in ("finishes", "cancelled")}
    w.b.unplug()
    try:
        w.fleet.refine("a", "cancel", "cancelled", "--reason", "while b was away")
        go.touch()
        w.fleet.wait_for(lambda: not w.b.ns_pid_running(pids["finishes"]), "the recipe's end")
        assert w.status("finishes") == "running"  # its report waits for the journal
        assert w.b.ns_pid_running(pids["cancelled"])  # b cannot know yet
    finally:
        w.b.plug()
    w.fleet.wait_for(
        lambda: w.status("finishes") == "completed" and w.run_of("cancelled").status == "cancelled",
        "b's report and b's cancel cleanup",
    )
    assert not w.b.ns_pid_running(pids["cancelled"])
    assert [a.state for a in w.run_of("finishes").attempts] == ["completed"]
    (cancelled,) = w.run_of("cancelled").attempts
    assert cleaned_up_by_b(cancelled), cancelled
    assert "clean" in w.fleet.refine("a", "check").stdout


def test_rows_locked_by_a_machine_switched_off_mid_command_are_free_again_within_a_minute(
    w: World,
) -> None:
    """b goes silent between a command's two round trips, its rows locked (its cable pulled,
    never plugged back: a machine switched off). The server ends that session and a's Cancel of
    the same goal goes through; it waited the server's default 2 hours of silence before."""
    from store.model.goals import goal_aggregate_id, run_aggregate_id

    w.add("b", "gb", HANG)
    locked = threading.Event()
    ended: list[BaseException] = []

    def switch_off(loaded: object) -> list[object]:
        w.b.unplug()
        locked.set()
        raise RuntimeError("machine b is off")

    def on_b() -> None:
        ids = {goal_aggregate_id("gb"): None, run_aggregate_id("gb.r1"): None}
        with w.b.net_entered(), Journal.open(w.url) as journal:
            try:
                journal.execute(command_id="c:b", payload={"op": "x"}, expected=ids,
                                decide=switch_off)  # type: ignore[arg-type]  # fmt: skip
            except BaseException as exc:  # b's side only has to end, one way or another
                ended.append(exc)

    thread = threading.Thread(target=on_b, daemon=True)
    thread.start()
    try:
        assert locked.wait(60), "b's command never locked its rows"
        codes = []
        deadline = time.monotonic() + 120
        while (code := w.fleet.refine("a", "cancel", "gb", "--reason", "b is off",
                                      check=False).returncode) != 0:  # fmt: skip
            codes.append(code)
            assert time.monotonic() < deadline, f"still locked after 120 s: {codes}"
        assert set(codes) <= {3}, codes  # STORAGE (locked) meanwhile, never anything else
        assert w.status("gb") == "cancelled"
    finally:
        w.b.plug()
        thread.join(60)
    assert ended and not thread.is_alive()


def test_a_claim_committed_while_b_was_cut_off_ends_unlaunched_and_the_goal_runs_once(
    w: World,
) -> None:
    """b's claim commits on the server just as b's cable is pulled: its answer never reaches
    b. Back on the network, b repeats the claim (a replay), never launches from it, and ends
    that attempt itself; the goal runs once, on its next attempt.

    b's first repeat finds the head row locked (as it is while a session b lost mid-command
    lives on at the server) and gives up on the lock: the worker repeats on, since only a
    repeat tells whether its claim committed. (It once exited there, and the attempt stayed
    `running` with nobody to end it: CI, 2026-12-02.)"""
    from store.node.worker import NOT_LAUNCHED

    w.lose_peers_quickly()  # the server ends b's silent session, b notices, within ≈ 3 s
    folder = w.add("b", "g", RUN_COUNTED)
    dbname = urllib.parse.urlsplit(w.url).path.lstrip("/")
    waiting = "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND client_addr = %s"
    alive = "SELECT pid FROM pg_stat_activity WHERE pid = %s"
    with w.pg.admin(dbname) as holder, w.pg.admin(dbname) as looking:
        holder.execute("BEGIN")  # the head row held: b's claim waits at its commit
        holder.execute("UPDATE refine.head SET sequence = sequence")
        w.fleet.start_node("b", "--capacity", "1")
        backend = wait_until(
            lambda: looking.execute(waiting, (w.b.addr,)).fetchone(), 30, "b's claim", step=0.01
        )  # it gives up after lock_timeout (5 s): what follows takes milliseconds
        w.b.unplug()
        try:
            holder.execute("COMMIT")  # the claim commits; its answer is lost
            w.fleet.wait_for(
                lambda: not looking.execute(alive, backend).fetchone(),
                "the server to end b's silent session",
            )
            assert [a.state for a in w.run_of("g").attempts] == ["running"]
            holder.execute("BEGIN")  # held again: b's first repeat waits out lock_timeout
            holder.execute("UPDATE refine.head SET sequence = sequence")
        finally:
            w.b.plug()
        try:
            w.fleet.wait_for(lambda: "is locked" in w.fleet.node_log("b"), "b's repeat locked out")
        finally:
            holder.execute("COMMIT")
    w.fleet.wait_for(lambda: w.status("g") == "completed", "the goal's next attempt")
    first, second = w.run_of("g").attempts
    cleanup = {"epoch": 1, "confirmed_by": first.worker, "method": NOT_LAUNCHED}
    assert (first.state, dict(first.cleanup or {})) == ("interrupted", cleanup)
    assert second.state == "completed"
    assert (folder / "ran").read_text() == "ran\n"  # never launched from the replayed claim
    assert "clean" in w.fleet.refine("a", "check").stdout


# --- 4. node b crashes and restarts ------------------------------------------------------------


def test_node_b_crashes_proof_reconciles_and_no_proof_is_confirmed_from_a(w: World) -> None:
    from textual.widgets import Static

    from refine_tui.screens.confirm import ConfirmModal

    for goal_id in ("proof", "noproof"):
        w.add("b", goal_id, HANG, "--max-attempts", "1")
    w.fleet.start_node("b", "--capacity", "2")
    records: dict[str, Path] = {}
    for goal_id in ("proof", "noproof"):
        w.running(w.b, goal_id)
        record = wait_until(partial(w.record, goal_id), 30, f"{goal_id}'s record")
        assert record is not None
        records[goal_id] = record

    w.b.kill_all()  # node b, its workers and their recipes: SIGKILL, no goodbye
    records["noproof"].unlink()  # this attempt is left without proof
    w.fleet.start_node("b", "--capacity", "2")
    w.fleet.wait_for(lambda: w.status("proof") == "exhausted", "proof reconciled")
    (proved,) = w.run_of("proof").attempts
    assert (proved.cleanup or {}).get("method") == PROCESS_GONE_METHOD, proved
    assert (proved.cleanup or {}).get("confirmed_by", "").endswith("@b"), proved

    async def on_b(app: RefineApp, pilot: Any) -> None:  # b's own dashboard sees no proof
        await until(pilot, lambda: "noproof" in app.goal_rows)
        await until(pilot, lambda: app.goal_rows["noproof"].needs_cleanup)
        assert "needs cleanup" in app.goal_rows["noproof"].note

    dashboard(w, on_b, node="b")
    assert w.status("noproof") == "running"  # the restarted node left it: no proof either way

    async def on_a(app: RefineApp, pilot: Any) -> None:  # Confirm cleanup from a
        await until(pilot, lambda: "noproof" in app.goal_rows)
        assert not app.goal_rows["noproof"].needs_cleanup  # a cannot tell: "on node b"
        await select(pilot, "noproof")
        await pilot.press("x")
        await until(pilot, lambda: isinstance(app.screen, ConfirmModal))
        body = str(app.screen.query_one("#dialog-body Static", Static).render())
        assert "it runs on node b: no process record can be checked from here" in body, body
        await pilot.press("y")
        await until(pilot, lambda: app.goal_rows["noproof"].status == "exhausted")

    dashboard(w, on_a)
    (confirmed,) = w.run_of("noproof").attempts
    assert (confirmed.cleanup or {}).get("confirmed_by") == "dana@a", confirmed
    assert "clean" in w.fleet.refine("a", "check").stdout
    w.fleet.stop_nodes()
    assert not w.b.processes()
    w.never_printed_a_password()


# --- 7. one home folder on both machines, one node id used twice --------------------------------


def test_a_home_shared_by_two_machines_never_ends_or_signals_the_other_machines_attempt(
    w: World,
) -> None:
    """Both machines mount one home (a network file system): a's operator and a node on a that
    is wrongly named b read b's process records. Their pids name processes of b, never of a."""
    from store.node.scheduler import Node

    w.add("b", "gb", HANG)
    w.fleet.start_node("b", "--capacity", "2")
    recipe = w.running(w.b, "gb")
    record = wait_until(partial(w.record, "gb"), 30, "b's process record")
    assert record is not None
    decoy = w.decoy_at(w.a, int(json.loads(record.read_text())["pid"]))  # a's same pid
    shared = {"XDG_STATE_HOME": str(w.b.state_home)}

    refused = w.fleet.refine("a", "--node", "b", "stop", "gb", "--grace", "1", env=shared,
                             check=False)  # fmt: skip
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "recorded on machine b: stop it there" in refused.stderr, refused.stderr
    os.environ.update(shared)  # the fixture's monkeypatch restores it
    with w.a.net_entered(), Node(w.url, "b") as node:  # its startup reconciliation
        assert node.reconcile() == [] and node.cleanup_cancelled() == []
    assert w.status("gb") == "running" and len(w.run_of("gb").attempts) == 1
    assert w.b.ns_pid_running(recipe) and decoy.running() and w.decoys_untouched()
    # b itself still acts on its records in the shared home: a Cancel from a is cleaned up by b
    w.fleet.refine("a", "cancel", "gb", "--reason", "done with it")
    w.fleet.wait_for(lambda: w.run_of("gb").status == "cancelled", "b's cancel cleanup")
    (attempt,) = w.run_of("gb").attempts
    assert cleaned_up_by_b(attempt), attempt
    assert not w.b.ns_pid_running(recipe) and w.decoys_untouched()


# --- 6. a short multi-host soak ----------------------------------------------------------------

# The soak runs until its campaign is done (HostSoak.campaign_done), at least this long.
SOAK_SECONDS = float(os.environ.get("REFINE_MULTIHOST_SOAK_SECONDS", "0"))
SOAK_MAX_S = 120.0  # an unfinished campaign gives up here (the test then fails on its counts)
SOAK_GOALS = 12
SOAK_SEED = int(os.environ.get("REFINE_SOAK_SEED", "20261129"))


class HostSoak:
    """The soak's operator mix (tests/helpers/soak_run.py) on two hosts: goals for a and b, Stop
    on the goal's node (and refused elsewhere), Cancel and Release from either, Confirm cleanup,
    SIGKILL of workers, of a node, or of a whole host's processes, and restarts."""

    def __init__(self, w: World, goals: Goals) -> None:
        self.w, self.goals = w, goals
        self.rng = random.Random(SOAK_SEED)
        self.down: dict[str, float] = {}
        self.created = 0
        self.counts: Counter[str] = Counter()

    def refine(self, host: str, *args: str) -> int:
        done = self.w.fleet.refine(host, *args, check=False)
        assert done.returncode in (0, 1), done.stderr  # done, or refused by the model
        assert "Traceback" not in done.stderr
        return done.returncode

    def pick(self, *statuses: str) -> Goal | None:
        found = self.goals.list(status=list(statuses))
        return self.rng.choice(found) if found else None

    def step(self) -> None:
        r, rng, other = self.rng.random(), self.rng, {"a": "b", "b": "a"}
        if r < 0.35 and self.created < 40:
            kind = rng.choices(list(KINDS), weights=list(KINDS.values()))[0]
            goal_id = f"s{self.created}-{kind}"
            self.created += 1
            self.goals.create(
                goal_id=goal_id, title=f"soak {kind}", node_id=rng.choice("ab"),
                argv=recipe_argv(kind, str(self.w.dir), self.w.dir / "pids" / goal_id),
                max_attempts=rng.randint(1, 3), redelivery=rng.choice(("safe", "operator")),
            )  # fmt: skip
        elif r < 0.50 and (goal := self.pick("running")):
            self.counts["stop"] += 1
            self.refine(goal.node_id, "stop", goal.goal_id, "--grace", "0.5")
        elif r < 0.55 and (goal := self.pick("running")):
            done = self.w.fleet.refine(other[goal.node_id], "stop", goal.goal_id, check=False)
            assert done.returncode == 1 and f"node {goal.node_id}" in done.stderr, done.stderr
            self.counts["stop refused"] += 1
        elif r < 0.63 and (goal := self.pick("queued", "held", "running")):
            self.counts["cancel"] += 1
            self.refine(
                rng.choice("ab"), "cancel", goal.goal_id, "--reason", "soak", "--grace", "0.5"
            )
        elif r < 0.70 and (goal := self.pick("held")):
            self.counts["release"] += 1
            self.refine(rng.choice("ab"), "release", goal.goal_id)
        elif r < 0.80:
            host = self.w.hosts[rng.choice("ab")]
            workers = [p for p in host.processes() if "store.worker" in p.cmdline]
            if workers:
                self.counts["kill worker"] += 1
                with contextlib.suppress(ProcessLookupError):
                    os.kill(rng.choice(workers).root_pid, signal.SIGKILL)
        elif r < 0.85:
            name = rng.choice("ab")
            if name not in self.down:
                self.counts["kill node"] += 1
                if rng.random() < 0.5:
                    self.crash(self.w.hosts[name])
                else:
                    self.w.fleet.nodes[name].kill()  # the node alone: its workers run on
                self.down[name] = time.monotonic() + rng.uniform(0.5, 3)
        self.restart()

    def campaign_done(self) -> bool:
        """SOAK_GOALS goals, a Stop on the goal's node and one refused elsewhere, a Cancel, and
        a SIGKILL of a worker and of a node (or a whole host)."""
        kinds = ("stop", "stop refused", "cancel", "kill worker", "kill node")
        return self.created >= SOAK_GOALS and all(self.counts[k] >= 1 for k in kinds)

    def crash(self, host: Host) -> None:
        """SIGKILL the node, its workers and their recipes (all but the decoys) on ``host``."""
        spared = {d.root_pid for d, _ in self.w.decoys}
        for p in host.processes():
            if p.root_pid not in spared:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.root_pid, signal.SIGKILL)

    def restart(self, force: bool = False) -> None:
        for name, when in list(self.down.items()):
            if force or time.monotonic() >= when:
                self.w.fleet.start_node(name, "--capacity", "3")
                del self.down[name]

    def unsettled(self) -> list[Goal]:
        return [
            g for g in self.goals.list()
            if (run := self.goals.current_run(g)) is not None and run.status == "running"
        ]  # fmt: skip

    def drain(self, timeout: float = 60) -> None:
        """Cancel what is left, restart the nodes, confirm cleanup of attempts left unproven."""
        self.restart(force=True)
        for goal in self.goals.list(status=["queued", "running"]):
            self.refine(goal.node_id, "cancel", goal.goal_id, "--reason", "drain", "--grace", "0.5")
        deadline = time.monotonic() + timeout
        cleanup_at = time.monotonic() + 2  # what settles by itself first gets the time to
        while (left := self.unsettled()) and time.monotonic() < deadline:
            time.sleep(0.2)
            if time.monotonic() < cleanup_at:
                continue
            cleanup_at = time.monotonic() + 2
            for goal in left:  # on its own node: refused while a record proves it alive
                run = self.goals.current_run(goal)
                if run is not None and run.running_attempt is not None:
                    epoch = str(run.running_attempt.epoch)
                    self.refine(goal.node_id, "cleanup", run.run_id, "--epoch", epoch)


def test_a_short_multihost_soak(w: World) -> None:
    decoys = [w.decoy_at(h, 31000 + i) for i, h in enumerate((w.a, w.b, w.a))]
    for name in ("a", "b"):
        w.fleet.start_node(name, "--capacity", "3")
    with w.a.net_entered(), Journal.open(w.url) as journal:
        soak = HostSoak(w, Goals(journal))
        started = time.monotonic()
        while (elapsed := time.monotonic() - started) < SOAK_SECONDS or (
            not soak.campaign_done() and elapsed < max(SOAK_MAX_S, 3 * SOAK_SECONDS)
        ):
            soak.step()
            time.sleep(0.1)
        soak.drain()
        unsettled = [g.goal_id for g in soak.unsettled()]
        statuses = Counter(g.status for g in soak.goals.list())
    print(f"\nmulti-host soak: {soak.created} goals, {dict(soak.counts)}, {dict(statuses)}")
    w.fleet.stop_nodes()
    assert unsettled == []
    assert set(statuses) <= {"completed", "exhausted", "cancelled", "held"}
    assert soak.campaign_done(), (soak.created, soak.counts)
    assert "clean" in w.fleet.refine("a", "check").stdout
    wait_until(
        lambda: all(p.root_pid in {d.root_pid for d in decoys} for h in (w.a, w.b)
                    for p in h.processes()),
        30, "nothing but the decoys left on a and b",
    )  # fmt: skip
    assert w.decoys_untouched()  # alive, and never received a signal
    w.never_printed_a_password()
