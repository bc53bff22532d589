"""One `refine node` of a name per journal on this machine: a lock file in its state dir.

The node holds ``node.lock`` (``fcntl.lockf``) while it serves. The kernel releases it when the
process ends, however it ends, and a POSIX lock is not inherited by the workers the node
starts, so a held lock proves that node process is alive here. Presence beats cannot prove
that: a node killed a moment ago looks ``live`` for three of its heartbeat intervals.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import struct
from pathlib import Path

LOCK_FILE = "node.lock"
_FLOCK = "hhqqi4x"  # struct flock: type, whence, start, len, pid (Linux, 64-bit off_t)


class NodeLock:
    """``<state dir>/node.lock``: ``acquire`` it, ``release`` it (or let the process end)."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / LOCK_FILE
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> bool:
        """Take the lock and write our pid in it; False while another process holds it.
        OSError when the file cannot be made (the state dir's own problem, said by the node)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # EAGAIN / EACCES: held
            os.close(fd)
            return False
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        except OSError:  # e.g. a full disk: not held, said by the caller
            os.close(fd)
            raise
        self._fd = fd
        return True

    def holder(self) -> str:
        """The pid the holder wrote ("?" when it cannot be read)."""
        try:
            text = self.path.read_text(encoding="ascii", errors="replace").strip()
        except OSError:
            return "?"
        return text if text.isdigit() else "?"

    def held_now(self) -> bool:
        """Whether a process holds the lock now, found without taking it (``F_GETLK``): a probe
        that took it, even for a moment, could make a node starting then refuse to. This
        process's own lock does not conflict with it, so its pid in the file counts too."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:  # no file: no node ever served from this state dir
            return False
        try:
            probe = struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
            found = struct.unpack(_FLOCK, fcntl.fcntl(fd, fcntl.F_GETLK, probe))
        except OSError:
            return False
        finally:
            os.close(fd)
        return found[0] != fcntl.F_UNLCK or self.holder() == str(os.getpid())

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)  # closing the descriptor releases the lock
            self._fd = None
