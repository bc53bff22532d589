"""This machine's processes as a node's records name them: which machine (``this_host``), a
process's identity (pid and exact create time, never a zombie: ``same_process``), what it is
doing (``observe``: alive, CPU, memory) and the workers found by their argv.

Identity checks read ``/proc/<pid>/stat`` as psutil does (≈ 10 ms less than importing psutil);
psutil is imported by the functions that observe, and elsewhere than Linux.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from store.records import dataclass

if TYPE_CHECKING:
    import psutil

    from store.host.processes import ProcessRecord


@functools.cache
def this_host() -> str:
    """This machine, as records name it: ``<host name>/<machine id>`` (machines cloned from
    one image share a machine id, containers on one a host name; pids repeat across both)."""
    machine_id = ""
    for path in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        with contextlib.suppress(OSError):
            machine_id = Path(path).read_text(encoding="ascii", errors="replace").strip()
            break
    return f"{os.uname().nodename}/{machine_id}"  # gethostname() without importing socket


# Stopping and identity checks read /proc/<pid>/stat as psutil does (≈ 10 ms less for a stop
# than importing psutil, and no scan through psutil objects); elsewhere than Linux, psutil.
_PROC = Path("/proc/self/stat").exists()
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if _PROC else 100
_ZOMBIE = "Z"


def _stat(pid: int) -> tuple[str, int, int, float] | None:
    """``(state, ppid, process group, create time)`` of ``pid``, None when there is none.

    The create time is psutil's own: the same file, fields and arithmetic (``starttime`` ticks
    / ``SC_CLK_TCK`` + ``btime`` of /proc/stat, read now), so it equals to the bit what psutil
    reported when the record was written.
    """
    if not _PROC:
        return _psutil_stat(pid)
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = data[data.rfind(b")") + 2 :].split()  # after the name, which may hold ") "
    create_time = (float(fields[19]) / _CLOCK_TICKS) + _boot_time()
    return fields[0].decode("ascii"), int(fields[1]), int(fields[2]), create_time


def create_time(pid: int) -> float | None:
    """``pid``'s create time exactly as psutil gives it (see ``_stat``), None when there is no
    such process: the identity a record holds, without building a psutil object."""
    seen = _stat(pid)
    return None if seen is None else seen[3]


def _boot_time() -> float:
    with open("/proc/stat", "rb") as f:
        for line in f:
            if line.startswith(b"btime"):
                return float(line.strip().split()[1])
    raise RuntimeError("no btime line in /proc/stat")


def _psutil_stat(pid: int) -> tuple[str, int, int, float] | None:
    import psutil

    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            zombie = proc.status() == psutil.STATUS_ZOMBIE
            state = _ZOMBIE if zombie else "R"
            return state, proc.ppid(), os.getpgid(pid), proc.create_time()
    except (psutil.NoSuchProcess, ProcessLookupError):
        return None


def _pids() -> list[int]:
    if not _PROC:
        import psutil

        pids: list[int] = psutil.pids()
        return pids
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _process(rec: ProcessRecord) -> psutil.Process | None:
    """The live, non-zombie process the record names, or None (gone, zombie or pid reused)."""
    import psutil

    try:
        proc = psutil.Process(rec.pid)
        if proc.create_time() != rec.create_time:
            return None
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
    except psutil.NoSuchProcess:  # ZombieProcess is a NoSuchProcess too
        return None
    return proc


def same_process(rec: ProcessRecord) -> bool:
    """True when ``rec.pid`` is alive, not a zombie, with exactly the recorded create time."""
    return same_pid(rec.pid, rec.create_time)


def same_pid(pid: int, create_time: float) -> bool:
    """``same_process`` for a pid and create time not (yet) in a record."""
    seen = _stat(pid)
    return seen is not None and seen[3] == create_time and seen[0] != _ZOMBIE


@dataclass(frozen=True)
class ProcessObservation:
    """What the recorded process (with its descendants) is doing; None fields when not alive."""

    alive: bool
    cpu_percent: float | None
    rss_bytes: int | None
    age_s: float | None


_cpu_watch: dict[tuple[int, float], psutil.Process] = {}


def observe(rec: ProcessRecord) -> ProcessObservation:
    """Observe the process and its descendants (the recipe runs as the worker's child).

    CPU is the percentage of one core since the previous observation of the same processes
    (their lifetime average on the first one), so repeated calls never block.
    """
    import psutil

    proc = _process(rec)
    if proc is None:
        _cpu_watch.pop((rec.pid, rec.create_time), None)
        return ProcessObservation(alive=False, cpu_percent=None, rss_bytes=None, age_s=None)
    cpu = 0.0
    rss = 0
    for p in _family(proc):
        with contextlib.suppress(psutil.Error):
            cpu += _cpu_percent(p)
            rss += p.memory_info().rss
    return ProcessObservation(
        alive=True, cpu_percent=cpu, rss_bytes=rss, age_s=max(0.0, time.time() - rec.create_time)
    )


def _family(proc: psutil.Process) -> list[psutil.Process]:
    import psutil

    try:
        return [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return [proc]


def _cpu_percent(p: psutil.Process) -> float:

    key: tuple[int, float] = (p.pid, p.create_time())
    known = _cpu_watch.get(key)
    if known is not None:
        percent: float = known.cpu_percent(interval=None)
        return percent
    if len(_cpu_watch) >= 1024:  # forget processes that have gone
        for old_key, old in list(_cpu_watch.items()):
            if not old.is_running():
                del _cpu_watch[old_key]
    _cpu_watch[key] = p
    p.cpu_percent(interval=None)  # primes the next delta
    times = p.cpu_times()
    used: float = times.user + times.system
    age = max(time.time() - key[1], 1e-3)
    return 100.0 * used / age


def live_worker(worker: str) -> psutil.Process | None:
    """A live worker process started for ``worker`` (``<node>/<token>``), found by its argv.

    Records can be missing for a live worker: between its claim and its record, or when they
    were written under another folder. The token is random per claim, so a ``store.worker``
    process carrying it is that attempt's worker, wherever its record is.
    """
    _, sep, token = worker.rpartition("/")
    if not sep or not token:
        return None
    return next((proc for name, proc in _workers() if name == worker), None)


def live_workers() -> dict[str, int]:
    """Every live worker process on this machine: its worker name (``<node>/<token>``) → its
    pid, in one pass over the processes (a caller confirming many attempts looks once)."""
    return {name: proc.pid for name, proc in _workers()}


def _workers() -> Iterator[tuple[str, psutil.Process]]:
    """This machine's live ``store.worker`` processes, each with its worker name."""
    import psutil

    for proc in psutil.process_iter(["cmdline", "status"]):
        argv = proc.info["cmdline"] or []
        if proc.info["status"] == psutil.STATUS_ZOMBIE or "store.worker" not in argv:
            continue
        node, token = _option(argv, "--node"), _option(argv, "--token")
        if node and token:
            yield f"{node}/{token}", proc


def node_workers(journal: str, node: str) -> list[psutil.Process]:
    """The live ``store.worker`` processes of ``node`` on ``journal`` (its canonical location,
    as a node hands it by ``--journal`` or ``$REFINE_JOURNAL``), recorded or not yet."""
    import psutil

    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        argv = proc.info["cmdline"] or []
        if proc.info["status"] == psutil.STATUS_ZOMBIE or "store.worker" not in argv:
            continue
        if _option(argv, "--node") != node:
            continue
        with contextlib.suppress(psutil.Error):
            if (_option(argv, "--journal") or proc.environ().get("REFINE_JOURNAL")) == journal:
                found.append(proc)
    return found


def _option(argv: list[str], name: str) -> str | None:
    try:
        return argv[argv.index(name) + 1]
    except (ValueError, IndexError):
        return None
