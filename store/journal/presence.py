"""Node presence (DESIGN §14): a node's heartbeat and clean-exit mark, and the state they show.

Observation only, never authority (§2: time ends nothing): presence ends, requeues and reassigns
nothing. It is evidence for people, and the precondition of ``refine cleanup --node`` (an
operator's statement about a whole node, store.ops.node_cleanup).

- ``refine node`` writes a beat when it starts, every ``interval_s`` (default 5 s; ``--heartbeat``
  or ``$REFINE_HEARTBEAT_S``) and a clean-exit mark when SIGINT/SIGTERM ends it (``Heartbeat``).
- A node is ``live`` while its last beat is at most ``MISSED_BEATS`` of its own intervals old,
  ``silent`` after that, ``stopped`` once it exited cleanly (its workers may still run: they
  outlive their node). A node the journal knows only from its goals (it never beat: not started
  since presence exists) is ``unknown``.
- Beats stay out of the command journal: one row per node (``node_presence``) is overwritten
  outside any command transaction, with no event, no receipt, no NOTIFY, and no new sequence,
  so nothing that follows the journal by sequence wakes for a beat.
- One clock decides: the database's. Each beat stores the database's time of writing and each
  read returns the database's time of reading (PostgreSQL's ``now()`` on the server; SQLite's
  ``julianday('now')``, the clock of the one machine that holds the file), so machines whose
  clocks disagree never make a node look silent or live.
- A journal that was down took no beats: silence counts from the later of a node's last beat
  and the journal's start (a PostgreSQL server's), so a server restart does not make every node
  of the fleet look silent (and open to ``refine cleanup --node``) until it beats again.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal

from store.errors import InvalidInputError, RefineError
from store.names import check_name
from store.records import dataclass

# Both journal backends import this module: asyncio and datetime are imported where they are
# used, so a quick `refine goals` does not load them (DESIGN §9, CLI start-up).
if TYPE_CHECKING:
    import asyncio

    from store.journal.api import Journal

HEARTBEAT_ENV = "REFINE_HEARTBEAT_S"
DEFAULT_HEARTBEAT_S = 5.0
MIN_HEARTBEAT_S, MAX_HEARTBEAT_S = 0.05, 3600.0
MISSED_BEATS = 3  # a node is silent once this many of its own intervals passed without a beat

BeatKind = Literal["start", "beat", "stop"]
State = Literal["live", "silent", "stopped", "unknown"]
STATES: tuple[State, ...] = ("live", "silent", "stopped", "unknown")


def heartbeat_interval(seconds: float | None = None) -> float:
    """``seconds``, else ``$REFINE_HEARTBEAT_S``, else 5 s; InvalidInputError outside
    0.05–3600 s (a node that beats 100 times a second would be a load, not a presence)."""
    if seconds is None:
        text = os.environ.get(HEARTBEAT_ENV) or ""
        if not text:
            return DEFAULT_HEARTBEAT_S
        try:
            seconds = float(text)
        except ValueError:
            raise InvalidInputError(f"{HEARTBEAT_ENV} is not a number: {text!r}") from None
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, int | float)
        or not MIN_HEARTBEAT_S <= seconds <= MAX_HEARTBEAT_S
    ):
        raise InvalidInputError(
            f"the heartbeat interval must be {MIN_HEARTBEAT_S:g} to {MAX_HEARTBEAT_S:g} seconds"
        )
    return float(seconds)


@dataclass(frozen=True)
class Beat:
    """What a node writes: ``start`` (a new node process), ``beat``, ``stop`` (clean exit)."""

    node_id: str
    kind: BeatKind
    host: str
    capacity: int
    version: str
    interval_s: float


@dataclass(frozen=True)
class Presence:
    """A node's row as stored: times are the database's clock (seconds since the epoch)."""

    node_id: str
    host: str
    capacity: int
    version: str
    interval_s: float
    last_seen: float
    started_at: float
    stopped_at: float | None
    # When the journal began to take beats (a PostgreSQL server's start), if later than the last
    # beat: no node could beat while its server was down, so silence counts from then.
    beats_taken_since: float | None = None

    def state(self, now: float) -> State:
        """``stopped`` once it exited cleanly, else ``live`` within ``MISSED_BEATS`` intervals
        of its last beat (by the database's clock ``now``) or of the journal's own start,
        whichever is later, else ``silent``."""
        if self.stopped_at is not None:
            return "stopped"
        since = max(self.last_seen, self.beats_taken_since or 0.0)
        return "live" if now - since <= MISSED_BEATS * self.interval_s else "silent"


# What both backends store and read, in this order (``presence_row`` parses a row of them).
PRESENCE_COLUMNS = "node_id, host, capacity, version, interval_s, last_seen, started_at, stopped_at"


def beat_row(beat: Beat) -> dict[str, object]:
    """A beat, checked, as the named parameters of the backends' presence upserts.

    InvalidInputError for a beat no node would write: presence rows are shown to operators
    and name the node ``refine cleanup --node`` acts on."""
    check_name(beat.node_id, "node_id")
    if beat.kind not in ("start", "beat", "stop"):
        raise InvalidInputError("a beat's kind is start, beat or stop")
    if type(beat.capacity) is not int or beat.capacity < 1:
        raise InvalidInputError("capacity must be a positive integer")
    heartbeat_interval(beat.interval_s)
    for name, text in (("host", beat.host), ("version", beat.version)):
        if type(text) is not str or not 0 < len(text) <= 255:
            raise InvalidInputError(f"a beat's {name} is 1–255 characters of text")
    return {
        "node_id": beat.node_id,
        "kind": beat.kind,
        "host": beat.host,
        "capacity": beat.capacity,
        "version": beat.version,
        "interval_s": beat.interval_s,
    }


def presence_row(row: Sequence[Any], beats_taken_since: float | None = None) -> Presence:
    """A stored row (``PRESENCE_COLUMNS``) as a Presence."""
    node_id, host, capacity, version, interval_s, last_seen, started_at, stopped_at = row
    return Presence(
        node_id=str(node_id),
        host=str(host),
        capacity=int(capacity),
        version=str(version),
        interval_s=float(interval_s),
        last_seen=float(last_seen),
        started_at=float(started_at),
        stopped_at=None if stopped_at is None else float(stopped_at),
        beats_taken_since=beats_taken_since,
    )


def iso_utc(timestamp: float | None) -> str | None:
    """``2026-12-01T10:00:00.123Z`` (None stays None)."""
    if timestamp is None:
        return None
    from datetime import UTC, datetime

    moment = datetime.fromtimestamp(timestamp, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def refine_version() -> str:
    """This installation's version (``refine_build_info`` and presence name it)."""
    from importlib import metadata  # here: only a node (and a metrics page) asks

    try:
        return metadata.version("refine-tui")
    except metadata.PackageNotFoundError:
        return "unknown"


class Heartbeat:
    """A node's beats on the journal ``journal_of()`` returns (the node's own connection: a
    beat opens none), as a task on the node's event loop, so ``live`` means its loop turns.

    A beat that cannot be written (journal locked or unreachable) is said once on stderr and
    tried again at the next interval: presence is evidence, never a reason to stop the node.
    """

    def __init__(
        self,
        journal_of: Callable[[], Journal],
        node_id: str,
        *,
        capacity: int,
        interval_s: float,
    ) -> None:
        self.journal_of = journal_of
        self.node_id = node_id
        self.capacity = capacity
        self.interval_s = interval_s
        self.host = os.uname().nodename
        self.version = refine_version()
        self.failing = False  # the last beat failed (said once until one succeeds)

    def write(self, kind: BeatKind) -> bool:
        """Write one beat now; False when it could not be written."""
        beat = Beat(self.node_id, kind, self.host, self.capacity, self.version, self.interval_s)
        try:
            self.journal_of().write_presence(beat)
        except RefineError as exc:
            if not self.failing:
                print(f"node {self.node_id}: heartbeat not written: {exc}", file=sys.stderr)
            self.failing = True
            return False
        self.failing = False
        return True

    async def run(self, stop: asyncio.Event) -> None:
        """Beat at once and every interval until ``stop`` is set; then the clean-exit mark.
        (Cancelled instead, as when the node's loop fails, it leaves no mark: ``silent``.)"""
        import asyncio

        self.write("start")
        due = time.monotonic() + self.interval_s
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(0.0, due - time.monotonic()))
            if stop.is_set():
                break
            self.write("beat")
            due = time.monotonic() + self.interval_s
        self.write("stop")

    async def end(self, task: asyncio.Task[None], *, clean: bool) -> None:
        """After the node's loop: on a clean stop, let ``task`` write the clean-exit mark (its
        ``stop`` is set); otherwise cancel it, leaving no mark (the node turns ``silent``)."""
        import asyncio

        if clean:
            await task
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
