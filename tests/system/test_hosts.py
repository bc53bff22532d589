"""The multi-host harness itself (tests/helpers/hosts.py, host_postgres.py): real namespaces.

Hosts talk over their own veth link and bridge, never through the root namespace; each host
has its own PID namespace (the same pid number names different processes on two hosts); a
PostgreSQL server in the server host is reached by TCP with a password; teardown leaves no
namespace, link or process, also after a failing test or a crashed run.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from store.journal.api import Journal
from tests.helpers.fleet import Fleet
from tests.helpers.host_postgres import PASSWORD, HostPostgres, ServerUnavailable
from tests.helpers.hosts import NETNS_DIR, Hosts, open_or_skip, required
from tests.helpers.waits import wait_until

TCP_PEER = """
import socket, sys
srv = socket.socket(); srv.bind((sys.argv[1], 7000)); srv.listen(); print("listening", flush=True)
conn, peer = srv.accept(); conn.sendall(peer[0].encode())
"""
PROBE = """
import psycopg, sys
with psycopg.connect(sys.argv[1]) as conn:
    print(conn.execute("select inet_client_addr()").fetchone()[0])
"""
LIST_PROCESSES = """
import os
for pid in filter(str.isdigit, os.listdir("/proc")):
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        print(pid, f.read().replace(b"\\0", b" ").decode())
"""
TCP_CLIENT = """
import socket, sys
wait = float(sys.argv[2]) if len(sys.argv) > 2 else 10
print(socket.create_connection((sys.argv[1], 7000), timeout=wait).recv(64).decode())
"""


@pytest.fixture
def hosts(tmp_path: Path) -> Iterator[Hosts]:
    opened = open_or_skip(Hosts(["server", "a", "b"], base_dir=tmp_path))
    try:
        yield opened
    finally:
        opened.close()


def sleeper_argv(marker: str) -> list[str]:
    return [sys.executable, "-c", "import time; time.sleep(300)", marker]


def root_links() -> set[str]:
    out = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    return {line.split(":")[1].strip().split("@")[0] for line in out.splitlines()}


def marked(marker: str) -> list[psutil.Process]:
    """Processes anywhere on the machine whose command line holds ``marker``."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        if marker in " ".join(p.info["cmdline"] or []) and p.pid != os.getpid():
            found.append(p)
    return found


def test_hosts_talk_over_their_own_link_not_through_the_root_namespace(hosts: Hosts) -> None:
    a, b = hosts["a"], hosts["b"]
    listener = b.start([sys.executable, "-c", TCP_PEER, b.addr], stdout=subprocess.PIPE)
    assert listener.popen is not None and listener.popen.stdout is not None
    assert listener.popen.stdout.readline().strip() == b"listening"
    before = int(a.run(["cat", "/sys/class/net/eth0/statistics/tx_packets"]).stdout)

    got = a.run([sys.executable, "-c", TCP_CLIENT, b.addr])

    assert got.stdout.strip() == a.addr, got.stderr  # b saw a's own address
    after = int(a.run(["cat", "/sys/class/net/eth0/statistics/tx_packets"]).stdout)
    assert after > before  # the packets went out of a's veth
    assert f"dev eth0 src {a.addr}" in a.run(["ip", "route", "get", b.addr]).stdout
    routes = a.run(["ip", "-o", "route"]).stdout
    assert "default" not in routes and hosts.subnet in routes  # nothing leaves the subnet
    assert a.run(["hostname"]).stdout.strip() == "a"
    root_addrs = subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True).stdout
    assert hosts.subnet_prefix + "." not in root_addrs  # the root namespace is not on it


def test_the_test_process_can_join_a_hosts_network_for_an_in_process_dashboard(
    hosts: Hosts,
) -> None:
    a, b = hosts["a"], hosts["b"]
    listener = b.start([sys.executable, "-c", TCP_PEER, b.addr], stdout=subprocess.PIPE)
    assert listener.popen is not None and listener.popen.stdout is not None
    assert listener.popen.stdout.readline().strip() == b"listening"
    own = os.readlink("/proc/thread-self/ns/net")
    seen: list[str] = []

    def connect() -> None:  # a thread started inside inherits the host's network
        with socket.create_connection((b.addr, 7000), timeout=10) as conn:
            seen.append(conn.recv(64).decode())

    with a.net_entered():
        assert os.readlink("/proc/thread-self/ns/net") != own
        thread = threading.Thread(target=connect)
        thread.start()
    thread.join(30)

    assert seen == [a.addr]
    assert os.readlink("/proc/thread-self/ns/net") == own  # the test thread is back home


def test_an_unplugged_host_is_cut_off_until_plugged_again(hosts: Hosts) -> None:
    a, b = hosts["a"], hosts["b"]
    reach = [sys.executable, "-c", TCP_CLIENT, b.addr]
    listener = b.start([sys.executable, "-c", TCP_PEER, b.addr], stdout=subprocess.PIPE)
    assert listener.popen is not None and listener.popen.stdout is not None
    assert listener.popen.stdout.readline().strip() == b"listening"

    b.unplug()
    cut = a.run([*reach, "2"])
    b.plug()
    back = a.run(reach)

    # the SYN is dropped (a timeout) or, when a's ARP gives up first, "No route to host"
    assert cut.returncode != 0 and ("timed out" in cut.stderr or "No route" in cut.stderr), cut
    assert back.stdout.strip() == a.addr, back.stderr


def test_each_host_has_its_own_pid_namespace(hosts: Hosts) -> None:
    a, b = hosts["a"], hosts["b"]

    # Each host counts its pids from 1 (small numbers on both); a chosen pid makes them equal.
    firsts = [host.start(sleeper_argv(f"--{host.name}-first")).ns_pid for host in (a, b)]
    assert max(firsts) < 100
    on_b = b.start_at_pid(sleeper_argv("--b-sleeper"), 4242)
    on_a = a.start_at_pid(sleeper_argv("--a-sleeper"), 4242)
    assert on_a.ns_pid == on_b.ns_pid == 4242 and on_a.root_pid != on_b.root_pid

    seen_from_a = a.run([sys.executable, "-c", LIST_PROCESSES]).stdout
    assert "--a-sleeper" in seen_from_a and "--b-sleeper" not in seen_from_a
    assert f"{on_b.root_pid} " not in seen_from_a

    # Signalling that pid number on a reaches a's process only.
    assert a.run(["sh", "-c", f"kill -TERM {on_a.ns_pid}"]).returncode == 0
    on_a.wait(30)
    assert on_b.running() and b.ns_pid_running(4242)
    assert not a.ns_pid_running(on_a.ns_pid)


def test_teardown_leaves_no_namespace_link_or_process_even_when_the_test_fails(
    tmp_path: Path,
) -> None:
    links_before = root_links()
    hosts = Hosts(["a", "b"], base_dir=tmp_path)
    with pytest.raises(RuntimeError, match="the test failed"), open_or_skip(hosts):
        for host in hosts:
            host.start(sleeper_argv("--teardown-marker"))
            # an orphan (reparented to the host's init) in a session and group of its own
            orphan = ["sh", "-c", 'setsid "$@" >/dev/null 2>&1 & exit 0', "sh"]
            host.run([*orphan, *sleeper_argv("--teardown-marker")], check=True)
        wait_until(lambda: len(marked("--teardown-marker")) >= 4, 30, "the sleepers")
        raise RuntimeError("the test failed")

    assert not [n for n in hosts.namespaces if (NETNS_DIR / n).exists()]
    wait_until(lambda: not marked("--teardown-marker"), 30, "every host process to be gone")
    assert root_links() == links_before


def test_namespaces_left_by_a_crashed_run_are_removed(tmp_path: Path) -> None:
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead_pid = int(gone.stdout)
    assert not psutil.pid_exists(dead_pid)
    stale = f"rfx{dead_pid}x0-a"
    if os.geteuid() != 0:
        pytest.fail("needs root") if required() else pytest.skip("needs root")
    subprocess.run(["ip", "netns", "add", stale], check=True)
    leftover = subprocess.Popen(["ip", "netns", "exec", stale, *sleeper_argv("--stale-marker")])
    try:
        # `ip netns exec` enters the namespace, then execs: the marker shows once it is inside.
        wait_until(lambda: bool(marked("--stale-marker")), 30, "the leftover process")
        with open_or_skip(Hosts(["a"], base_dir=tmp_path)):
            assert not (NETNS_DIR / stale).exists()
        assert leftover.wait(30) == -9
    finally:
        leftover.kill()
        subprocess.run(["ip", "netns", "del", stale], capture_output=True)


def test_postgres_in_the_server_host_is_reached_by_password_from_both_nodes(hosts: Hosts) -> None:
    try:
        pg = HostPostgres.start_in(hosts["server"], allow=hosts.subnet)
    except ServerUnavailable as exc:
        pytest.fail(str(exc)) if required() else pytest.skip(str(exc))
    try:
        url = pg.client_url(pg.create_database())  # made from the test process, in-namespace
        assert PASSWORD not in url and hosts["server"].addr in url
        probe = [sys.executable, "-c", PROBE, url]
        outputs = []
        for name in ("a", "b"):
            got = hosts[name].run(probe, env=pg.client_env)
            outputs.append(got.stdout + got.stderr)
            assert got.stdout.strip() == hosts[name].addr, got.stderr
        refused = hosts["a"].run(probe, env={"PGPASSWORD": "wrong"})
        assert refused.returncode != 0 and "password authentication failed" in refused.stderr
        outputs.append(refused.stderr)

        pg.restart()  # pg_ctl restart
        assert hosts["b"].run(probe, env=pg.client_env).stdout.strip() == hosts["b"].addr
        pg.stop("immediate")
        down = hosts["a"].run(probe, env=pg.client_env)
        assert down.returncode != 0 and "refused" in down.stderr
        pg.start_on_same_port()
        assert hosts["a"].run(probe, env=pg.client_env).stdout.strip() == hosts["a"].addr
        assert not any(PASSWORD in text for text in outputs)
    finally:
        pg.destroy()


# --- refine on the hosts ------------------------------------------------------------------------

RECIPE = ["sh", "-c", 'echo "ran on $(hostname) as pid $$"']


def run_two_nodes(fleet: Fleet) -> dict[str, dict[str, object]]:
    """Init, a goal on each node host, both nodes running until both goals complete."""
    fleet.refine("a", "init")
    for name in ("a", "b"):  # each goal is added on its own host: the node is its hostname
        fleet.refine(
            name, "goal", "add", "--title", f"on {name}", "--id", f"g{name}", "--", *RECIPE
        )
    for name in ("a", "b"):
        fleet.start_node(name, "--capacity", "2")
    try:
        fleet.wait_for(
            lambda: {g["status"] for g in fleet.goals("b").values()} == {"completed"},
            "both goals to complete",
        )
    finally:
        fleet.stop_nodes()
    assert fleet.refine("b", "check").returncode == 0
    return fleet.goals("a")


def test_nodes_on_two_hosts_share_a_sqlite_journal_each_running_its_own_goal(
    hosts: Hosts,
) -> None:
    fleet = Fleet(hosts, str(hosts.base_dir / "journal.db"))

    goals = run_two_nodes(fleet)

    assert {g: goals[g]["node_id"] for g in goals} == {"ga": "a", "gb": "b"}
    with Journal.open(hosts.base_dir / "journal.db", read_only=True) as journal:
        journal_id = str(journal.journal_id)
    for name in ("a", "b"):
        log = hosts.base_dir / "nodes" / name / journal_id / "logs" / f"g{name}.r1.1.log"
        assert log.read_text().startswith(f"ran on {name} as pid ")
    assert not [p for h in hosts for p in h.processes()]  # workers ended with their goals


@pytest.fixture
def pg(hosts: Hosts) -> Iterator[HostPostgres]:
    try:
        server = HostPostgres.start_in(hosts["server"], allow=hosts.subnet)
    except ServerUnavailable as exc:
        pytest.fail(str(exc)) if required() else pytest.skip(str(exc))
    try:
        yield server
    finally:
        server.destroy()


def test_nodes_on_two_hosts_complete_goals_on_one_postgresql_journal(
    hosts: Hosts, pg: HostPostgres
) -> None:
    fleet = Fleet(hosts, pg.client_url(pg.create_database()), pg.client_env)

    goals = run_two_nodes(fleet)

    assert {g: goals[g]["node_id"] for g in goals} == {"ga": "a", "gb": "b"}
    for host in (hosts["a"], hosts["b"]):  # each node's files stay on its own host
        logs = list((host.state_home / "refine").glob(f"*/{host.name}/logs/g{host.name}.r1.1.log"))
        assert len(logs) == 1 and logs[0].read_text().startswith(f"ran on {host.name} as pid ")
    assert not (hosts.base_dir / "nodes").exists()
    assert not [p for h in hosts if h.name != "server" for p in h.processes()]
    assert not any(PASSWORD in text for text in fleet.outputs)


def test_two_hosts_open_one_postgresql_journal_by_url_and_password(
    hosts: Hosts, pg: HostPostgres
) -> None:
    fleet = Fleet(hosts, pg.client_url(pg.create_database()), pg.client_env)

    for name in ("a", "b"):  # the same journal, from both hosts
        assert fleet.refine_json(name, "init")["journal"] == fleet.journal
    no_password = fleet.refine("b", "init", check=False, env={"PGPASSWORD": ""})
    assert no_password.returncode == 3 and pg.host.addr in no_password.stderr
    assert not any(PASSWORD in text for text in fleet.outputs)
