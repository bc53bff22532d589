"""A log view that follows new lines until the operator scrolls up (Toolong's rule).

Textual's Log already scrolls on write only when it is at the end; this widget says so in its
border: scrolling away from the bottom pauses following, returning to the bottom resumes it.
"""

from __future__ import annotations

from textual.widgets import Log

FOLLOWING = "following"
PAUSED = "paused — end or scroll down to follow"


class FollowLog(Log):
    @property
    def following(self) -> bool:
        return self.is_vertical_scroll_end

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        self.border_subtitle = FOLLOWING if self.following else PAUSED

    def on_mount(self) -> None:
        self.border_subtitle = FOLLOWING

    def clear(self) -> FollowLog:
        super().clear()
        self.border_subtitle = FOLLOWING
        return self
