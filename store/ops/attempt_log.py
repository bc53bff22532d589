"""An attempt's log, as `refine logs` reads it: where it is, and following it while it grows.

A log is a node-local file (``ProcessRegistry``: the worker's record names it, else its place in
this node's state dir), so only the node that ran the attempt can show it; for another node's
attempt the answer is which node has it (``LogElsewhereError``), never an empty log.

``follow`` prints what the file gains until the attempt ends, woken by inotify on the logs
folder (a write to the log) and by the journal's change source (the attempt ending), with the
same slow safety look as ``refine wait``: no busy polling.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable
from pathlib import Path

from store.errors import (
    GoalNotFoundError,
    LogElsewhereError,
    NoLogError,
    RefineError,
    RunNotFoundError,
)
from store.host.processes import ProcessRegistry
from store.journal.api import Journal, Location, WakeUps
from store.model.goal import goal_id_of_run
from store.model.run import Attempt, Run
from store.ops.reads import read_goal, read_run
from store.records import dataclass
from store.speedups.inotify import DirectoryEvents

SAFETY_CHECK_S = 2.0  # a write or commit that slipped past both watchers is seen by then
CHUNK = 64 * 1024  # at most this much of the log is held in memory at once


@dataclass(frozen=True)
class AttemptLog:
    """Attempt ``epoch`` of ``run_id``, run by ``node_id``, and its log file on this node."""

    run_id: str
    epoch: int
    node_id: str
    path: Path
    running: bool  # the journal says the attempt runs (more may come)

    @property
    def name(self) -> str:
        return f"{self.run_id}/{self.epoch}"


def locate_log(journal: Journal, target: str, epoch: int | None, node: str) -> AttemptLog:
    """The log of attempt ``epoch`` (default: the latest) of run ``target``, or of the current
    run of goal ``target``, as node ``node`` can read it.

    GoalNotFoundError / RunNotFoundError for an unknown target, NoLogError when the run has no
    such attempt, LogElsewhereError when another node ran it (its log is on that machine).
    """
    run = _run_of(journal, target)
    if not run.attempts:
        raise NoLogError(f"{run.run_id} has no attempt yet: no log", run_id=run.run_id)
    attempt = run.attempts[-1] if epoch is None else _attempt(run, epoch)
    where = run_node(run, journal)
    name = f"{run.run_id}/{attempt.epoch}"
    if where != node:
        raise LogElsewhereError(
            f"the log of {name} is on node {where} (this is node {node}): run `refine logs`"
            " on that node's machine",
            run_id=run.run_id,
        )
    registry = ProcessRegistry.for_journal(journal, node)
    record = registry.get(run.run_id, attempt.epoch)
    path = Path(record.log_path) if record else registry.find_log(run.run_id, attempt.epoch)
    running = attempt.state == "running"
    return AttemptLog(run.run_id, attempt.epoch, node, path, running)


def _run_of(journal: Journal, target: str) -> Run:
    if goal_id_of_run(target) is None:  # a goal id: its current run
        goal = read_goal(journal, target)
        if goal is None:
            raise GoalNotFoundError(f"no goal {target}", goal_id=target)
        run = read_run(journal, goal.run_id)
        if run is None:
            raise NoLogError(f"goal {target} has no run yet: no log", goal_id=target)
        return run
    run = read_run(journal, target)
    if run is None:
        raise RunNotFoundError(f"no run {target}", run_id=target)
    return run


def _attempt(run: Run, epoch: int) -> Attempt:
    for attempt in run.attempts:
        if attempt.epoch == epoch:
            return attempt
    raise NoLogError(
        f"{run.run_id} has no attempt {epoch} (its attempts: 1 to {len(run.attempts)})",
        run_id=run.run_id,
    )


def run_node(run: Run, journal: Journal) -> str:
    """The node a Run was submitted for (its pin), else its Goal's node."""
    pinned = str(run.pins.get("scenario_revision", ""))
    if pinned.startswith("node:"):
        return pinned.removeprefix("node:")
    goal = read_goal(journal, goal_id_of_run(run.run_id) or "")
    return goal.node_id if goal is not None else ""


def still_running(journal: Journal, log: AttemptLog) -> bool:
    run = read_run(journal, log.run_id)
    return run is not None and run.runs_attempt(log.epoch)


class LogReader:
    """Reads a log file from where the last read ended; a file cut short starts over."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def exists(self) -> bool:
        return self.path.exists()

    def read(self, write: Callable[[bytes], None]) -> int:
        """Give ``write`` what the file gained (in chunks); the bytes given (0: nothing new)."""
        try:
            f = open(self.path, "rb")  # noqa: SIM115 (closed below, also on a failed seek)
        except FileNotFoundError:
            return 0
        given = 0
        with f:
            end = f.seek(0, os.SEEK_END)
            if end < self.offset:  # truncated or replaced: from the start again
                self.offset = 0
            f.seek(self.offset)
            while self.offset < end and (chunk := f.read(min(CHUNK, end - self.offset))):
                write(chunk)
                self.offset += len(chunk)
                given += len(chunk)
        return given


async def follow(
    journal: Journal,
    location: Location,
    log: AttemptLog,
    reader: LogReader,
    write: Callable[[bytes], None],
) -> None:
    """Give ``write`` what the log gains until the attempt ends (then what it wrote last)."""
    loop = asyncio.get_running_loop()
    wake = asyncio.Event()
    watcher = Journal.watch(location)
    pump = asyncio.create_task(_pump(watcher, wake))
    files: DirectoryEvents | None = None
    changes = journal.changes()  # its first answer is "changed": the attempt is read at once
    unread = False  # a change the gate reported whose read failed: read again at the next look
    try:
        while True:
            wake.clear()
            if files is None:  # (again, while the worker has not made the logs folder yet)
                files = _watch_folder(loop, log.path.parent, log.path.name, wake)
            reader.read(write)
            with contextlib.suppress(RefineError):  # the journal away for a while: look again later
                if unread := changes.changed() or unread:
                    ended, unread = not still_running(journal, log), False
                    if ended:
                        reader.read(write)  # what it wrote before it ended
                        return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), SAFETY_CHECK_S)
    finally:
        if files is not None:
            loop.remove_reader(files.fd)
            files.close()
        watcher.stop()
        pump.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await pump


def _watch_folder(
    loop: asyncio.AbstractEventLoop, folder: Path, name: str, wake: asyncio.Event
) -> DirectoryEvents | None:
    """inotify on the log's folder, waking for ``name`` (None where it cannot watch: the
    folder is not there yet, or no inotify; the safety look covers it)."""
    try:
        events = DirectoryEvents(folder)
    except OSError:
        return None

    def readable() -> None:
        names, lost, gone = events.read()
        if name in names or lost or gone:
            wake.set()

    loop.add_reader(events.fd, readable)
    return events


async def _pump(watcher: WakeUps, wake: asyncio.Event) -> None:
    async for _ in watcher:
        wake.set()
