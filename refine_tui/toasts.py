"""Where the notifications show, and when: over the table's rows, never over a dialog.

A notification said while a dialog is up waits for it to close; one still showing when a dialog
opens would cover it (its buttons, at 80×24), so it is taken off and shown again when the dialog
closes, for the time it had left (``ToastHold``). The toasts' rack sits over the table's rows,
below their headers and above the row line, even once that line has grown to its three lines;
on a short terminal (60×16: seven rows, where an alert hid what Stop answered) down to the
footer (``place``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from textual.geometry import Region
from textual.widget import Widget

ROWLINE_MAX = 3  # the row line's max-height in app.tcss
MIN_SHOWN_AGAIN_S = 3.0  # a toast a dialog hid is shown again at least this long
MIN_TOAST_ROWS = 10  # fewer over the table: the toasts may cover the row line too

Note = tuple[str | Sequence[str], str, dict[str, Any]]  # message, title, notify's options


class ToastHold:
    """What waits for a dialog to close: said meanwhile, or showing when it opened."""

    def __init__(self) -> None:
        self._held: list[Note] = []
        self._shown: list[tuple[float, Note]] = []  # what shows now, with when its time ends

    def hold(self, note: Note) -> None:
        """Said while a dialog is up: shown when it closes."""
        self._held.append(note)

    def shown(self, note: Note, now: float, timeout: float) -> None:
        self._shown = [(ends, shown) for ends, shown in self._shown if ends > now]
        self._shown.append((now + timeout, note))

    def dialog_opened(self, now: float) -> bool:
        """Hold what still shows, each for the time it had left (and a few seconds at least
        to read it), before what the dialog's time adds; True when there was any (to clear)."""
        shown, self._shown = self._shown, []
        again = [
            (message, title, {**options, "timeout": max(ends - now, MIN_SHOWN_AGAIN_S)})
            for ends, (message, title, options) in shown
            if ends > now
        ]
        self._held[:0] = again
        return bool(again)

    def dialog_closed(self) -> list[Note]:
        """What to show now, in the order it was said."""
        held, self._held = self._held, []
        return held


def place(rack: Widget, table: Region, rowline: Widget, footer: Region) -> None:
    """The rack over ``table``'s rows, leaving the ``rowline`` below them room to grow to
    its ``ROWLINE_MAX`` lines; with fewer than ``MIN_TOAST_ROWS`` so, down to the ``footer``."""
    top = table.y + 1  # below the column headers
    room = table.bottom - top - (ROWLINE_MAX - rowline.outer_size.height)
    if room < MIN_TOAST_ROWS:
        room = footer.y - top
    rack.styles.margin = (top, 0, 0, 0)
    rack.styles.max_height = max(1, room)
