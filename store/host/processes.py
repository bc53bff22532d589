"""The node-local process registry: what a node runs, and its logs. How to observe a recorded
process is ``store.host.observe``'s, how to stop it safely ``store.host.stopping``'s (their
names are importable from here too).

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
import itertools
import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from store.errors import StateDirInUseError
from store.host.logs import log_tail
from store.host.observe import (
    ProcessObservation,
    _stat,
    create_time,
    live_worker,
    node_workers,
    observe,
    same_pid,
    same_process,
    this_host,
)
from store.host.stopping import STOP_MARGIN_S, StopOutcome, stop_group_members, stop_process
from store.journal.locations import JournalLocation, Location, file_name
from store.records import dataclass

# psutil (≈ 10 ms to import) is imported by the functions that observe processes or find
# workers by their argv; identity checks and stopping read /proc (see _stat).
if TYPE_CHECKING:
    import psutil

    from store.journal.api import Journal

# Observing, stopping and logs have modules of their own (store.host.observe, .stopping, .logs);
# their names stay importable from here, where every caller found them.
__all__ = [
    "STATE_DIR_OWNER",
    "STOP_MARGIN_S",
    "ProcessObservation",
    "ProcessRecord",
    "ProcessRegistry",
    "StopOutcome",
    "_stat",
    "create_time",
    "live_worker",
    "log_tail",
    "node_workers",
    "observe",
    "same_pid",
    "same_process",
    "stop_group_members",
    "stop_process",
    "this_host",
]

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
        self._records = RecordFiles()  # what ``all`` parsed, reread only when a file changed
        # what ``all`` last returned, and the folders' records it was made of (RecordFiles gives
        # the very same tuple again for a folder that did not change)
        self._all: tuple[object, object, list[ProcessRecord]] | None = None

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

    def claim_stopping(self, run_id: str, epoch: int, *, by: str, until: float) -> Path | None:
        """``mark_stopping`` for one of those who each may stop the attempt on the same news (its
        node and its worker, on a cancellation): of two at once one wins (its file is linked into
        place only if absent), so the recipe gets one SIGTERM. None: another is stopping it."""
        claim = self.processes_dir / f"{_safe_name(run_id)}.{int(epoch)}.0-0.stopping"
        if self.stopping(run_id, epoch) is not None:
            return None
        with contextlib.suppress(FileNotFoundError):
            claim.unlink()  # past its deadline (its claimant died), or there is none
        self.processes_dir.mkdir(parents=True, exist_ok=True)
        try:
            _write_atomically(claim, {"by": by, "until": until}, sync=False, exclusive=True)
        except FileExistsError:
            return None
        return claim

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

    def readable(self, run_id: str, epoch: int) -> bool:
        """Whether this user can tell if the attempt's record is here: its folder may be
        searched and a record there read. A node that runs as another user may keep its state
        dir to itself: a record not read is then no answer, never a process gone."""
        path = self._record_path(run_id, epoch)
        try:
            path.stat()
        except FileNotFoundError:
            return True
        except OSError:
            return False
        return os.access(path, os.R_OK)

    def get(self, run_id: str, epoch: int) -> ProcessRecord | None:
        legacy = self._legacy_path("processes", run_id, epoch, "json")
        for path in (self._record_path(run_id, epoch), legacy):
            if path is not None and (rec := self._ours(_read_record(path))) is not None:
                return rec
        return None

    @property
    def parsed(self) -> int:
        """How many record files ``all`` has read from disk (an unchanged one is read once)."""
        return self._records.parsed

    def all(self) -> list[ProcessRecord]:
        """Every readable record, oldest first (unreadable files are skipped: not authority)."""
        current = self._records.read(self.processes_dir)
        legacy = (
            () if self.legacy_root is None else self._records.read(self.legacy_root / "processes")
        )
        if self._all is not None and self._all[0] is current and self._all[1] is legacy:
            return list(self._all[2])  # neither folder changed: the same records
        found = {(r.run_id, r.epoch): r for r in self._ours_only(current)}
        for rec in self._ours_only(legacy):
            found.setdefault((rec.run_id, rec.epoch), rec)
        records = sorted(found.values(), key=lambda r: r.started_at)
        self._all = (current, legacy, records)
        return list(records)

    def _ours_only(self, records: tuple[ProcessRecord, ...]) -> list[ProcessRecord]:
        found = (self._ours(rec) for rec in records)
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


# A file's (inode, size, mtime, ctime) can stay the same across a rewrite made within one tick
# of the file system's clock (coarse: a jiffy, a second or two on some): a file changed this
# recently before it was read is read again next time, until its times are older than this.
RACY_NS = 2_000_000_000


class RecordFiles:
    """The records of a folder's ``*.json`` files, each parsed again only when its file changed.

    A node looks at every record every round (1,000 attempts: 1,000 files every 2 s); parsing
    them all each time was most of its idle CPU. A record is written once (``os.replace`` of a
    temp file of the same folder) and removed by unlinking, so:
    - a file is known by (inode, size, mtime, ctime) from one ``stat``: one replaced never
      matches what was parsed (a new inode);
    - a folder whose (inode, mtime, ctime) did not change had no file created, replaced or
      removed: what was found there is found again without a ``stat`` per file.
    A change within one tick of the file system's clock may leave those the same: what changed
    that recently is looked at again (``RACY_NS``). ``parsed`` counts the files read from disk.
    """

    def __init__(self) -> None:
        # folder → file name → (stat key, settled, its record): what the last read found
        self._known: dict[Path, dict[str, tuple[tuple[int, ...], bool, ProcessRecord | None]]] = {}
        # folder → (its stat key, the records found) once it was settled when read
        self._folders: dict[Path, tuple[tuple[int, ...], tuple[ProcessRecord, ...]]] = {}
        self.parsed = 0

    def read(self, folder: Path) -> tuple[ProcessRecord, ...]:
        """The readable records in ``folder``, in file name order (unreadable ones skipped);
        the very same tuple as the last time while the folder did not change."""
        before = time.time_ns()
        try:
            st = folder.stat()
        except OSError:  # no such folder (yet), or not one
            self._known.pop(folder, None)
            self._folders.pop(folder, None)
            return ()
        key = (st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
        last = self._folders.pop(folder, None)
        if last is not None and last[0] == key:
            self._folders[folder] = last
            return last[1]
        found = self._read_files(folder)
        if found is None:
            return ()
        if _settled(st, before):
            self._folders[folder] = (key, found)
        return found

    def _read_files(self, folder: Path) -> tuple[ProcessRecord, ...] | None:
        try:
            with os.scandir(folder) as listing:
                entries = [e for e in listing if e.name.endswith(".json")]
        except OSError:
            self._known.pop(folder, None)
            return None
        entries.sort(key=lambda e: e.name)
        known, now_known = self._known.get(folder, {}), {}
        found = []
        for entry in entries:
            name = entry.name
            try:
                st = entry.stat()  # relative to the open folder: no path to resolve
            except OSError:
                continue  # removed meanwhile
            key = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
            seen = known.get(name)
            if seen is None or seen[0] != key or not seen[1]:
                before = time.time_ns()
                self.parsed += 1
                seen = (key, _settled(st, before), _read_record(folder / name))
            now_known[name] = seen
            if seen[2] is not None:
                found.append(seen[2])
        self._known[folder] = now_known
        return tuple(found)


def _settled(st: os.stat_result, before: int) -> bool:
    """Last changed long enough before ``before`` (when it was read) for a change since to
    show in its times (``RACY_NS``)."""
    return max(st.st_mtime_ns, st.st_ctime_ns) < before - RACY_NS


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


def _write_atomically(
    target: Path, data: Mapping[str, Any], *, sync: bool = True, exclusive: bool = False
) -> None:
    """``target`` appears whole or not at all; ``exclusive``: FileExistsError if it exists."""
    fd, tmp = _temp_beside(target)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, sort_keys=True)
            f.flush()
            if sync:
                os.fsync(f.fileno())
        if exclusive:
            os.link(tmp, target)
            os.unlink(tmp)
        else:
            os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _temp_beside(target: Path) -> tuple[int, Path]:
    """A new file in ``target``'s folder, open for writing, with the mode the umask gives any
    file (``mkstemp``'s 0600 hid a node's records from the users who may read its state dir:
    their dashboard took every attempt of the node for one whose process is gone)."""
    while True:
        tmp = target.parent / f".tmp-{os.urandom(8).hex()}.part"
        with contextlib.suppress(FileExistsError):
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666), tmp


def _create_once(target: Path, text: str) -> str:
    """Write ``text`` to ``target`` unless it exists (whole, never half-written: a hard link of
    a complete file); what ``target`` holds afterwards, ours or the one that was first."""
    fd, tmp = _temp_beside(target)
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
