"""A server session's end, waited for: a connection slot is given back only once the server
has let go of the session it held (DESIGN §14: a node's ``pg_stat_activity`` count never
exceeds its limit).

The server lists a backend until it has exited, a few ms after its client closed; a slot given
back at the client's close let a new connection in beside it (once in CI, 6 listed for a node
of 5). The server closes its end of the socket only as the backend exits, so the client keeps a
duplicate of its socket through the close and waits for that end of file (``watch``,
``until_gone``: ≈ 1.5 ms).

A claim helper's exec ends its session with no Terminate, and with no one left to wait: so it
first hands a duplicate of its socket and its slot to its worker (``hand_over``, on the
channel it tells the worker on), and the worker, once the exec closed that channel, ends the
session and waits for it to go before it lets the slot go (``end_handed``).
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import time
from collections.abc import Sequence

GONE_WAIT_S = 2.0  # a server that does not close by then is slow: the slot goes back anyway
HANDED = "handed"  # the line that carries the descriptors (never any other line's words)
MAX_HANDED = 2  # the socket, then the slot's lock


def watch(fd: int) -> int | None:
    """A duplicate of a connection's socket, kept open through its close (None: it is gone)."""
    try:
        return os.dup(fd)
    except OSError:
        return None


def until_gone(fd: int, timeout_s: float = GONE_WAIT_S) -> None:
    """Wait until the server closed its end of ``fd`` (reading what it still sends), or the
    time is up; then close ``fd``."""
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0 and poller.poll(left * 1000):
            with contextlib.suppress(BlockingIOError):  # libpq's socket is non-blocking
                if not os.read(fd, 65536):
                    break
    except OSError:  # reset by the server, or not a socket any more: gone either way
        pass
    finally:
        os.close(fd)


def hand_over(channel: int, fds: Sequence[int]) -> None:
    """Send duplicates of ``fds`` (a socket, then a slot's lock) on ``channel`` (a Unix
    socket), with the line ``HANDED``. Nothing when there is nothing to send."""
    if fds:
        with socket.socket(fileno=os.dup(channel)) as sock:
            socket.send_fds(sock, [f"{HANDED}\n".encode()], list(fds))


def receive(channel: socket.socket) -> tuple[list[str], list[int]]:
    """Every line said on ``channel`` until its other end closed, and the descriptors handed
    with them (the ``HANDED`` line itself left out)."""
    data, fds = bytearray(), []
    while True:
        chunk, got, _, _ = socket.recv_fds(channel, 65536, MAX_HANDED)
        for fd in got:
            os.set_inheritable(fd, False)
        fds += got
        if not chunk:
            break
        data += chunk
    lines = data.decode(errors="replace").splitlines()
    return [line for line in lines if line != HANDED], fds


def end_handed(fds: Sequence[int]) -> None:
    """End the session whose socket is ``fds[0]`` (its process exec'd, or let it go already),
    wait for the server to close it, then close the rest (the slot's lock: given back)."""
    if not fds:
        return
    with contextlib.suppress(OSError), socket.socket(fileno=os.dup(fds[0])) as sock:
        sock.shutdown(socket.SHUT_WR)  # end of file: a backend still there ends its session
    until_gone(fds[0])
    for fd in fds[1:]:
        os.close(fd)
