"""Which Goals changed since the node last looked: a cursor over the journal's events.

A node's housekeeping asks of each running attempt whether a cancellation is pending. Asking
the journal about every attempt every round (a read each: 1,000 reads every 2 s at 1,000
attempts) was most of its idle CPU, while an attempt's answer can only change with an event of
its Goal or Run. So the node reads each attempt once, then again only after an event touched
its Goal (``since``). Events are gap-free in commit order on both backends (SQLite: one writer;
PostgreSQL: the sequence comes from one head row held to commit), so once the events up to a
sequence are read, every commit up to it is known here, and any read after sees them.
"""

from __future__ import annotations

from store.journal.api import MAX_PAGE, Journal
from store.model.goal import goal_id_of


class TouchedGoals:
    """``since(journal)``: the Goals whose Goal or Run an event touched since the last call."""

    def __init__(self) -> None:
        self._journal: Journal | None = None
        self._after = 0

    def since(self, journal: Journal) -> set[str] | None:
        """The ids of the Goals touched since the last call; None when that is unknown (the
        first call on this journal, another journal, or one that went back: anything may have
        changed). Raises as the journal does, having moved on by nothing (the next call reads
        the same)."""
        if journal is not self._journal:
            self._journal, self._after = None, 0
            after = journal.last_sequence()  # before the caller reads what it then knows
            self._journal, self._after = journal, after
            return None
        touched: set[str] = set()
        after = self._after
        while True:
            page = journal.event_records(after, MAX_PAGE)
            for _, aggregate_id, *_ in page:
                goal_id = goal_id_of(aggregate_id)
                if goal_id is not None:
                    touched.add(goal_id)
            if page:
                after = page[-1][0]
            elif after == self._after and journal.last_sequence() < after:
                # The journal went back (a restored backup under the same id): what it holds
                # now was never read here.
                self._journal = None
                return self.since(journal)
            if len(page) < MAX_PAGE:
                self._after = after  # only now: a failed page is read again next time
                return touched
