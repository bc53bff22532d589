"""Wake-ups from a node to its workers, without a journal connection per worker (DESIGN §14).

The node already learns of every commit (its LISTEN, or its SQLite file watcher). After each
of its rounds it reads the events committed since the last one and sends one datagram to each
worker whose Goal or Run an event touched (``Relay``). A worker waits on its ``Inbox``, an
abstract unix datagram socket named after its token, bound before it claims: a change
committed after the claim's reread is always sent to a socket already bound. A wake-up is a
hint, never data: the worker then rereads Goal and Run (connecting only for that), and decides.

The worker also watches its node (``node.pid`` in the node's folder, then a pidfd on that
process). While no node relays to it (the node died, or the worker runs on its own) it looks
by itself every ``poll_s``: a worker whose node is gone still sees a cancellation and still
reports its end. A node that starts wakes every worker it finds (it cannot know what it
missed), and a worker that finds a new node looks once.

Datagrams carry their sender's credentials (``SO_PASSCRED``): only a process of our own user
(or root) may wake a worker, so another user cannot make it reread in a loop.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import select
import socket
import struct
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

from store.host.processes import create_time, same_pid
from store.journal.api import MAX_PAGE, Journal
from store.model.goal import goal_id_of

NODE_FILE = "node.pid"  # "PID CREATE_TIME" of the node that relays to this folder's workers
# Events that never change a running attempt's verdict: a Goal's creation, and the claim that
# started the attempt itself (every later change has its own event). Waking a worker for these
# would make each of a burst of launches reread once more, for nothing.
QUIET = frozenset({"goal.created", "run.submitted", "goal.started", "attempt.claimed"})
_CREDENTIALS = struct.Struct("iII")  # struct ucred: pid, uid, gid

Wake = Literal["fd", "wake", "poll", "timeout"]


def address(token: str) -> bytes:
    """The abstract socket name of the worker launched with ``token`` (fits any token)."""
    return b"\0refine-wake/" + hashlib.sha256(token.encode()).hexdigest()[:40].encode()


# --- the node's side -------------------------------------------------------------------------


class Relay:
    """The node's sender: ``relay(journal, tokens)`` after each round (goal id → token)."""

    def __init__(self) -> None:
        self._sock = socket.socket(
            socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC
        )
        self._journal: Journal | None = None
        self._after = 0

    def close(self) -> None:
        self._sock.close()

    def relay(self, journal: Journal, tokens: Mapping[str, str]) -> int:
        """Wake the workers whose Goal changed since the last call; returns how many. The
        first call on a journal wakes them all: what was committed before is unknown here."""
        if journal is not self._journal:
            self._journal, self._after = journal, journal.last_sequence()
            return sum(self.wake(token) for token in tokens.values())
        woken: set[str] = set()
        while True:
            page = journal.event_records(self._after, MAX_PAGE)
            for _, aggregate_id, _, kind, *_ in page:
                goal_id = goal_id_of(aggregate_id)
                if kind in QUIET or goal_id is None or goal_id in woken:
                    continue
                token = tokens.get(goal_id)
                if token is not None and self.wake(token):
                    woken.add(goal_id)
            if page:
                self._after = page[-1][0]
            if len(page) < MAX_PAGE:
                return len(woken)

    def wake(self, token: str) -> bool:
        """One datagram to that worker; False when nobody listens there (it ended)."""
        try:
            self._sock.sendto(b"w", address(token))
        except BlockingIOError:  # its queue is full: it has a wake-up waiting already
            return True
        except OSError:  # ECONNREFUSED, ENOENT: no such worker (any more)
            return False
        return True


def write_node_file(folder: Path) -> None:
    """Say which process relays to this folder's workers (written once the node serves)."""
    created = create_time(os.getpid())
    folder.mkdir(parents=True, exist_ok=True)
    temp = folder / f".{NODE_FILE}.{os.getpid()}"
    temp.write_text(f"{os.getpid()} {created!r}\n")
    os.replace(temp, folder / NODE_FILE)


# --- the worker's side -----------------------------------------------------------------------


class Inbox:
    """A worker's wake-ups: ``wait`` until a relayed one, a descriptor of ours (its recipe's
    exit), the safety poll (only while no node relays) or a timeout."""

    def __init__(self, token: str, *, poll_s: float) -> None:
        self.poll_s = poll_s
        self._sock: socket.socket | None = socket.socket(
            socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC
        )
        try:
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
            self._sock.bind(address(token))
        except OSError:  # the name is taken (a token used twice): poll instead
            self._sock.close()
            self._sock = None
        self._folder: Path | None = None
        self._node: int | None = None  # a pidfd on the node that relays to us
        self._next_poll = time.monotonic() + poll_s

    @property
    def relayed(self) -> bool:
        """A node relays to us now (else we poll)."""
        return self._sock is not None and self._node is not None

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self._drop_node()

    def __enter__(self) -> Inbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def follow(self, folder: Path) -> None:
        """Follow the node of ``folder`` (its ``node.pid``), if one is there and alive."""
        self._folder = folder
        self._find_node()

    def wait(self, fds: Sequence[int], timeout: float | None) -> Wake:
        """Wait up to ``timeout`` (None: no limit) for one of ``fds`` ("fd"), a reason to
        reread ("wake": relayed, or our node ended or a new one started) or, while no node
        relays to us, the safety poll ("poll")."""
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        while True:
            now = time.monotonic()
            limit = deadline
            if not self.relayed:
                limit = self._next_poll if limit is None else min(limit, self._next_poll)
            ready = self._poll(fds, None if limit is None else max(0.0, limit - now))
            if ready & set(fds):
                return "fd"
            if self._node is not None and self._node in ready:
                self._drop_node()  # it ended: we look now, then poll until another one relays
                return "wake"
            if self._sock is not None and self._sock.fileno() in ready and self._drain():
                return "wake"
            now = time.monotonic()
            if not self.relayed and now >= self._next_poll:
                self._next_poll = now + self.poll_s
                return "wake" if self._find_node() else "poll"
            if deadline is not None and now >= deadline:
                return "timeout"

    def _poll(self, fds: Sequence[int], timeout: float | None) -> set[int]:
        poller = select.poll()
        watched = [*fds]
        if self._sock is not None:
            watched.append(self._sock.fileno())
        if self._node is not None:
            watched.append(self._node)
        for fd in watched:
            poller.register(fd, select.POLLIN)
        ms = None if timeout is None else int(timeout * 1000) + 1
        return {fd for fd, _ in poller.poll(ms)}

    def _drain(self) -> bool:
        """Read every waiting datagram; True when one came from our own user (or root)."""
        assert self._sock is not None
        ours = False
        me = os.getuid()
        size = socket.CMSG_SPACE(_CREDENTIALS.size)
        while True:
            try:
                _, ancillary, _, _ = self._sock.recvmsg(16, size)
            except (BlockingIOError, InterruptedError):
                return ours
            for level, kind, data in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                    _, uid, _ = _CREDENTIALS.unpack(data[: _CREDENTIALS.size])
                    ours = ours or uid in (me, 0)

    def _find_node(self) -> bool:
        """Follow the node ``node.pid`` names if it is alive; True when that is a new one."""
        if self._folder is None or self._sock is None:
            return False
        try:
            pid_text, created_text = (self._folder / NODE_FILE).read_text().split()
            pid, created = int(pid_text), float(created_text)
        except (OSError, ValueError):
            return False
        if not same_pid(pid, created):
            return False
        try:
            fd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            return False
        if not same_pid(pid, created):  # it ended (and the pid was reused) meanwhile
            os.close(fd)
            return False
        self._drop_node()
        self._node = fd
        return True

    def _drop_node(self) -> None:
        if self._node is not None:
            with contextlib.suppress(OSError):
                os.close(self._node)
            self._node = None
