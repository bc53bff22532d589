"""The node-local process registry: what a node runs, how to observe it, how to stop it safely.

Records live in the node's state dir (``nodes/<node>/<journal id>/`` beside a SQLite journal by
default; see ``store.journal.locations``) under ``processes/`` (one JSON file per attempt, written
atomically) with logs under ``logs/``. They are never authority: the journal decides who owns
work; a record only says which local process to look at or stop.

A pid alone does not identify a process (pids are reused), and psutil's create time has 1/100 s
resolution, so a process is "the recorded one" only when both the pid exists and its create
time equals exactly the value psutil reported when it was recorded — and it is not a zombie (an
unreaped child still "exists"). Nothing is ever signalled unless that holds.

A pid means something only on the machine that recorded it: a record names its machine
(``this_host``), and a registry never returns another machine's record (a state dir shared by
several machines, say a home folder on a network file system, with a node id used twice).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import os
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from store.errors import StateDirInUseError
from store.journal.locations import JournalLocation, Location, file_name
from store.records import dataclass

# psutil (≈ 10 ms to import) is imported by the functions that observe processes or find
# workers by their argv; identity checks and stopping read /proc (see _stat).
if TYPE_CHECKING:
    import signal

    import psutil

    from store.journal.api import Journal

POLL_S = 0.02  # how often stop_process looks whether the group has exited
STATE_DIR_OWNER = "journal-id"  # in a state dir: the id of the journal whose files it holds


@dataclass(frozen=True)
class ProcessRecord:
    """One local process working on one attempt (``run_id``/``epoch``) for ``worker``."""

    node_id: str
    pid: int
    create_time: float
    pgid: int
    run_id: str
    epoch: int
    worker: str
    argv: tuple[str, ...]
    log_path: str
    started_at: float
    journal_id: str | None = None  # the journal this attempt belongs to (None: an older record)
    host: str | None = None  # the machine that recorded it (this_host; None: an older record)

    def to_json(self) -> dict[str, Any]:
        data = dict(vars(self))  # its fields, in order: what asdict gives for flat values
        data["argv"] = list(self.argv)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ProcessRecord:
        """Parse a stored record; ``ValueError`` when it is not one."""
        try:
            rec = cls(
                node_id=str(data["node_id"]),
                pid=int(data["pid"]),
                create_time=float(data["create_time"]),
                pgid=int(data["pgid"]),
                run_id=str(data["run_id"]),
                epoch=int(data["epoch"]),
                worker=str(data["worker"]),
                argv=tuple(str(a) for a in data["argv"]),
                log_path=str(data["log_path"]),
                started_at=float(data["started_at"]),
                journal_id=_optional_text(data.get("journal_id"), "journal_id"),
                host=_optional_text(data.get("host"), "host"),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a process record: {exc}") from None
        if rec.pid <= 0 or rec.pgid <= 0:
            raise ValueError("not a process record: pid and pgid must be positive")
        return rec

    @classmethod
    def for_current_process(
        cls,
        *,
        node_id: str,
        run_id: str,
        epoch: int,
        worker: str,
        log_path: str | Path,
        journal_id: str | None = None,
    ) -> ProcessRecord:
        """The record of the calling process (a worker recording itself)."""
        import psutil

        me = psutil.Process()
        created = create_time(me.pid)
        assert created is not None  # we are alive
        return cls(
            node_id=node_id,
            pid=me.pid,
            create_time=created,
            pgid=os.getpgid(0),
            run_id=run_id,
            epoch=epoch,
            worker=worker,
            argv=_argv(me),
            log_path=str(log_path),
            started_at=time.time(),
            journal_id=journal_id,
            host=this_host(),
        )


def _argv(proc: psutil.Process) -> tuple[str, ...]:
    """The command line, without the blank tail a forked worker's may have (the forkserver)."""

    argv = list(proc.cmdline())
    while argv and not argv[-1]:
        argv.pop()
    return tuple(argv)


class ProcessRegistry:
    """``<state dir>/{processes,logs}/``: this node's records and logs.

    The state dir is ``JournalLocation.state_dir``'s: ``state_dir`` or ``$REFINE_STATE_DIR``,
    else ``nodes/<node>/<journal id>/`` beside the journal's real path (a symlinked journal is
    the same journal), else, for a ``postgresql://`` journal, a folder of this machine per
    journal id. With a ``journal_id``, a record that names another journal is never returned.

    Records and logs written before the journal id named the folder stay in ``nodes/<node>/``
    (shared by every journal there; workers of that time still write and remove them): they are
    read from there as a fallback, filtered by journal id, and never written there.
    """

    def __init__(
        self,
        journal_path: Location,
        node_id: str,
        journal_id: str | None = None,
        *,
        state_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        self.node_id = node_id
        self.journal_id = journal_id
        # The journal's location (a path or a postgresql:// URL) or the override decides.
        where = JournalLocation.of(journal_path)
        self.root = where.state_dir(node_id, journal_id, state_dir)
        self.processes_dir = self.root / "processes"
        self.logs_dir = self.root / "logs"
        # nodes/<node>/ as older versions wrote it: read, and tidied of this journal's records.
        self.legacy_root = where.legacy_state_dir(node_id, journal_id, state_dir)

    @classmethod
    def for_journal(cls, journal: Journal, node_id: str) -> ProcessRegistry:
        """This node's registry for an open journal of any backend (its location decides)."""
        return cls(journal.location, node_id, journal.journal_id)

    # One state dir serves one journal. Its records and logs name attempts by run id and epoch
    # alone, which two journals share (goal "r3" in both): a node of one would overwrite, remove
    # or show the other's. Keyed by journal id, the default folders never meet; a state dir
    # chosen by hand (``--state-dir``, ``$REFINE_STATE_DIR``) is reserved by the first node that
    # starts in it, and a node of another journal refuses to start there.

    def state_dir_journal(self) -> str | None:
        """The journal this state dir is reserved for (None: not yet, or unreadable)."""
        try:
            text = (self.root / STATE_DIR_OWNER).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return None
        return text.strip() or None

    def reserve(self) -> None:
        """Reserve this state dir for this journal, or refuse (StateDirInUseError) when another
        journal has it: reserved by that journal, or, if not yet reserved (older versions did
        not), holding a record that names that journal. The folder must exist."""
        if self.journal_id is None:  # a journal without an id (read-only, schema 1): no key
            return
        owner = self.state_dir_journal() or self._other_journal_recorded()
        if owner is None:
            owner = _create_once(self.root / STATE_DIR_OWNER, f"{self.journal_id}\n").strip()
        if owner != self.journal_id:
            raise StateDirInUseError(
                f"the state dir {self.root} holds the process records and logs of journal"
                f" {owner}, not of this journal ({self.journal_id}): give this node a state dir"
                " of its own (--state-dir or $REFINE_STATE_DIR), or empty that one once no"
                f" worker of journal {owner} runs"
            )

    def _other_journal_recorded(self) -> str | None:
        """The id of another journal that a record in this state dir names (None: none)."""
        with contextlib.suppress(OSError):
            for path in sorted(self.processes_dir.glob("*.json")):
                rec = _read_record(path)
                if rec is not None and rec.journal_id not in (None, self.journal_id):
                    return rec.journal_id
        return None

    def _record_path(self, run_id: str, epoch: int) -> Path:
        return self.processes_dir / f"{_safe_name(run_id)}.{int(epoch)}.json"

    def _legacy_path(self, folder: str, run_id: str, epoch: int, suffix: str) -> Path | None:
        if self.legacy_root is None:
            return None
        return self.legacy_root / folder / f"{_safe_name(run_id)}.{int(epoch)}.{suffix}"

    def log_path(self, run_id: str, epoch: int) -> Path:
        """Where this attempt's log is written (a worker starting it)."""
        return self.logs_dir / f"{_safe_name(run_id)}.{int(epoch)}.log"

    def find_log(self, run_id: str, epoch: int) -> Path:
        """Where this attempt's log is to be read without its record: ``log_path``, or the
        older shared folder's when only that one exists and is this journal's."""
        path = self.log_path(run_id, epoch)
        legacy = self._legacy_path("logs", run_id, epoch, "log")
        if legacy is None or path.exists() or not legacy.exists():
            return path
        # A log does not name its journal and every journal in the folder wrote there: it is
        # ours only while the shared folder's record of the attempt is this journal's (read in
        # place, as ``get`` reads it). Without one it may be another journal's log of the same
        # run id + epoch, so none is shown: an older attempt of ours that ended (its record
        # removed) loses its log from view, which is better than showing a stranger's.
        record = self._legacy_path("processes", run_id, epoch, "json")
        ours = record is not None and self._ours(_read_record(record)) is not None
        return legacy if ours else path

    def record(self, rec: ProcessRecord, *, sync: bool = True) -> Path:
        """Write ``rec`` atomically (temp file + ``os.replace``): readers see old or new, whole.

        ``sync=False`` leaves the fsync to ``sync`` later (a worker's record, synced by its claim
        helper while the worker starts the recipe: off the launch path). Unsynced, the record is
        still what every process reads; only an OS crash can lose it, and that ends the process
        it names too, so the attempt is then what it would be had the crash come just before the
        record: claimed with no record, left for an operator (the node never guesses without one).
        """
        self.processes_dir.mkdir(parents=True, exist_ok=True)
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        target = self._record_path(rec.run_id, rec.epoch)
        _write_atomically(target, rec.to_json(), sync=sync)
        return target

    def sync(self, run_id: str, epoch: int) -> None:
        """Make a record written with ``sync=False`` durable (nothing when it is gone)."""
        with contextlib.suppress(FileNotFoundError):
            fd = os.open(self._record_path(run_id, epoch), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    # A Stop in progress owns its attempt's ending: from its first signal until it has recorded
    # (or its deadline passed, should the stopper die) this node does not reconcile the attempt.

    def _stop_markers(self, run_id: str, epoch: int) -> list[Path]:
        """This attempt's markers, one a stopper (``<run>.<epoch>.<pid>-<n>.stopping``): a second
        stopper never overwrites or removes the first's (plus the one name older versions used)."""
        prefix = f"{_safe_name(run_id)}.{int(epoch)}."
        found = [self.processes_dir / f"{prefix}stopping"]
        for path in self.processes_dir.glob(f"{prefix}*.stopping"):  # file_name quotes * ? [
            pid, dash, n = path.name[len(prefix) : -len(".stopping")].partition("-")
            if pid.isdigit() and dash and n.isdigit():  # not another run's whose name goes on
                found.append(path)
        return found

    def mark_stopping(self, run_id: str, epoch: int, *, by: str, until: float) -> Path:
        """Say that ``by`` is stopping this attempt and records its end before ``until``; the
        marker to give ``clear_stopping`` when done."""
        self.processes_dir.mkdir(parents=True, exist_ok=True)
        token = f"{os.getpid()}-{next(_STOP_TOKENS)}"
        marker = self.processes_dir / f"{_safe_name(run_id)}.{int(epoch)}.{token}.stopping"
        _write_atomically(marker, {"by": by, "until": until})
        return marker

    def stopping(self, run_id: str, epoch: int) -> str | None:
        """Who is stopping this attempt now (None: nobody, or the stoppers' deadlines passed).
        An older stopper's marker in the shared folder counts too until its deadline."""
        legacy = self._legacy_path("processes", run_id, epoch, "stopping")
        for marker in [*self._stop_markers(run_id, epoch), legacy]:
            if marker is not None and (by := _stopper(marker)):
                return by
        return None

    @staticmethod
    def clear_stopping(marker: Path) -> None:
        with contextlib.suppress(FileNotFoundError):
            marker.unlink()

    def remove(self, run_id: str, epoch: int) -> bool:
        """Forget the record (an older one in the shared folder too, when it is this journal's);
        False when there was none. Another journal's or machine's record of the same attempt
        name is never removed: it is not ours to forget."""
        path = self._record_path(run_id, epoch)
        found = _read_record(path)
        removed = (found is None or self._ours(found) is not None) and _unlink(path)
        legacy = self._legacy_path("processes", run_id, epoch, "json")
        if legacy is not None and self._ours(_read_record(legacy)) is not None:
            removed = _unlink(legacy) or removed
        return removed

    def get(self, run_id: str, epoch: int) -> ProcessRecord | None:
        legacy = self._legacy_path("processes", run_id, epoch, "json")
        for path in (self._record_path(run_id, epoch), legacy):
            if path is not None and (rec := self._ours(_read_record(path))) is not None:
                return rec
        return None

    def all(self) -> list[ProcessRecord]:
        """Every readable record, oldest first (unreadable files are skipped: not authority)."""
        found = {(r.run_id, r.epoch): r for r in self._read_all(self.processes_dir)}
        if self.legacy_root is not None:
            for rec in self._read_all(self.legacy_root / "processes"):
                found.setdefault((rec.run_id, rec.epoch), rec)
        return sorted(found.values(), key=lambda r: r.started_at)

    def _read_all(self, folder: Path) -> list[ProcessRecord]:
        if not folder.is_dir():
            return []
        found = (self._ours(_read_record(p)) for p in sorted(folder.glob("*.json")))
        return [r for r in found if r is not None]

    def recorded_elsewhere(self, run_id: str, epoch: int) -> str | None:
        """The host name of the machine whose record of this attempt is here (None: none)."""
        rec = _read_record(self._record_path(run_id, epoch))
        if rec is None or rec.host is None or rec.host == this_host():
            return None
        return rec.host.partition("/")[0]

    def _ours(self, rec: ProcessRecord | None) -> ProcessRecord | None:
        if rec is None:
            return None
        if rec.host is not None and rec.host != this_host():
            return None  # its pid names a process of another machine: nothing to do here
        if None in (rec.journal_id, self.journal_id):
            return rec
        return rec if rec.journal_id == self.journal_id else None


def _unlink(path: Path) -> bool:
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True


_STOP_TOKENS = itertools.count()


def _stopper(marker: Path) -> str | None:
    try:
        data = json.loads(marker.read_text(encoding="utf-8"))
        by, until = str(data["by"]), float(data["until"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return by if time.time() < until else None


def _safe_name(value: str) -> str:
    return file_name(value)


def _write_atomically(target: Path, data: Mapping[str, Any], *, sync: bool = True) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".part", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, sort_keys=True)
            f.flush()
            if sync:
                os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _create_once(target: Path, text: str) -> str:
    """Write ``text`` to ``target`` unless it exists (whole, never half-written: a hard link of
    a complete file); what ``target`` holds afterwards, ours or the one that was first."""
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".part", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, target)
        except FileExistsError:
            pass
        except OSError:  # no hard links there (some network file systems): created exclusively
            with contextlib.suppress(FileExistsError), open(target, "x", encoding="utf-8") as f:
                f.write(text)
    finally:
        os.unlink(tmp)
    return target.read_text(encoding="utf-8")


def _optional_text(value: object, name: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise ValueError(f"{name} must be text")


def _read_record(path: Path) -> ProcessRecord | None:
    try:
        return ProcessRecord.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, AttributeError):
        return None


# --- identity and observation ----------------------------------------------------------------


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
    import psutil

    node, sep, token = worker.rpartition("/")
    if not sep or not token:
        return None
    for proc in psutil.process_iter(["cmdline", "status"]):
        argv = proc.info["cmdline"] or []
        if proc.info["status"] == psutil.STATUS_ZOMBIE or "store.worker" not in argv:
            continue
        if _option(argv, "--token") == token and _option(argv, "--node") == node:
            return proc
    return None


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


# --- stopping --------------------------------------------------------------------------------


@dataclass(frozen=True)
class StopOutcome:
    """``signals`` sent (names, in order) and the ``outcome``:

    ``exited`` (gone within the grace after SIGTERM), ``killed`` (SIGKILL was needed),
    ``not-running`` (nothing to stop), ``mismatch`` (the pid now names another process, or
    another process group: nothing was signalled).
    """

    signals: tuple[str, ...]
    outcome: str
    detail: str


def stop_process(rec: ProcessRecord, grace_s: float = 5.0) -> StopOutcome:
    """Stop the recorded process and its process group: SIGTERM, up to ``grace_s``, SIGKILL.

    Identity is verified first (pid + exact create time, not a zombie) or nothing is signalled.
    The whole group is signalled only while its id is still the recorded one, so children and
    grandchildren die with the worker. Never raises for a process that vanished meanwhile.
    """
    import signal  # here, not at the top: a stop refused before any process never signals

    reaped = _reap_if_our_zombie(rec.pid)
    if not same_process(rec):
        if not _orphans_left(rec):
            return _not_running_or_mismatch(rec, reaped)
        group, target = True, f"the leftovers of process group {rec.pgid} (pid {rec.pid} is gone)"
    else:
        try:
            group = os.getpgid(rec.pid) == rec.pgid
        except ProcessLookupError:
            return _not_running_or_mismatch(rec, _reap_if_our_zombie(rec.pid))
        target = f"process group {rec.pgid}" if group else f"pid {rec.pid}"

    def alive() -> bool:
        _reap_if_our_zombie(rec.pid)
        return _group_alive(rec.pgid) if group else same_process(rec)

    if not _send(rec, group, signal.SIGTERM):
        return StopOutcome((), "not-running", f"pid {rec.pid} exited before it was signalled")
    deadline = time.monotonic() + max(0.0, grace_s)
    while alive():
        if time.monotonic() >= deadline:
            _send(rec, group, signal.SIGKILL)
            _wait_gone(alive)
            return StopOutcome(
                ("SIGTERM", "SIGKILL"),
                "killed",
                f"SIGTERM to {target}, SIGKILL after {grace_s:g} s",
            )
        time.sleep(POLL_S)
    return StopOutcome(("SIGTERM",), "exited", f"SIGTERM to {target}, exited within the grace")


def _orphans_left(rec: ProcessRecord) -> bool:
    """The recorded leader is gone but its group lives on (e.g. grandchildren of a crashed
    worker). A group id stays allocated while any member lives, so the group is still ours."""
    return rec.pgid == rec.pid and _group_is_ours(rec) and _group_alive(rec.pgid)


def _not_running_or_mismatch(rec: ProcessRecord, reaped: bool) -> StopOutcome:
    other = _stat(rec.pid)
    if other is not None and other[3] != rec.create_time and other[0] != _ZOMBIE:
        return StopOutcome(
            (),
            "mismatch",
            f"pid {rec.pid} is now another process (create time differs): not signalled",
        )
    note = " (reaped)" if reaped else ""
    return StopOutcome((), "not-running", f"pid {rec.pid} is not running{note}")


def _send(rec: ProcessRecord, group: bool, sig: signal.Signals) -> bool:
    """Signal the group (only while its id is still the recorded one) or the verified pid."""
    try:
        if group:
            if not _group_is_ours(rec):
                return False
            os.killpg(rec.pgid, sig)
        else:
            if not same_process(rec):
                return False
            os.kill(rec.pid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _group_is_ours(rec: ProcessRecord) -> bool:
    """The group id still names the recorded group: its leader pid is not a newer process."""
    leader = _stat(rec.pgid)
    return leader is None or leader[3] <= rec.create_time  # leaderless: a live id is not reused


def stop_group_members(grace_s: float = 5.0) -> tuple[str, ...]:
    """Stop every process of the caller's own group but the caller: SIGTERM, up to ``grace_s``,
    SIGKILL (a worker ending its recipe and whatever the recipe started). Only for a session
    leader (a worker the node started with ``start_new_session``): any other group may hold
    processes that are not ours (a shell's pipeline, a test runner). Returns the signals.
    """
    import signal

    import psutil

    me = os.getpid()
    if os.getsid(0) != me or os.getpgid(0) != me:
        return ()

    def others() -> list[psutil.Process]:
        found = []
        for proc in _group_members(me):
            with contextlib.suppress(psutil.Error):
                if proc.pid != me and proc.status() != psutil.STATUS_ZOMBIE:
                    found.append(proc)
        return found

    sent: list[str] = []
    deadline = time.monotonic() + max(0.0, grace_s)
    while (members := others()) and time.monotonic() < deadline + 5.0:
        sig = signal.SIGTERM if time.monotonic() < deadline else signal.SIGKILL
        if not sent or sent[-1] != sig.name:
            sent.append(sig.name)
        for proc in members:  # psutil checks the pid still names that process
            with contextlib.suppress(psutil.Error):
                proc.send_signal(sig)
        time.sleep(POLL_S)
    return tuple(sent)


def _group_members(pgid: int) -> Iterator[psutil.Process]:
    import psutil

    for proc in psutil.process_iter():
        with contextlib.suppress(ProcessLookupError, psutil.Error):
            if os.getpgid(proc.pid) == pgid:
                yield proc


def _group_alive(pgid: int) -> bool:
    """Any non-zombie process left in the group (orphaned zombies may never be reaped here)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    for pid in _pids():
        seen = _stat(pid)
        if seen is not None and seen[2] == pgid and seen[0] != _ZOMBIE:
            return True
    return False


def _wait_gone(alive: Any, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while alive() and time.monotonic() < deadline:
        time.sleep(POLL_S)


def _reap_if_our_zombie(pid: int) -> bool:
    """Reap ``pid`` if it is our own exited child; True when it was reaped now."""
    seen = _stat(pid)
    if seen is None or seen[1] != os.getpid() or seen[0] != _ZOMBIE:
        return False
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return False
    return done == pid


# --- logs ------------------------------------------------------------------------------------


def log_tail(path: str | os.PathLike[str], lines: int = 20) -> list[str]:
    """The last ``lines`` lines of a log (decoded leniently); [] when it is missing."""
    if lines <= 0:
        return []
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            end = f.tell()
            block, data = 8192, b""
            while end > 0 and data.count(b"\n") <= lines:
                start = max(0, end - block)
                f.seek(start)
                data = f.read(end - start) + data
                end = start
    except OSError:
        return []
    text = data.decode("utf-8", errors="replace")
    return text.splitlines()[-lines:]
