"""Linux inotify on one directory, read on the event loop: no thread, no polling while idle.

watchfiles' watcher runs in a thread that wakes every ``step`` ms (taking the GIL) to check its
stop event: ≈ 0.2 % of a core for a dashboard or node that otherwise sleeps (measured, issue
16). Here the kernel says when a name in the directory changed; ``DirectoryEvents`` is the fd
and the decoding, ``JournalWatcher`` registers it with ``loop.add_reader``.

Justified by ``bench/idle.py`` (an idle node's CPU, ``node_cpu``): measured in issue 28 on a
loaded machine, 0.10 % of a core and 1 thread with this, 1.6–2.1 % and 3 threads with watchfiles
(two 40 s windows each). ``tests/unit/test_speedups_inotify.py`` checks it reports the names
watchfiles reports for the same changes. (asyncinotify is a maintained library doing the same
with ctypes; this module is the ≈ 70 lines of it that the watcher needs.)
"""

from __future__ import annotations

import ctypes
import os
import struct

IN_MODIFY = 0x002
IN_ATTRIB = 0x004
IN_CLOSE_WRITE = 0x008
IN_MOVED_FROM = 0x040
IN_MOVED_TO = 0x080
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC

NAME_EVENTS = IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO
NAME_EVENTS |= IN_CREATE | IN_DELETE
GONE = IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED  # the watch is deaf from now on
_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len; then len bytes of NUL-padded name


def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.inotify_init1  # noqa: B018 (missing outside Linux: AttributeError)
    except (OSError, AttributeError):
        return None
    return libc


_LIBC = _libc()


def available() -> bool:
    return _LIBC is not None


class DirectoryEvents:
    """An inotify descriptor on ``directory`` (not recursive). OSError when it cannot watch."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        if _LIBC is None:
            raise OSError("inotify is not available here")
        fd = _LIBC.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        mask = NAME_EVENTS | IN_DELETE_SELF | IN_MOVE_SELF
        if _LIBC.inotify_add_watch(fd, os.fsencode(directory), mask) < 0:
            errno = ctypes.get_errno()
            os.close(fd)
            raise OSError(errno, "inotify_add_watch", str(directory))
        self.fd = fd

    def read(self) -> tuple[set[str], bool, bool]:
        """Since the last read: (names that changed, events were lost, the watch went deaf)."""
        names: set[str] = set()
        lost = gone = False
        while True:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                return names, lost, gone
            offset = 0
            while offset + _HEADER.size <= len(data):
                _wd, mask, _cookie, length = _HEADER.unpack_from(data, offset)
                offset += _HEADER.size
                name = data[offset : offset + length].rstrip(b"\0")
                offset += length
                lost = lost or bool(mask & IN_Q_OVERFLOW)
                gone = gone or bool(mask & GONE)
                if name:
                    names.add(os.fsdecode(name))

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
