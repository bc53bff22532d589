"""Keys typed while an operator action prepares its dialog.

`c` asks the store what cancelling would do before its dialog shows: a few ms on a local
journal, a round trip or more on a remote server. Keys typed meanwhile (a reason typed right
after the `c`, keys that a laggy ssh delivers together) were run as the dashboard's own: the
reason's `s` ran Stop, its `t` opened the timeline. They are held instead; the dialog gets
their text if it asks for text, and none of them answers it (it was not on screen yet).
"""

from __future__ import annotations

import time
from typing import Any

from textual import events
from textual.app import App
from textual.widgets import Input

HOLD_S = 1.0  # at most: a store that does not answer must not take the keyboard, `q` included


class KeyHold:
    """The keys held for a dialog on its way (none: nothing is held)."""

    def __init__(self, hold_s: float = HOLD_S) -> None:
        self.hold_s = hold_s
        self._keys: list[events.Key] | None = None
        self._until = 0.0

    def start(self) -> None:
        self._keys, self._until = [], time.monotonic() + self.hold_s

    @property
    def active(self) -> bool:
        if self._keys is not None and time.monotonic() > self._until:
            self._keys = None  # let go: the keys work again
        return self._keys is not None

    def take(self, event: events.Key) -> bool:
        """Hold ``event`` if keys are held now."""
        if not self.active or self._keys is None:  # (active: never None; said for mypy)
            return False
        self._keys.append(event)
        return True

    def stop(self) -> list[events.Key]:
        """Hold no more; the keys held."""
        keys, self._keys = self._keys or [], None
        return keys


def type_into_focused(app: App[Any], keys: list[events.Key], tries: int = 100) -> None:
    """The printable keys' text into the focused text field, if a text field has the focus,
    once the dialog on top is mounted and, if it has a text field, has focused it: until then
    the focus may be on what Textual focused first (the dialog's scrolling body), and a
    widget's ``focus()`` in ``on_mount`` takes effect only after a refresh (both seen in CI)."""
    screen = app.screen
    waiting = not screen.is_mounted or (
        bool(screen.query(Input)) and not isinstance(app.focused, Input)
    )
    if waiting and tries:
        app.call_after_refresh(type_into_focused, app, keys, tries - 1)
        return
    field = app.focused
    if isinstance(field, Input):
        field.insert_text_at_cursor("".join(k.character or "" for k in keys if k.is_printable))
