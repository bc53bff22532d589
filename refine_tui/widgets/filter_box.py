"""The filter's input line, opened with `/`, closed once the new list is on screen: the Goals'
filter, or in the Nodes view the nodes'."""

from __future__ import annotations

from typing import Any, Literal

from textual.widgets import Input

Subject = Literal["goals", "nodes"]
PLACEHOLDERS: dict[Subject, str] = {
    "goals": "filter goals: id, title, status or node (enter)",
    "nodes": "filter nodes: id, state or host (enter)",
}


class FilterBox(Input):
    """Opened with the current filter; after enter it closes the frame after the new list is
    painted (``close_later``, then ``finish_closing``): closing it with the list would lay the
    screen out again and draw every line of the taller table in the list's frame."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(placeholder=PLACEHOLDERS["goals"], **kwargs)
        self.closing = False  # closes after the new list (not opened again meanwhile)
        self.subject: Subject = "goals"  # what the text typed filters

    @property
    def is_open(self) -> bool:
        """Shown and not about to close: escape clears the filter."""
        return self.display and not self.closing

    def open(self, text: str, subject: Subject = "goals") -> None:
        self.value = text
        self.subject = subject
        self.placeholder = PLACEHOLDERS[subject]
        self.closing = False
        self.display = True
        # Focused now, not a turn later (``focus`` waits one): `/` is a priority binding, run
        # as the app reads it, so the keys that came with it go to the box (a laggy ssh,
        # keystrokes pasted: `/sync` ran Stop on the selected Goal).
        self.screen.set_focus(self)

    def close(self) -> None:
        self.closing = False
        self.display = False

    def close_later(self) -> None:
        self.closing = self.display

    def finish_closing(self) -> None:
        if self.closing:  # not opened again meanwhile
            self.closing = False
            self.display = False
