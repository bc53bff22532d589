"""What every view of the stack is: a container around the one table it owns."""

from __future__ import annotations

from typing import ClassVar

from textual.containers import Container

from refine_tui.follow import JournalFollower
from refine_tui.widgets.keyed_table import KeyedTable


class TableView(Container):
    """A view: its table, the rows behind it and its part of the next read (``follower.wants``).

    Shown one at a time by the ``ViewStack``; ``VIEW`` is its name there (goals, runs, attempts,
    workers), which the read request and the actions know it by.
    """

    VIEW: ClassVar[str]

    def __init__(self, table: KeyedTable, follower: JournalFollower) -> None:
        super().__init__(table, id=f"{self.VIEW}-view")
        self.table = table
        self.follower = follower

    def words(self) -> str | None:
        """The selected row in words, whole: what the columns had to cut at 80 columns (None:
        no row is selected)."""
        raise NotImplementedError
