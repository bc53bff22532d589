"""A session's end, waited for (store/journal/session_end.py), on real Unix sockets: the wait
ends at the other end's close (after what it still sent), or at its time; descriptors handed
on the helper's channel arrive with its lines; the handed session is ended (end of file sent)
and waited for before the rest (a slot's lock) is closed."""

from __future__ import annotations

import os
import socket
import threading
import time

from store.journal import session_end


def _closed(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return True
    return False


def test_the_wait_reads_what_is_left_and_ends_at_the_other_ends_close() -> None:
    ours, server = socket.socketpair()
    ours.setblocking(False)  # as libpq's
    watched = session_end.watch(ours.fileno())
    assert watched is not None
    ours.close()
    server.sendall(b"a notice the client never read")
    threading.Timer(0.05, server.close).start()
    began = time.monotonic()
    session_end.until_gone(watched)
    assert 0.04 < time.monotonic() - began < 1.5 and _closed(watched)


def test_the_wait_gives_up_at_its_time() -> None:
    ours, server = socket.socketpair()
    began = time.monotonic()
    session_end.until_gone(os.dup(ours.fileno()), timeout_s=0.1)
    assert 0.09 < time.monotonic() - began < 1.0
    ours.close()
    server.close()


def test_handed_descriptors_arrive_with_the_lines_and_the_session_is_ended_first() -> None:
    worker, helper = socket.socketpair()
    session, server = socket.socketpair()  # the helper's session, and the server's end of it
    lock_r, lock_w = os.pipe()  # stands for the slot's lock file
    helper.sendall(b'{"ready": 1}\n')
    session_end.hand_over(helper.fileno(), [session.fileno(), lock_w])
    helper.sendall(b"0\n")
    helper.close()  # as its exec or exit closes it
    session.close()  # the helper's own copies go with it
    os.close(lock_w)
    lines, handed = session_end.receive(worker)
    assert lines == ['{"ready": 1}', "0"] and len(handed) == 2

    ended = threading.Event()

    def serve() -> None:  # the backend: sees end of file, then closes its end
        assert server.recv(100) == b""
        ended.set()
        server.close()

    threading.Thread(target=serve).start()
    session_end.end_handed(handed)
    assert ended.is_set() and all(_closed(fd) for fd in handed)
    assert os.read(lock_r, 1) == b""  # the last copy of the lock's descriptor is closed
    os.close(lock_r)
    worker.close()


def test_nothing_handed_is_nothing_to_end() -> None:
    session_end.end_handed([])
    worker, helper = socket.socketpair()
    session_end.hand_over(helper.fileno(), [])
    helper.close()
    assert session_end.receive(worker) == ([], [])
    worker.close()
