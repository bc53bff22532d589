"""A new filter's list: paint nothing (and collect no garbage) until it is in the table.

Closing the box and focusing the table repaint the whole old list (focus is in every cached
render's key: ≈ 30–100 ms at 100k, profiled), in the middle of the new list's read; the new list
then repaints it all again. Keys are handled meanwhile.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

from textual.app import App
from textual.timer import Timer


class PaintHold:
    """Holds the App's paint from ``hold`` to ``release``, and closes the filter box after."""

    def __init__(self, app: App[Any], close_box: Callable[[], None]) -> None:
        self.app = app
        self.close_box = close_box
        self.timer: Timer | None = None  # a new filter's list is on its way (hold)
        self._gc_held = False  # hold turned the garbage collector off
        self.closing_box = False  # the filter box closes the frame after the new list

    @property
    def held(self) -> bool:
        return self.timer is not None

    def hold(self, at_most_s: float) -> None:
        """Paint nothing until the new list is shown (or ``at_most_s`` passed)."""
        if self.timer is None:
            self.app._begin_batch()  # batch_update() held across turns of the event loop
            self.timer = self.app.set_timer(at_most_s, self.release)
            # Nor a full garbage collection (≈ 40 ms at 100k, profiled) before the first screen.
            self._gc_held = gc.isenabled()
            gc.disable()

    def release(self) -> None:
        """The new list is in the table (or it took too long, or the journal is in trouble):
        what changed while held is painted in the next frame."""
        if self.timer is not None:
            self.timer.stop()
            self.timer = None
            self.app._end_batch()
            if self.closing_box:
                self.app.call_after_refresh(self._close_box)
            if self._gc_held:
                self.app.call_after_refresh(gc.enable)

    def _close_box(self) -> None:
        if self.closing_box:  # not opened again meanwhile
            self.closing_box = False
            self.close_box()
