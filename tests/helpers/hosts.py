"""Test hosts of our own: network namespaces joined by veth pairs, each with its own PID namespace.

``Hosts(["server", "a", "b"], base_dir=tmp_path)`` (a context manager; needs root, as CI has)
makes one network namespace per host plus a "switch" namespace holding a bridge; each host has
``eth0`` (a veth whose peer is a bridge port) with ``10.213.X.(10+i)/24`` for a random X, ``lo``
up, and nothing else: no route leaves the subnet and the root namespace gets no link or address,
so all traffic stays on those addresses. Each host also has its own PID, mount (a private
``/proc`` and ``/dev/shm``), IPC and UTS (hostname = the host's name) namespaces, held open by
``host_init.py`` as PID 1: pids repeat across hosts and a process on one cannot see another's.

Commands join a host with ``nsenter`` (``Host.run``, ``Host.start``); ``Host.net_entered()``
moves the calling thread (and threads it starts) into a host's network, for an in-process
dashboard. The filesystem is shared, so each host gets its own ``HOME`` and ``XDG_STATE_HOME``
under ``base_dir/<host>/``.

Teardown kills every process of every host and deletes the namespaces (their veths go with
them), also when the test failed; names carry the creating process's pid, and namespaces left by
a crashed earlier run (owner gone) are removed when the next ``Hosts`` starts.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import random
import re
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import psutil

NETNS_DIR = Path("/run/netns")
PREFIX = "rfx"  # every namespace this helper makes is named rfx<owner pid>x<hex>-<host>
OWNED = re.compile(rf"^{PREFIX}(\d+)x[0-9a-f]+-")
INIT = Path(__file__).with_name("host_init.py")
CLONE_NEWNET = 0x40000000
SUBNET_BASE = "10.213"
ENTER_NETNS = ("ip", "netns", "exec")
NEW_HOST = ("unshare", "--pid", "--fork", "--mount-proc", "--ipc", "--uts", "--kill-child")


# Run inside a host: fork until the child gets the wanted pid (ns_last_pid is per PID namespace),
# then the child execs the command and this process exits (the host's init adopts the child).
AT_PID = """
import os, sys
want, argv = int(sys.argv[1]), sys.argv[2:]
for _ in range(100):
    with open("/proc/sys/kernel/ns_last_pid", "w") as f:
        f.write(str(want - 1))
    pid = os.fork()
    if pid == 0:
        if os.getpid() != want:
            os._exit(3)
        fd = os.open(os.devnull, os.O_RDWR)
        for std in (0, 1, 2):
            os.dup2(fd, std)
        os.execvp(argv[0], argv)
    if pid == want:
        sys.exit(0)
    os.waitpid(pid, 0)
sys.exit(f"pid {want} was not free")
"""


class HostsUnavailable(RuntimeError):
    """Namespaces cannot be made here (not root, no ip/unshare/nsenter, no kernel support)."""


def required() -> bool:
    """In CI (or with REFINE_REQUIRE_POSTGRES=1) a test that cannot make hosts fails: no skip."""
    return os.environ.get("REFINE_REQUIRE_POSTGRES") == "1" or bool(os.environ.get("CI"))


def open_or_skip(hosts: Hosts) -> Hosts:
    """Enter ``hosts`` for a test; when namespaces are unavailable skip, or fail where required."""
    import pytest

    try:
        return hosts.__enter__()
    except HostsUnavailable as exc:
        if required():
            pytest.fail(f"multi-host test needs network namespaces: {exc}")
        pytest.skip(f"multi-host test needs network namespaces: {exc}")


@dataclass(frozen=True)
class HostPid:
    """A process seen in a host: its pid in the root namespace and in the host's PID namespace."""

    root_pid: int
    ns_pid: int
    cmdline: tuple[str, ...]
    status: str


class HostProcess:
    """A long-lived process started in a host: the command itself, seen from the root namespace
    (``proc``), and the ``nsenter`` wrapper that reports its exit status (``popen``; None for
    a process started at a chosen pid, which the host's init reaps)."""

    def __init__(
        self,
        host: Host,
        proc: psutil.Process,
        argv: Sequence[str],
        popen: subprocess.Popen[Any] | None = None,
    ) -> None:
        self.host, self.proc, self.argv, self.popen = host, proc, tuple(argv), popen
        self.root_pid = proc.pid
        self.ns_pid = _ns_pid(self.root_pid)

    @property
    def returncode(self) -> int | None:
        """The command's exit status (negative: killed by that signal), None while it runs;
        without a wrapper, -1 once it has ended (its status went to the host's init)."""
        if self.popen is not None:
            return self.popen.poll()
        return None if self.running() else -1

    def running(self) -> bool:
        """Alive and not a zombie (checked by create time, so never a reused pid)."""
        try:
            return self.proc.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    def signal(self, sig: int) -> bool:
        """Signal the command (checked by create time, so never a reused pid); False if gone."""
        try:
            self.proc.send_signal(sig)
        except psutil.NoSuchProcess:
            return False
        return True

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        self.wait(30)

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM, then SIGKILL after ``timeout``; the exit status."""
        self.signal(signal.SIGTERM)
        try:
            return self.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return self.wait(30)

    def wait(self, timeout: float | None = None) -> int:
        if self.popen is not None:
            return self.popen.wait(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.running():
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(list(self.argv), timeout or 0)
            time.sleep(0.01)
        return -1


class Host:
    """One test host: its namespaces (held by an init process), address and private home."""

    def __init__(self, hosts: Hosts, name: str, index: int) -> None:
        self.hosts, self.name = hosts, name
        self.netns = f"{hosts.token}-{name}"
        self.addr = f"{hosts.subnet_prefix}.{10 + index}"
        self.port = f"p{index}"  # its veth peer, a port of the bridge in the switch namespace
        self.home = hosts.base_dir / name / "home"
        self.state_home = hosts.base_dir / name / "state"
        self.init: subprocess.Popen[str] | None = None
        self.init_pid = 0
        self.pidns = ""
        self.started: list[HostProcess] = []

    # --- running commands --------------------------------------------------------------------

    @property
    def env(self) -> dict[str, str]:
        """What this host adds to the environment of its commands."""
        return {"HOME": str(self.home), "XDG_STATE_HOME": str(self.state_home)}

    def command(
        self,
        argv: Sequence[str],
        *,
        user: str | None = None,
        cwd: str | os.PathLike[str] | None = None,
    ) -> list[str]:
        """``argv`` wrapped to run inside this host (as ``user`` when given)."""
        enter = [
            "nsenter",
            f"--target={self.init_pid}",
            "--net",
            "--pid",
            "--mount",
            "--ipc",
            "--uts",
            f"--wd={Path(cwd or os.getcwd()).absolute()}",
            "--",
        ]
        if user:
            enter += ["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups", "--"]
        return enter + list(argv)

    def _env(self, env: Mapping[str, str | None] | None) -> dict[str, str]:
        """The environment of a command: ours, this host's, then ``env`` (None unsets)."""
        merged: dict[str, str | None] = {**os.environ, **self.env, **(env or {})}
        return {name: value for name, value in merged.items() if value is not None}

    def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str | None] | None = None,
        input: str | None = None,
        timeout: float = 120,
        check: bool = False,
        user: str | None = None,
        cwd: str | os.PathLike[str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run a command in this host to completion; its text output is captured."""
        return subprocess.run(
            self.command(argv, user=user, cwd=cwd),
            env=self._env(env),
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=check,
        )

    def start(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str | None] | None = None,
        stdout: int | IO[Any] | None = subprocess.DEVNULL,
        stderr: int | IO[Any] | None = subprocess.STDOUT,
        user: str | None = None,
        cwd: str | os.PathLike[str] | None = None,
    ) -> HostProcess:
        """Start a long-lived command in this host; teardown kills it if the test does not."""
        popen = subprocess.Popen(
            self.command(argv, user=user, cwd=cwd),
            env=self._env(env),
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
        )
        try:
            proc = HostProcess(self, _child_of(popen), argv, popen)
        except BaseException:
            popen.kill()
            popen.wait()
            raise
        self.started.append(proc)
        return proc

    def start_at_pid(
        self,
        argv: Sequence[str],
        ns_pid: int,
        *,
        env: Mapping[str, str | None] | None = None,
        cwd: str | os.PathLike[str] | None = None,
    ) -> HostProcess:
        """Start ``argv`` in this host with exactly the pid ``ns_pid`` in the host's namespace
        (say, the pid of another host's process, to prove it is never signalled from here).
        Its output is discarded; the pid must be free in this host."""
        done = self.run(
            [sys.executable, "-c", AT_PID, str(ns_pid), *argv], env=env, cwd=cwd, timeout=30
        )
        if done.returncode != 0:
            raise RuntimeError(f"host {self.name}: cannot start at pid {ns_pid}: {done.stderr}")
        for p in self.processes():
            if p.ns_pid == ns_pid:
                proc = HostProcess(self, psutil.Process(p.root_pid), argv)
                self.started.append(proc)
                return proc
        raise RuntimeError(f"host {self.name}: the process at pid {ns_pid} ended at once")

    # --- looking at the host -----------------------------------------------------------------

    def processes(self) -> list[HostPid]:
        """Every process in this host's PID namespace but its init (zombies included)."""
        found = []
        for p in psutil.process_iter():
            with contextlib.suppress(psutil.Error, OSError, ValueError):
                if p.pid == self.init_pid or os.readlink(f"/proc/{p.pid}/ns/pid") != self.pidns:
                    continue
                found.append(HostPid(p.pid, _ns_pid(p.pid), tuple(p.cmdline()), p.status()))
        return found

    def ns_pid_running(self, ns_pid: int) -> bool:
        """Is there a live (not zombie) process with this pid in this host's PID namespace?"""
        return any(
            p.ns_pid == ns_pid and p.status != psutil.STATUS_ZOMBIE for p in self.processes()
        )

    def kill_all(self) -> None:
        """SIGKILL every process of the host but its init (a node and all its workers, say)."""
        for _ in range(50):
            left = self.processes()
            if not left:
                return
            for p in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.root_pid, signal.SIGKILL)
            time.sleep(0.05)
            _reap(self.started)
        raise RuntimeError(f"host {self.name}: processes survive SIGKILL: {self.processes()}")

    @contextlib.contextmanager
    def net_entered(self) -> Iterator[None]:
        """Put the calling thread in this host's network (threads it starts inherit it)."""
        libc = ctypes.CDLL(None, use_errno=True)
        with (
            open(f"/proc/{self.init_pid}/ns/net") as target,
            open("/proc/thread-self/ns/net") as own,
        ):
            _setns(libc, target.fileno())
            try:
                yield
            finally:
                _setns(libc, own.fileno())

    def unplug(self) -> None:
        """Pull the host's cable (its bridge port goes down): a network partition, not a crash."""
        _ip("-n", self.hosts.switch, "link", "set", self.port, "down")

    def plug(self) -> None:
        _ip("-n", self.hosts.switch, "link", "set", self.port, "up")
        # An address resolution that failed while unplugged would refuse the next connection
        # ("No route to host") until it times out: every host forgets it now.
        for host in self.hosts:
            _ip("-n", host.netns, "neigh", "flush", "all")

    # --- life --------------------------------------------------------------------------------

    def boot(self) -> None:
        """Start init in a fresh PID/mount/IPC/UTS namespace inside the host's network."""
        for d in (self.home, self.state_home):
            d.mkdir(parents=True, exist_ok=True)
        self.init = subprocess.Popen(
            [*ENTER_NETNS, self.netns, *NEW_HOST, sys.executable, str(INIT)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.init.stdout is not None
        if self.init.stdout.readline().strip() != "ready":
            self.init.kill()
            _, err = self.init.communicate(timeout=10)
            raise HostsUnavailable(f"host {self.name} did not start: {err.strip()[-300:]}")
        self.init_pid = _child_of(self.init).pid
        self.pidns = os.readlink(f"/proc/{self.init_pid}/ns/pid")
        for argv in (
            [sys.executable, "-c", f"import socket; socket.sethostname({self.name!r})"],
            ["mount", "-t", "tmpfs", "-o", "mode=1777", "tmpfs", "/dev/shm"],
        ):
            self.run(argv, check=True, timeout=30)

    def power_off(self) -> None:
        """End init: the kernel kills everything in the host's PID namespace."""
        if self.init_pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.init_pid, signal.SIGKILL)
        if self.init is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.init.wait(30)
        _reap(self.started)


class Hosts:
    """The set of test hosts, on one private /24 behind one bridge; see the module docstring."""

    def __init__(self, names: Sequence[str] = ("server", "a", "b"), *, base_dir: Path) -> None:
        if len(set(names)) != len(names) or not all(
            re.fullmatch(r"[a-z][a-z0-9]{0,7}", n) for n in names
        ):
            raise ValueError(f"host names must be distinct, short and lower case: {names}")
        self.token = f"{PREFIX}{os.getpid()}x{secrets.token_hex(3)}"
        self.subnet_prefix = f"{SUBNET_BASE}.{random.randint(1, 254)}"
        self.subnet = f"{self.subnet_prefix}.0/24"
        self.switch = f"{self.token}-sw"
        self.base_dir = Path(base_dir)
        self.hosts = {name: Host(self, name, i) for i, name in enumerate(names)}
        self.up = False

    def __getitem__(self, name: str) -> Host:
        return self.hosts[name]

    def __iter__(self) -> Iterator[Host]:
        return iter(self.hosts.values())

    @property
    def namespaces(self) -> list[str]:
        return [self.switch] + [h.netns for h in self]

    def __enter__(self) -> Hosts:
        if self.up:  # entered already (open_or_skip, then ``with``)
            return self
        if os.geteuid() != 0:
            raise HostsUnavailable("network namespaces need root (CI runs as root)")
        remove_stale()
        try:
            self._build()
        except BaseException as exc:
            self.close()
            if isinstance(exc, subprocess.CalledProcessError):
                raise HostsUnavailable(f"{' '.join(exc.cmd)}: {exc.stderr.strip()}") from None
            if isinstance(exc, FileNotFoundError):
                raise HostsUnavailable(f"missing tool: {exc.filename}") from None
            raise
        self.up = True
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _build(self) -> None:
        _ip("netns", "add", self.switch)
        _ip("-n", self.switch, "link", "set", "lo", "up")
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")
        for host in self:
            port = host.port
            _ip("netns", "add", host.netns)
            # Both ends are made directly in their namespaces: the root namespace never holds them.
            _ip(
                "link",
                "add",
                "eth0",
                "netns",
                host.netns,
                "type",
                "veth",
                "peer",
                "name",
                port,
                "netns",
                self.switch,
            )
            _ip("-n", self.switch, "link", "set", port, "master", "br0", "up")
            _ip("-n", host.netns, "link", "set", "lo", "up")
            _ip("-n", host.netns, "addr", "add", f"{host.addr}/24", "dev", "eth0")
            _ip("-n", host.netns, "link", "set", "eth0", "up")
            host.boot()

    def close(self) -> None:
        """Kill every process of every host, delete every namespace; raise if anything is left."""
        self.up = False
        for host in self:
            host.power_off()
        for name in self.namespaces:
            _delete_netns(name)
        left = [n for n in self.namespaces if (NETNS_DIR / n).exists()]
        if left:
            raise RuntimeError(f"namespaces left after teardown: {left}")


# --- helpers ----------------------------------------------------------------------------------


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


def _child_of(popen: subprocess.Popen[Any], timeout: float = 10) -> psutil.Process:
    """The one child of a wrapper that forks its command (``nsenter``, ``unshare --fork``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(psutil.NoSuchProcess):
            children = psutil.Process(popen.pid).children()
            if children:
                return children[0]
        if popen.poll() is not None:
            raise RuntimeError(
                f"{popen.args!r} exited with {popen.returncode} before its command ran"
            )
        time.sleep(0.005)
    raise RuntimeError(f"{popen.args!r}: no child after {timeout} s")


def _ns_pid(root_pid: int) -> int:
    """The pid a process has in its own (innermost) PID namespace."""
    for line in Path(f"/proc/{root_pid}/status").read_text().splitlines():
        if line.startswith("NSpid:"):
            return int(line.split()[-1])
    raise ValueError(f"no NSpid for {root_pid}")


def _setns(libc: ctypes.CDLL, fd: int) -> None:
    if libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def _reap(started: list[HostProcess]) -> None:
    for proc in started:
        if proc.popen is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.popen.wait(0.01 if proc.popen.poll() is None else 0)


def _netns_pids(name: str) -> list[int]:
    out = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True, timeout=30)
    return [int(p) for p in out.stdout.split()]


def _delete_netns(name: str) -> None:
    """SIGKILL whatever still runs in the namespace, then delete it (its links go with it)."""
    if not (NETNS_DIR / name).exists():
        return
    for _ in range(100):
        pids = _netns_pids(name)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
    subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)


def remove_stale() -> list[str]:
    """Delete namespaces this helper made in a process that no longer exists (a crashed run)."""
    removed = []
    names = sorted(p.name for p in NETNS_DIR.iterdir()) if NETNS_DIR.is_dir() else []
    for name in names:
        m = OWNED.match(name)
        if m and not psutil.pid_exists(int(m.group(1))):
            _delete_netns(name)
            removed.append(name)
    return removed
