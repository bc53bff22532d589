"""Stopping a recorded process safely: its identity verified first (``store.host.observe``) or
nothing is signalled; then SIGTERM to its process group, a grace, SIGKILL.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from store.host.observe import _ZOMBIE, _pids, _stat, same_process
from store.records import dataclass

if TYPE_CHECKING:
    import signal

    import psutil

    from store.host.processes import ProcessRecord

POLL_S = 0.02  # how often stop_process looks whether the group has exited
# How long after its grace a stopper may still take to SIGKILL, wait and record: a stopper marks
# the attempt (ProcessRegistry.mark_stopping) until then, and the node leaves it alone meanwhile
# (and reconciles it after, should the stopper die), as does its worker (it waits, not signals).
STOP_MARGIN_S = 15.0


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
    return stop_processes([rec], grace_s)[0]


def stop_processes(records: Sequence[ProcessRecord], grace_s: float = 5.0) -> list[StopOutcome]:
    """``stop_process`` for each record, side by side: SIGTERM to each, one grace for all,
    SIGKILL to those left. One after another, a batch of recipes that each use their grace
    took a grace each (ten that ignore SIGTERM, with a 2 s grace: 20 s)."""
    begun = [_terminate(rec) for rec in records]
    signalled = [b for b in begun if isinstance(b, _Signalled)]
    deadline = time.monotonic() + max(0.0, grace_s)
    while any(b.alive() for b in signalled) and time.monotonic() < deadline:
        time.sleep(POLL_S)
    return [b if isinstance(b, StopOutcome) else b.finish(grace_s) for b in begun]


@dataclass(frozen=True)
class _Signalled:
    """A recorded process (``group``: with its group) that was sent SIGTERM."""

    rec: ProcessRecord
    group: bool
    target: str  # in words: "process group 4242", "pid 4242", "the leftovers of ..."

    def alive(self) -> bool:
        _reap_if_our_zombie(self.rec.pid)
        return _group_alive(self.rec.pgid) if self.group else same_process(self.rec)

    def finish(self, grace_s: float) -> StopOutcome:
        """Once the grace is over (or it is gone): SIGKILL what is left."""
        import signal

        if not self.alive():
            words = f"SIGTERM to {self.target}, exited within the grace"
            return StopOutcome(("SIGTERM",), "exited", words)
        _send(self.rec, self.group, signal.SIGKILL)
        _wait_gone(self.alive)
        words = f"SIGTERM to {self.target}, SIGKILL after {grace_s:g} s"
        return StopOutcome(("SIGTERM", "SIGKILL"), "killed", words)


def _terminate(rec: ProcessRecord) -> _Signalled | StopOutcome:
    """SIGTERM to the recorded process (its group, while its id is still the recorded one),
    once its identity is verified; the outcome at once when nothing was signalled."""
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
    if not _send(rec, group, signal.SIGTERM):
        return StopOutcome((), "not-running", f"pid {rec.pid} exited before it was signalled")
    return _Signalled(rec, group, target)


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


def may_signal(pid: int) -> bool:
    """Whether this process may signal ``pid``: not another user's, unless we are root (a pid
    gone is no refusal: the stop then finds it gone)."""
    try:
        os.kill(pid, 0)
    except PermissionError:
        return False
    except ProcessLookupError:
        return True
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
    # SIGTERM once to each member (one that appears during the grace gets its own): sent again
    # every look, it cut short the very cleanup the grace is for (a shell trap's commands were
    # killed as they began, and the recipe ran its handler again and again).
    termed: set[psutil.Process] = set()
    deadline = time.monotonic() + max(0.0, grace_s)
    while (members := others()) and time.monotonic() < deadline + 5.0:
        late = time.monotonic() >= deadline
        sig = signal.SIGKILL if late else signal.SIGTERM
        if not sent or sent[-1] != sig.name:
            sent.append(sig.name)
        for proc in members:  # psutil checks the pid still names that process
            if late or proc not in termed:
                with contextlib.suppress(psutil.Error):
                    proc.send_signal(sig)
                termed.add(proc)
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
