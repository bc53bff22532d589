"""The dashboard's read side: what one journal read needs, and the state kept between reads.

``LiveReader.read`` runs in a thread, one read at a time (the App holds a lock around it). It
touches only its own state (the change feed, the row reader, the last count, the filter index)
and what the ``ReadRequest`` carries, captured on the UI thread; results go back as messages.
"""

from __future__ import annotations

import contextlib
import gc
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from textual.message import Message

from refine_tui.goal_index import GoalIndex, matches
from refine_tui.messages import JournalUpdate
from refine_tui.rows import ACTIVE_LIMIT, RECENT_LIMIT, GoalRow, Reader, WorkerRow
from store.errors import StorageError
from store.journal.api import Event, Journal
from store.journal.presence import Presence
from store.journal.watch import ChangeFeed
from store.ops.attempt_spans import attempt_spans
from store.ops.nodes import list_nodes, node_view
from store.ops.pulses import Pulses, read_pulses
from store.ops.reads import goals_touched

FIRST_SCREEN = 100  # a full read shows this many rows first when the height is not known
PAINT_WAIT_S = 1.0  # how long a full read waits for its first screen to be painted
# While a long read runs beside them (the index's build, the rest of a new list), the other
# threads get the GIL back this soon (Python's default, 5 ms, made a change read wait 100-400 ms
# during the build, and each step of the frame after a new list's first screen wait too).
HANDOFF_SWITCH_S = 0.0005
PRESENCE_READ_S = 5.0  # nodes' presence is read this often for the alerts (beats commit nothing)


class _Handoff:
    """Python's switch interval lowered while any long read runs (it is process-wide: the last
    one to finish puts it back)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running = 0
        self._saved = sys.getswitchinterval()

    @contextlib.contextmanager
    def __call__(self) -> Iterator[None]:
        with self._lock:
            if not self._running:
                self._saved = sys.getswitchinterval()
                sys.setswitchinterval(HANDOFF_SWITCH_S)
            self._running += 1
        try:
            yield
        finally:
            with self._lock:
                self._running -= 1
                if not self._running:
                    sys.setswitchinterval(self._saved)


gil_handoff = _Handoff()


@contextlib.contextmanager
def _no_gc() -> Iterator[None]:
    """No full collection while a read makes many objects at once (each would hold the GIL
    ≈ 100 ms over the app's objects), as the index build does (``follow.build_index``)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@dataclass
class Wants:
    """What the open views want read next. Each view writes its own fields when they change (on
    the UI thread); the follower captures them in a ``ReadRequest`` just before each read."""

    filter: str = ""  # the Goals view's filter
    first_screen: int = FIRST_SCREEN  # the Goals view's height, and the lines the filter box frees
    view: str = "goals"  # the view shown (the view stack's)
    goal_id: str | None = None  # the Goal the Runs view is about
    goal_node: str | None = None  # its node, as the Goals list showed it
    run_id: str | None = None  # the Run the Attempts view is about
    history_run: str | None = None  # the Run whose history the detail pane shows
    history_after: int = 0  # the last sequence of it shown
    timeline: tuple[str, str | None] | None = None  # the timeline screen's (goal_id, run_id)

    def request(self, full: bool, recheck: tuple[str, ...] = ()) -> ReadRequest:
        return ReadRequest(
            full=full,
            filter=self.filter,
            view=self.view,
            goal_id=self.goal_id,
            run_id=self.run_id,
            history_run=self.history_run,
            history_after=self.history_after,
            recheck=recheck,
            goal_node=self.goal_node,
            first_screen=self.first_screen,
            timeline=self.timeline,
        )


@dataclass(frozen=True)
class ReadRequest:
    """What the live worker should read, captured on the UI thread."""

    full: bool
    filter: str
    view: str
    goal_id: str | None
    run_id: str | None
    history_run: str | None
    history_after: int
    recheck: tuple[str, ...] = ()  # goals to re-read even without events (process liveness)
    goal_node: str | None = None  # the drilled-into Goal's node, as the screen shows it
    first_screen: int = FIRST_SCREEN  # rows a new list shows first: the table's height and more
    timeline: tuple[str, str | None] | None = None  # (goal_id, run_id): its attempts' spans


class LiveReader:
    """Reads what changed since the last read, through one ChangeFeed connection."""

    def __init__(self, feed: ChangeFeed, node: str, *, pulses: bool = True) -> None:
        """``pulses``: read the pulses (DESIGN §17); without them the dashboard draws none."""
        self.feed = feed
        self.node = node
        self.pulsing = pulses
        self.reader: Reader | None = None  # also lent to process looks and the log pane
        self._generation = 0
        self._counted: tuple[int, int] | None = None  # Goals, and the last sequence they count
        self._index: tuple[int, GoalIndex] | None = None  # feed generation, filter index
        self._listed: str | None = None  # the filter of the last full read
        self.pulses: Pulses | None = None  # the last hour's, read once per journal then kept
        self._pulsed_generation = -1
        self._pruned_minute = 0  # the minute the pulses last dropped what left the window
        # The Goals the filter shows (None: no filter, every Goal), as the Goals view lists
        # them: the pulses are narrowed to these.
        self._shown: set[str] | None = None
        self._presence_read_at = -PRESENCE_READ_S  # (monotonic) the last look at presence

    def presence_due(self) -> bool:
        """The nodes' presence is due another look (any read takes it then)."""
        return time.monotonic() - self._presence_read_at >= PRESENCE_READ_S

    @property
    def indexed(self) -> bool:
        return self._index is not None

    def find_log(self, run_id: str, epoch: int, node_id: str) -> str | None:
        """(thread) The attempt's local log file (None: it ran on another node)."""
        if self.reader is None:
            raise StorageError("the journal is not read yet")
        return self.reader.log_path(run_id, epoch, node_id)

    def worker_rows(self) -> list[WorkerRow]:
        """(thread) This node's worker processes (none before the journal is read)."""
        return self.reader.worker_rows() if self.reader is not None else []

    def build_index(self) -> tuple[int, int, GoalIndex] | None:
        """(thread, no lock needed) The filter's in-memory index, read through a connection of
        its own so that live reads go on meanwhile (≈ 1 s at 100k). Returns the feed generation
        it is for, the last sequence it saw and the index; ``adopt_index`` brings it up to date.
        """
        generation, journal = self.feed.generation, self.feed.journal
        if journal is None:
            return None
        with gil_handoff(), Journal.open(self.feed.location, read_only=True, create=False) as own:
            if own.journal_id != journal.journal_id:
                return None  # the location names another journal now: the feed reopens
            seen, index = GoalIndex.build(own)
        return generation, seen, index

    def adopt_index(self, built: tuple[int, int, GoalIndex]) -> None:
        """(thread, under the read lock) Take in the commits made while the index was built,
        then use it: it ends exactly as the journal is."""
        generation, seen, index = built
        journal = self.feed.journal
        if journal is None or generation != self.feed.generation:
            return  # another journal since: the next round builds again
        reader = self.reader or Reader(journal, self.node)
        while events := journal.events_after(seen):
            changed = goals_touched(events)
            index.update(reader.goal_rows(changed), changed)
            seen = events[-1].sequence
        self._index = (generation, index)

    def _total(self, journal: Journal, events: list[Event]) -> int:
        """How many Goals there are: counted once per journal, in one snapshot with the last
        sequence it counted, then kept by the creations after that sequence (a Goal never
        leaves its journal). Counting is O(Goals): ≈ 2–30 ms at 100k, and on a server for each
        dashboard; it was once per new Goal (≈ 0.3 ms of the server's CPU at 2,000 Goals, per
        dashboard per commit). A commit between the feed's poll and the count is in the count
        and in the next poll: the sequence keeps it from counting twice."""
        if self._counted is None:
            with journal.snapshot():
                total, counted_to = journal.count("goal"), journal.last_commit()[0]
        else:
            total, counted_to = self._counted
        later = [e for e in events if e.sequence > counted_to]  # events come in sequence order
        if later:
            total += sum(1 for e in later if e.type == "goal.created")
            counted_to = later[-1].sequence
        self._counted = (total, counted_to)
        return total

    def read(self, req: ReadRequest, post: Callable[[Message], bool]) -> JournalUpdate | None:
        """(thread) Poll the feed and read the rows the new events touched.

        ``post``: how a new list's first screen goes out ahead of the whole list.
        """
        with self.feed.held():  # one connection for the whole read (a served tab's: DESIGN §14)
            return self._read(req, post)

    def _read(self, req: ReadRequest, post: Callable[[Message], bool]) -> JournalUpdate | None:
        events = self.feed.poll()
        journal = self.feed.journal
        assert journal is not None
        full = req.full or self.feed.generation != self._generation
        if self.reader is None or self.reader.journal is not journal:
            self.reader = Reader(journal, self.node)
        if self.feed.generation != self._generation:
            self._counted = None  # another file (or the first read): count again
        if self._index is not None and self._index[0] != self.feed.generation:
            self._index = None  # another file: another journal
        reader = self.reader
        self._generation = self.feed.generation
        reader.learn(events)
        pulsed = self._pulse(events)
        presence = self._presence(journal)
        changed = goals_touched(events)
        touched = set(changed) | set(req.recheck)
        # Presence changes without a commit: the Nodes view reads it on every wake-up.
        if not full and not touched and req.view != "nodes" and not pulsed and not presence:
            return None
        index = self._index[1] if self._index is not None else None
        if full and index is not None:
            if changed:  # the list below must see these commits: take them in first
                index.update(reader.goal_rows(changed), changed)
            changed = []
            if req.filter:
                ids = index.matching(req.filter, ACTIVE_LIMIT + RECENT_LIMIT)
            else:
                ids = index.listed(ACTIVE_LIMIT, RECENT_LIMIT)
            total = self._total(journal, events)
        elif full:
            ids, total = reader.visible_goal_ids(req.filter)
            self._counted = None  # this read's creations are not taken in: count anew next
        else:
            ids, total = sorted(touched), self._total(journal, events)
        screen, first, snapshot = req.first_screen, {}, journal.immutable
        if full and len(ids) > screen and req.view == "goals" and req.filter != self._listed:
            # A new list (first load, new filter): the rows a screen shows first, the other
            # ~1,100 after. A reload of the same list keeps the cursor where it is instead.
            first = reader.goal_rows(ids[:screen])
            seq, at = _last_commit(journal, events)
            painted = threading.Event()
            partial = JournalUpdate(
                True, first, total, seq, at, partial=True, painted=painted, snapshot=snapshot
            )
            if post(partial):
                painted.wait(PAINT_WAIT_S)  # painted before the rest competes for the GIL
        if full:
            self._listed = req.filter
            self._shown = set(ids) if req.filter else None
        with gil_handoff() if first else contextlib.nullcontext():
            goals = first | reader.goal_rows(ids[len(first) :])  # the first screen is read once
        if index is not None:
            index.update(goals, changed)
        seq, at = _last_commit(journal, events)
        update = JournalUpdate(full, goals, total, seq, at, snapshot=snapshot)
        if req.goal_id and (full or req.goal_id in touched):
            update.runs = reader.run_rows(req.goal_id)
            if req.run_id:
                goal = goals.get(req.goal_id)
                node = goal.node_id if goal else req.goal_node
                update.attempts = reader.attempt_rows(req.run_id, node or "")
                if node and node != self.node:  # its processes are seen there: its presence
                    update.presence = node_view(journal, node, count=False)
        if req.history_run:
            after = 0 if full else req.history_after
            update.history = [e for e in reader.history(req.history_run) if e.sequence > after]
        if req.view == "nodes":
            update.nodes = list_nodes(journal)
        if req.timeline is not None and (full or req.timeline[0] in touched):
            update.timeline = (req.timeline, attempt_spans(journal, *req.timeline))
        shown = not full and self._show(goals, req.filter)  # the filter shows more or fewer
        if pulsed and self._pulsed_generation != self.feed.generation:
            # The last hour's history (≈ 0.1 s with 20,000 attempt events in it), read after
            # the rows, handing the GIL back soon: the first screen's frame is being written.
            with gil_handoff(), _no_gc():
                self.pulses = read_pulses(journal, time.time(), upto=self.feed.last_sequence)
            self._pulsed_generation = self.feed.generation
        if self.pulses is not None and (pulsed or full or shown):
            # The UI's own copy, only the shown Goals' counts when filtered (a sum in memory).
            narrow = self._shown
            update.pulses = (
                self.pulses.totals() if narrow is None else self.pulses.narrowed_to(narrow)
            )
        update.node_presence = presence
        return update

    def _presence(self, journal: Journal) -> tuple[float, list[Presence]] | None:
        """(thread) Every node's presence, when due (None: not this read)."""
        if not self.presence_due():
            return None
        self._presence_read_at = time.monotonic()
        return journal.presence()

    def _show(self, goals: dict[str, GoalRow | None], filter: str) -> bool:
        """(thread) Rows commits brought, taken into the Goals the filter shows as the Goals view
        takes them (a new match is listed, a gone Goal leaves); True if those changed."""
        shown = self._shown
        if shown is None:
            return False
        before = len(shown)
        for goal_id, row in goals.items():
            if row is None:
                shown.discard(goal_id)
            elif matches(row, filter):
                shown.add(goal_id)
        return len(shown) != before

    def _pulse(self, events: list[Event]) -> bool:
        """(thread) The pulses: these events noted; True also when the last hour is to be read
        (once per journal, by ``_read`` after the rows: it holds these events)."""
        if not self.pulsing:
            return False
        if self.pulses is None or self.feed.generation != self._pulsed_generation:
            return True
        now = time.time()
        if (minute := int(now // 60)) != self._pruned_minute:
            self._pruned_minute = minute
            self.pulses.prune(now)  # once a minute: the per-Goal counts would grow all day
        return self.pulses.note((e.type, e.committed_at, e.aggregate_id, e.data) for e in events)


def _last_commit(journal: Journal, events: list[Event]) -> tuple[int, float | None]:
    """The journal's last commit as this read saw it: the newest event polled (the poll reads
    to the head), else asked (one statement fewer per read: on a server, per dashboard per
    commit)."""
    if events:
        return events[-1].sequence, events[-1].committed_at
    return journal.last_commit()
