"""A new filter's list: paint nothing (and collect no garbage) until it is in the table.

Closing the box and focusing the table repaint the whole old list (focus is in every cached
render's key: ≈ 30–100 ms at 100k, profiled), in the middle of the new list's read; the new list
then repaints it all again. Keys are handled meanwhile.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable

from textual.dom import DOMNode
from textual.timer import Timer

from refine_tui.widgets.filter_box import FilterBox


class PaintHold:
    """Holds the App's paint from ``hold`` to ``release``, and closes the filter box after."""

    def __init__(self, owner: DOMNode, box: Callable[[], FilterBox | None]) -> None:
        self.owner = owner  # the screen it holds the paint for: its App's, all of it
        self.box = box  # (None: the widgets are gone, the app is closing)
        self.timer: Timer | None = None  # a new filter's list is on its way (hold)
        self._gc_held = False  # hold turned the garbage collector off
        self._batch = contextlib.ExitStack()  # the App's batch_update(), open while held

    @property
    def held(self) -> bool:
        return self.timer is not None

    def hold(self, at_most_s: float) -> None:
        """Paint nothing until the new list is shown (or ``at_most_s`` passed)."""
        if self.timer is None:
            app = self.owner.app
            self._batch.enter_context(app.batch_update())  # held across turns of the loop
            self.timer = app.set_timer(at_most_s, self.release)
            # Nor a full garbage collection (≈ 40 ms at 100k, profiled) before the first screen.
            self._gc_held = gc.isenabled()
            gc.disable()

    def release(self) -> None:
        """The new list is in the table (or it took too long, or the journal is in trouble):
        what changed while held is painted in the next frame."""
        if self.timer is not None:
            self.timer.stop()
            self.timer = None
            self._batch.close()
            app = self.owner.app
            if (box := self.box()) is not None and box.closing:
                app.call_after_refresh(box.finish_closing)
            if self._gc_held:
                app.call_after_refresh(gc.enable)
