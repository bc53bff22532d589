"""The Goals view: the listed Goals, their table, the filter, and a new list going into the table
a chunk per turn of the event loop (keys and messages handled between chunks).

It owns the listed rows, the filter (its part of the read: ``follower.wants.filter``, and its
height: how many rows a new list shows first), the Goal columns' widths and the rows still in
their launch window. The dashboard hands it the Goals slice of each journal update (``take``);
enter on a row goes up as ``GoalsView.Opened``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

from textual import events, on
from textual.message import Message
from textual.reactive import var
from textual.widgets import DataTable

from refine_tui import cells
from refine_tui import format as fmt
from refine_tui.cells import BASE_WIDTHS, GOAL_COLUMNS, Cells
from refine_tui.follow import JournalFollower
from refine_tui.goal_index import matches
from refine_tui.observe import LaunchWindows
from refine_tui.rows import ACTIVE, RECENT_LIMIT, GoalRow
from refine_tui.sorted_rows import SortedRows
from refine_tui.views.base import TableView
from store.journal.presence import Presence

# A marked Goal's id cell starts with this (a glyph, not a colour: it reads in monochrome).
MARK = "●"

# A long list (a filter's ~1,200 rows) goes into the table this many rows per turn of the event
# loop, keys handled between turns: all at once it held them for 40–400 ms at 100,000 Goals.
FILL_CHUNK = 200
# Terminal Goals beyond the most recent ones a list keeps go this many at a time, or more.
FORGET_SLACK = 50


class GoalsView(TableView):
    """The listed Goals: ``listed`` (in list order), some of them not in the table yet."""

    VIEW = "goals"
    BINDINGS: ClassVar = TableView.opens("Runs")
    filter: var[str] = var("", init=False, always_update=True)
    """What the list is filtered by (id, title, status or node contains it)."""
    paused: var[bool] = var(False, init=False)
    """The dashboard is paused: nothing ticks or is read again meanwhile."""

    @dataclass
    class Opened(Message):
        """enter on a Goal: show its Runs."""

        goal: GoalRow

    def __init__(
        self, follower: JournalFollower, clock: Callable[[], float], own_node: str | None = None
    ) -> None:
        super().__init__(GOAL_COLUMNS, follower)
        self.clock = clock
        self.widths = {k: BASE_WIDTHS[k] for k in ("title", "note")}  # grown on wide terminals
        self.listed: SortedRows[GoalRow] = SortedRows()  # the table's and the unfilled
        self.unfilled: dict[str, None] = {}  # listed Goals not in the table yet, in list order
        self.generation = 0  # a newer list cancels the chunks an older one has left
        self.marked: dict[str, None] = {}  # marked Goals (§15), in the order marked
        # Listed terminal Goals, the one changed longest ago first, and how many stay listed:
        # a new list's own, or RECENT_LIMIT (commits would otherwise add every Goal ever ended).
        self.ended: dict[str, None] = {}
        self.keep_ended = RECENT_LIMIT
        # Other nodes that are not live ({node: "silent" | "stopped"}): their active Goals (running
        # there, or waiting for them) say so in the Note (presence changes without a commit).
        self.away: dict[str, str] = {}
        self.own_node = own_node  # its own attempts are judged by their processes instead
        self.launches = LaunchWindows(self, paused=lambda: self.paused, recheck=follower.read)
        follower.wants.first_screen = first_screen(0)  # not laid out yet

    def on_resize(self, event: events.Resize) -> None:
        self.follower.wants.first_screen = first_screen(self.size.height)

    def on_mount(self) -> None:  # (Textual calls KeyedTable's too: the columns)
        # Rows scrolled into view show their elapsed time now, not within a second.
        self.watch(self, "scroll_y", self.tick, init=False)

    def watch_filter(self, text: str) -> None:
        self.stop()  # a newer filter: the older list's remaining chunks would be stale
        self.follower.wants.filter = text

    @property
    def filling(self) -> bool:
        """Part of the list is still on its way into the table, a chunk per turn."""
        return bool(self.unfilled)

    def crumbs(self) -> str:
        return f"Goals — filter “{self.filter}”" if self.filter else "Goals"

    def cells(self, row: GoalRow) -> Cells:
        shown = cells.goal_cells(row, self.widths, self.clock, self._away(row))
        if row.goal_id in self.marked:
            return (f"{MARK} {fmt.clip(row.goal_id, 12)}", *shown[1:])
        return shown

    def matches(self, row: GoalRow) -> bool:
        return matches(row, self.filter)

    def selected_row(self) -> GoalRow | None:
        key = self.selected_key
        return self.listed.get(key) if key else None

    def words(self) -> str | None:
        key = self.selected_key
        if key is None:
            return None
        row = self.listed.get(key)
        return cells.goal_words(row, self._away(row)) if row else ""

    def _away(self, row: GoalRow) -> str | None:
        """The presence of an active Goal's node when it is another one and not live."""
        return self.away.get(row.node_id) if row.status in ACTIVE else None

    @on(DataTable.RowSelected)
    def _opened(self, event: DataTable.RowSelected) -> None:
        event.stop()
        if (key := event.row_key.value) and (row := self.listed.get(key)):
            self.post_message(self.Opened(row))

    # --- the journal's updates --------------------------------------------------------------

    def take(self, goals: Mapping[str, GoalRow | None], full: bool) -> None:
        """The Goals slice of a journal update: the whole list (``full``) or the rows a commit
        changed (None: gone)."""
        if full:
            self.show({k: r for k, r in goals.items() if r is not None})
        else:
            self.apply(goals)
        self.launches.note(goals, full)

    def show(self, rows: dict[str, GoalRow]) -> None:
        """Make ``rows`` the Goals list: its first chunk and the rows already shown at once
        (the cursor stays on its key), the rest a chunk per turn of the event loop."""
        self.listed = SortedRows(rows)
        self.ended = dict.fromkeys(k for k, r in rows.items() if r.terminal)
        self.keep_ended = max(RECENT_LIMIT, len(self.ended))
        self.generation += 1
        keys = list(rows)
        shown = set(self.keys())
        now = [k for i, k in enumerate(keys) if i < FILL_CHUNK or k in shown]
        self.unfilled = dict.fromkeys(k for k in keys[FILL_CHUNK:] if k not in shown)
        self.sync({k: self.cells(rows[k]) for k in now})
        if self.unfilled:
            self.app.call_after_refresh(self._fill, self.generation)

    def _fill(self, generation: int) -> None:
        """The next chunk of the list; queued keys and messages are handled before the next."""
        if generation != self.generation or not self.app.is_running:
            return  # a newer list took its place, or the app is closing
        with self.app.batch_update():
            for key in list(itertools.islice(self.unfilled, FILL_CHUNK)):
                del self.unfilled[key]
                self.upsert(key, self.cells(self.listed[key]))
            if not self.unfilled:  # rows the table held beyond the first chunk: into place
                self.order(list(self.listed))
        if self.unfilled:
            self.app.call_after_refresh(self._fill, generation)

    def stop(self) -> None:
        """Another list was asked for: the rest of this one is not shown."""
        self.generation += 1
        for key in self.unfilled:
            self.listed.pop(key)
        self.unfilled = {}

    def apply(self, changes: Mapping[str, GoalRow | None]) -> None:
        """Rows a commit changed (None: gone); a new row is listed if it matches the filter, in
        its place by id as a new list has it (appended, it stayed last until a re-read).

        New rows that sort after every listed one (ids that grow: a sequence, a date) are in
        their place as appended. Others are moved into their place one by one: the list keeps
        its order itself (``SortedRows``), and the table is not put in order, which is O(n)."""
        last = next(reversed(self.listed), None)
        added: list[str] = []
        for key, row in changes.items():
            self.ended.pop(key, None)
            if row is None:
                self.listed.pop(key)
                self.unfilled.pop(key, None)
                self.drop(key)
            elif key in self.listed or self.matches(row):
                if row.terminal:
                    self.ended[key] = None  # the most recently changed: the last to go
                new = key not in self.listed
                if new:
                    added.append(key)
                self.listed.put(key, row)
                if key in self.unfilled or (new and self.unfilled):
                    self.unfilled[key] = None  # shown in its turn: the order holds
                else:
                    self.upsert(key, self.cells(row))
        if added and not _after(last, added):
            if self.unfilled or self.row_count != len(self.listed):  # the unfilled: in turn
                shown = set(self.keys())
                self.order([k for k in self.listed if k in shown])
            else:
                # Each new row from the table's end into its place, the smallest first: the
                # rows above that place are then already the list's own.
                for key in sorted(added):
                    self.move(key, self.listed.index(key))
        self._forget_ended()

    def _forget_ended(self) -> None:
        """Unlist the terminal Goals changed longest ago beyond ``keep_ended``, as a new list
        leaves them out (a dashboard open all day listed every Goal that ended meanwhile: 5,760
        after 20 minutes at 5 Goals a second). ``FORGET_SLACK`` at a time, in one step: a row
        removed at a time cost a layout and the table's row order each (a dashboard beside that
        node used 58 % more CPU). The selected Goal and marked ones stay."""
        surplus = len(self.ended) - self.keep_ended
        if surplus <= FORGET_SLACK:
            return
        kept = (self.selected_key, *self.marked)
        forgotten = [k for k in itertools.islice(self.ended, surplus) if k not in kept]
        for key in forgotten:
            del self.ended[key]
            self.listed.pop(key)
            self.unfilled.pop(key, None)
        self.drop_many(forgotten)

    # --- marks (DESIGN §15): the Goals c, s and R act on together ----------------------------

    def toggle_mark(self) -> None:
        """Mark the selected Goal, or unmark it."""
        key = self.selected_key
        if key is None or key not in self.listed:
            return
        if key in self.marked:
            del self.marked[key]
        else:
            self.marked[key] = None
        self.repaint(key)

    def mark_listed(self) -> None:
        """Mark every Goal the filter shows."""
        for key in self.listed:
            if key not in self.marked:
                self.marked[key] = None
                self.repaint(key)

    def clear_marks(self) -> None:
        marked, self.marked = self.marked, {}
        for key in marked:
            self.repaint(key)

    def hidden_marks(self) -> int:
        """Marked Goals the filter does not show."""
        return sum(1 for key in self.marked if key not in self.listed)

    def repaint(self, key: str) -> None:
        row = self.listed.get(key)
        if row is not None and key not in self.unfilled:
            self.upsert(key, self.cells(row))

    # --- what changes without a commit ------------------------------------------------------

    def set_presence(self, presence: tuple[float, Sequence[Presence]]) -> None:
        """Every node's presence, read again (the database's clock, the rows): the active
        Goals of a node that went silent or stopped, or came back, are shown again."""
        now, rows = presence
        away: dict[str, str] = {
            row.node_id: state
            for row in rows
            if row.node_id != self.own_node and (state := row.state(now)) in ("silent", "stopped")
        }
        if away == self.away:
            return
        changed = {n for n in away.keys() | self.away.keys() if away.get(n) != self.away.get(n)}
        self.away = away
        for key, row in self.listed.items():
            if row.node_id in changed and row.status in ACTIVE:
                self.repaint(key)

    def tick(self) -> None:
        """The visible rows' elapsed times (a cell whose text did not change is not written)."""
        if self.paused or not self.app.is_running:  # a timer can fire while closing
            return
        now = self.clock()
        for key in self.visible_keys():
            row = self.listed.get(key)
            if row is not None and row.started_at is not None:
                self.set_cell(key, "elapsed", fmt.duration(now - row.started_at))

    def set_widths(self, widths: Mapping[str, int]) -> None:
        """Title and Note grown into the room a wide terminal has: every row again."""
        mine = {k: widths[k] for k in self.widths}
        if mine == self.widths:
            return
        self.widths = mine
        for key, width in mine.items():
            self.set_width(key, width)
        for key, row in self.listed.items():
            if key not in self.unfilled:
                self.upsert(key, self.cells(row))

    def watched(self, also: str | None) -> list[GoalRow]:
        """The rows a liveness look covers: the visible Goals and ``also`` (the one the deeper
        views are about)."""
        keys = set(self.visible_keys())
        if also is not None:
            keys.add(also)
        return [r for k in keys if (r := self.listed.get(k)) is not None]


def first_screen(height: int) -> int:
    """How many rows a new list shows first: the table's height, and the lines the filter box
    frees when it closes (held paint: not laid out yet); each costs ≈ 0.5 ms to read and add."""
    return max(height, 20) + 4


def _after(last: str | None, added: list[str]) -> bool:
    """The keys added, in the order added, sort after ``last`` and each after the one before."""
    keys = added if last is None else [last, *added]
    return all(a < b for a, b in itertools.pairwise(keys))
