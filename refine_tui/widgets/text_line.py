"""A line of the dashboard that shows literal text (journal text is data, never markup)."""

from __future__ import annotations

from typing import Any

from textual.widgets import Static

from refine_tui import format as fmt


class TextLine(Static):
    """Updated only when its text changes: an update lays the screen out again. With
    ``hide_empty`` it takes no room while it has nothing to say."""

    def __init__(self, *, hide_empty: bool = False, **kwargs: Any) -> None:
        super().__init__("", **kwargs)
        self.hide_empty = hide_empty
        self.said: str | None = None  # nothing yet: the first ``say`` always updates

    def say(self, text: str) -> None:
        if text == self.said:
            return
        self.said = text
        self.update(fmt.literal(text))
        if self.hide_empty:
            self.display = bool(text)
