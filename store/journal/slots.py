"""How many journal connections a group of processes may hold at once (DESIGN §14).

A node and its workers, or ``refine serve`` and its tabs, share one PostgreSQL server with the
whole fleet, so together they hold at most a small fixed number of connections however many
attempts (or tabs) they run. ``ConnectionSlots`` is that limit: ``limit`` lock files in a
folder, each held with ``flock`` on its own open file. The kernel drops a lock when its holder
closes the file or dies (SIGKILL included), so a holder that crashed never keeps a slot; a new
holder of another limit (a node restarted with another ``--max-connections``) only ever uses
the first ``limit`` files, so old and new together stay within the larger of the two.

``Sharing`` is how this process connects, set once by its entry point (``share``): whether each
connection takes a slot, whether it is given back after every call (a worker: it connects to
claim, to reread and to report, then lets go) or kept (a node), the ``application_name`` that
names it in ``pg_stat_activity``, and a file whose changes wake it (a served tab: ``serve``
relays its one LISTEN there). SQLite journals ignore it: they hold no server connection.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

from store.errors import InvalidInputError
from store.records import dataclass, replace

SLOTS_ENV = "REFINE_CONNECTION_SLOTS"  # "<limit>:<folder>", for the processes that share them
WAKE_FILE_ENV = "REFINE_WAKE_FILE"  # a file whose changes are this process's wake-ups
MAX_CONNECTIONS_ENV = "REFINE_MAX_CONNECTIONS"
DEFAULT_MAX_CONNECTIONS = 5
# A node keeps two for itself (its reads and commands, its LISTEN); its workers share the rest.
# ``refine serve`` keeps two as well (its LISTEN, the /metrics reader).
KEPT = 2
MAX_LIMIT = 1000
# How often the waiter through the turnstile looks (the only one that does): every 2 ms for a
# second (a claim or a reread holds its slot a few ms: a slot given back is not left idle),
# then every 50 ms while all stay held.
LOOK_S, LOOK_FOR_S, SLOW_LOOK_S = 0.002, 1.0, 0.05


class Slot:
    """One held slot; ``release`` (idempotent) gives it back."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the only descriptor of its open file drops the lock

    def fileno(self) -> int:
        """The descriptor whose open file holds the lock (a copy of it holds it too)."""
        if self._fd is None:
            raise ValueError("the slot was given back")
        return self._fd

    def __enter__(self) -> Slot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class ConnectionSlots:
    """At most ``limit`` holders at once among every process using ``folder``."""

    def __init__(self, folder: str | os.PathLike[str], limit: int) -> None:
        if type(limit) is not int or not 1 <= limit <= MAX_LIMIT:
            raise InvalidInputError(f"a connection limit is 1 to {MAX_LIMIT}, not {limit!r}")
        self.folder = Path(folder)
        self.limit = limit

    def acquire(self) -> Slot:
        """A free slot, waiting for one while all are held.

        Every slot is tried without waiting (from a random one, so holders spread). When all
        are held, the waiter queues for the turnstile (a blocking ``flock`` on one more file:
        the kernel keeps the queue and the sleepers cost nothing), and only the one through it
        looks again and again (every ``LOOK_S``, later ``SLOW_LOOK_S``) until a slot is
        given back, whichever it is. (A blocking lock on one slot would wait for that one even
        while another is free; every waiter looking by itself cost a burst of 1,000 claims
        about a core: each woke every few ms to try every slot.)"""
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        slot = self._any_free()
        if slot is not None:
            return slot
        with self._turnstile():
            through = time.monotonic()
            while (slot := self._any_free()) is None:
                waited = time.monotonic() - through
                time.sleep(LOOK_S if waited < LOOK_FOR_S else SLOW_LOOK_S)
        return slot

    def _any_free(self) -> Slot | None:
        """A slot no one holds now (None: all are held)."""
        first = self._any()
        for i in range(self.limit):
            slot = self._try((first + i) % self.limit)
            if slot is not None:
                return slot
        return None

    @contextlib.contextmanager
    def _turnstile(self) -> Iterator[None]:
        """Through the queue of waiters (held until the slot is taken; dropped by the kernel
        if the holder dies)."""
        import fcntl

        fd = os.open(self.folder / "queue", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # releases the GIL: a thread's wait blocks no other
            yield
        finally:
            os.close(fd)

    def _any(self) -> int:
        return int.from_bytes(os.urandom(4), "little") % self.limit

    def _try(self, index: int) -> Slot | None:
        import fcntl  # here: a quick `refine` command that only names the limit never loads it

        # A fresh open file per attempt: flock belongs to the open file, so two threads of one
        # process (or a holder and a thread that waits) exclude each other as two processes do.
        fd = os.open(self.folder / f"slot-{index}", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        return Slot(fd)

    def to_env(self) -> str:
        return f"{self.limit}:{self.folder}"

    @classmethod
    def from_env(cls, text: str | None) -> ConnectionSlots | None:
        """The slots ``to_env`` described; None for an empty or malformed value."""
        limit, _, folder = (text or "").partition(":")
        if not limit.isdigit() or not folder or not os.path.isabs(folder):
            return None
        with contextlib.suppress(InvalidInputError):
            return cls(folder, int(limit))
        return None


def max_connections(value: int | None = None) -> int:
    """The limit a node (or ``serve``) was given: ``value``, else ``$REFINE_MAX_CONNECTIONS``,
    else 5. At least ``KEPT + 1``: what the node keeps, and one for its workers."""
    if value is None:
        text = os.environ.get(MAX_CONNECTIONS_ENV, "").strip()
        if not text:
            return DEFAULT_MAX_CONNECTIONS
        if not text.isdigit():
            raise InvalidInputError(f"${MAX_CONNECTIONS_ENV} must be a whole number, not {text!r}")
        value = int(text)
    if type(value) is not int or not KEPT + 1 <= value <= MAX_LIMIT:
        raise InvalidInputError(
            f"max connections must be {KEPT + 1} to {MAX_LIMIT} (a node or serve keeps {KEPT},"
            f" its workers or tabs share the rest), not {value!r}"
        )
    return value


@dataclass(frozen=True)
class Sharing:
    """How this process's journals connect to a server (see the module's text)."""

    slots: ConnectionSlots | None = None  # each connection holds one of these while open
    transient: bool = False  # give the connection (and slot) back after every call
    application: str = "refine"  # application_name, as pg_stat_activity shows it
    wake_file: Path | None = None  # wake-ups come from this file's changes, not a LISTEN


_sharing = Sharing()


def sharing() -> Sharing:
    """How this process connects (``Sharing()`` unless its entry point said otherwise)."""
    return _sharing


def share(how: Sharing) -> None:
    """Set how this process connects, for every journal it opens from now on."""
    global _sharing
    _sharing = how


def share_from_env(*, application: str, transient: bool = True) -> Sharing:
    """Share the slots (and wake-up file) the environment names, as a worker or served tab:
    ``transient`` connections, named ``application``. Returns what was set."""
    wake = os.environ.get(WAKE_FILE_ENV, "")
    how = Sharing(
        slots=ConnectionSlots.from_env(os.environ.get(SLOTS_ENV)),
        transient=transient,
        application=application,
        wake_file=Path(wake) if os.path.isabs(wake) else None,
    )
    share(how)
    return how


@contextlib.contextmanager
def keeping_connections() -> Iterator[None]:
    """Within: journals opened keep their connection until closed (a few calls in a row, then
    close: a worker's claim helper)."""
    before = _sharing
    share(replace(before, transient=False))
    try:
        yield
    finally:
        share(before)


@contextlib.contextmanager
def named(application: str) -> Iterator[None]:
    """Within: keep how this process connects, under another ``application_name``. Restored
    after: a node or a dashboard run inside a longer-lived process (a test, a script) must not
    go on naming that process's later connections after itself."""
    before = _sharing
    share(replace(before, application=application))
    try:
        yield
    finally:
        share(before)
