"""The dashboard's read side: what one journal read needs, and the state kept between reads.

``LiveReader.read`` runs in a thread, one read at a time (the App holds a lock around it). It
touches only its own state (the change feed, the row reader, the last count, the filter index)
and what the ``ReadRequest`` carries, captured on the UI thread; results go back as messages.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from textual.message import Message

from refine_tui.goal_index import GoalIndex
from refine_tui.messages import JournalUpdate
from refine_tui.rows import Reader
from store.reads import goals_touched
from store.watch import ChangeFeed

FIRST_SCREEN = 100  # a full read shows this many rows first (more than a terminal's height)
PAINT_WAIT_S = 1.0  # how long a full read waits for its first screen to be painted


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


class LiveReader:
    """Reads what changed since the last read, through one ChangeFeed connection."""

    def __init__(self, feed: ChangeFeed, node: str) -> None:
        self.feed = feed
        self.node = node
        self.reader: Reader | None = None  # also lent to process looks and the log pane
        self._generation = 0
        self._goal_total: int | None = None  # the last count of Goals
        self._index: tuple[int, GoalIndex] | None = None  # feed generation, filter index
        self._listed: str | None = None  # the filter of the last full read

    @property
    def indexed(self) -> bool:
        return self._index is not None

    def build_index(self) -> None:
        """(thread) The filter's in-memory index of the journal the feed has open."""
        journal, generation = self.feed.journal, self.feed.generation
        if journal is None:
            return
        index = GoalIndex.build(journal)
        if generation == self.feed.generation:
            self._index = (generation, index)

    def read(self, req: ReadRequest, post: Callable[[Message], bool]) -> JournalUpdate | None:
        """(thread) Poll the feed and read the rows the new events touched.

        ``post``: how a new list's first screen goes out ahead of the whole list.
        """
        events = self.feed.poll()
        journal = self.feed.journal
        assert journal is not None
        full = req.full or self.feed.generation != self._generation
        if self.reader is None or self.reader.journal is not journal:
            self.reader = Reader(journal, self.node)
        if self._index is not None and self._index[0] != self.feed.generation:
            self._index = None  # another file: another journal
        reader = self.reader
        self._generation = self.feed.generation
        reader.learn(events)
        touched = set(goals_touched(events)) | set(req.recheck)
        if not full and not touched:
            return None
        index = self._index[1] if self._index is not None else None
        if full:
            ids, total = reader.visible_goal_ids(req.filter, index.matching if index else None)
        else:
            ids, known = sorted(touched), self._goal_total
            # Counting is O(Goals) (≈ 2 ms at 100k, on every commit): only a creation changes it.
            created = any(e.type == "goal.created" for e in events)
            total = known if known is not None and not created else journal.count("goal")
        self._goal_total = total
        if full and len(ids) > FIRST_SCREEN and req.view == "goals" and req.filter != self._listed:
            # A new list (first load, new filter): the rows a screen shows first, the other
            # ~1,100 after. A reload of the same list keeps the cursor where it is instead.
            first = reader.goal_rows(ids[:FIRST_SCREEN])
            seq, at = journal.last_commit()
            painted = threading.Event()
            partial = JournalUpdate(True, first, total, seq, at, partial=True, painted=painted)
            if post(partial):
                painted.wait(PAINT_WAIT_S)  # painted before the rest competes for the GIL
        if full:
            self._listed = req.filter
        goals = reader.goal_rows(ids)
        if index is not None:
            index.update(goals)
        seq, at = journal.last_commit()
        update = JournalUpdate(full, goals, total, seq, at)
        if req.goal_id and (full or req.goal_id in touched):
            update.runs = reader.run_rows(req.goal_id)
            if req.run_id:
                goal = goals.get(req.goal_id)
                node = goal.node_id if goal else req.goal_node
                update.attempts = reader.attempt_rows(req.run_id, node or "")
        if req.history_run:
            after = 0 if full else req.history_after
            update.history = [e for e in reader.history(req.history_run) if e.sequence > after]
        return update
