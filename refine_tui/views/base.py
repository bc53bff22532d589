"""What every view of the stack is: a table that owns the rows behind it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from textual.binding import Binding, BindingType

from refine_tui.follow import JournalFollower
from refine_tui.widgets.keyed_table import Column, KeyedTable


class TableView(KeyedTable):
    """A view: a table, the rows behind it and its part of the next read (``follower.wants``).

    Shown one at a time by the ``ViewStack``; ``VIEW`` is its name there and its id (goals,
    runs, attempts, workers), which the read request and the actions know it by. A view is its
    table rather than a container around one: bindings run once a key has bubbled up to the
    App, and a container is one more message queue on that way for every key (under 50
    commits/s the key response looked slower with one, in noisy runs on a loaded machine).
    """

    VIEW: ClassVar[str]

    @staticmethod
    def opens(description: str) -> list[BindingType]:
        """enter in the footer, named after what it opens (shown while a row is selected)."""
        return [Binding("enter", "select_cursor", description)]

    def __init__(self, columns: Sequence[Column], follower: JournalFollower) -> None:
        super().__init__(columns, id=self.VIEW)
        self.follower = follower

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "select_cursor":  # enter: only onto a row (else not in the footer)
            return self.selected_key is not None
        return True

    def words(self) -> str | None:
        """The selected row in words, whole: what the columns had to cut at 80 columns (None:
        no row is selected)."""
        raise NotImplementedError
