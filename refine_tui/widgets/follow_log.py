"""A log view that follows new lines until the operator scrolls up (Toolong's rule).

Following is explicit state, not "is the view at the bottom right now": an animated scroll to
the end that new lines overtake would otherwise land short of the bottom and stay paused.
Scrolling up pauses; `end`, or scrolling down to the bottom, resumes. The pane takes the focus
when it opens, so the arrow keys, page keys, home and end scroll it; its border says which
state it is in, and says so when the attempt has ended (nothing more will come) or when there
is no attempt to show.
Lines are data (a recipe's output, event fields): their control characters show as escapes,
but for a carriage return, which starts the line over as on a terminal (``as_printed``). A line
still being printed is shown as it is now, and its next form written over it (a progress bar).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import ClassVar

from rich.cells import cell_len
from rich.segment import Segment
from textual.binding import Binding
from textual.strip import Strip
from textual.widgets import Log

from refine_tui.format import visible
from refine_tui.textual_private import replace_last_line
from refine_tui.visible import as_printed

FOLLOWING = "following · ↑↓ ←→ pgup pgdn home end"
PAUSED = "paused — end or scroll down to follow"
ENDED = "attempt ended · ↑↓ ←→ pgup pgdn home end"
NO_ATTEMPT = "no attempt"


class FollowLog(Log):
    BINDINGS: ClassVar = [Binding("end", "follow", "Follow", show=False)]

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.following = True
        # False: what is shown will not grow (an ended attempt); None: there is no attempt
        self.source_live: bool | None = True
        self.placeholder = False  # the one line is a note ("no output yet"), not output
        self.elsewhere: str | None = None  # the node whose machine has the log (not followed)
        self.printing = False  # the last line is still being printed (no newline yet)

    def on_mount(self) -> None:
        self._show_state()

    def set_source_live(self, live: bool | None) -> None:
        self.source_live = live
        self._show_state()

    def show_elsewhere(self, node: str) -> None:
        """The log is on ``node``'s machine: nothing here follows it."""
        self.elsewhere = node
        self._show_state()

    def _show_state(self) -> None:
        if self.elsewhere is not None:
            self.border_subtitle = f"on node {visible(self.elsewhere)}"
        elif self.source_live is None:
            self.border_subtitle = NO_ATTEMPT
        elif not self.source_live:
            self.border_subtitle = ENDED
        else:
            self.border_subtitle = FOLLOWING if self.following else PAUSED

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        if self.is_vertical_scroll_end:
            self.following = True
        elif new_value < old_value:  # the operator scrolled up (a write only moves down)
            self.following = False
        self._show_state()

    def render_line(self, y: int) -> Strip:
        """A line wider than the pane ends in "…" (and starts with one once scrolled right):
        ←/→ show the rest, and nothing else on screen says that a line goes on."""
        strip = super().render_line(y)
        scroll_x, scroll_y = self.scroll_offset
        width = self.scrollable_content_region.width  # Log draws under its scrollbar too
        if scroll_y + y >= self.line_count or width < 2:
            return strip
        length = cell_len(self.lines[scroll_y + y].expandtabs())  # as Log draws its tabs
        style = self.rich_style
        if length > scroll_x + width:
            strip = Strip.join([strip.crop(0, width - 1), Strip([Segment("…", style)])])
        if scroll_x > 0 and length > scroll_x:
            strip = Strip.join([Strip([Segment("…", style)]), strip.crop(1, width)])
        return strip

    def action_follow(self) -> None:
        """`end`: back to the bottom at once, and follow from there."""
        self.following = True
        self.scroll_end(animate=False, immediate=True, x_axis=False)
        self._show_state()

    def write_lines(self, lines: Iterable[str], scroll_end: bool | None = None) -> FollowLog:
        super().write_lines([visible(line) for line in lines], scroll_end=False)
        if self.following if scroll_end is None else scroll_end:
            self.scroll_end(animate=False, immediate=True, x_axis=False)
        return self

    def write_line(self, line: str, scroll_end: bool | None = None) -> FollowLog:
        return self.write_lines([line], scroll_end)

    def write_printed(self, lines: Sequence[str], printing: str) -> None:
        """Lines a program printed, then the line it is printing now ("": none): that one is
        shown until its next form (more of it, or it ended) is written over it."""
        shown = [as_printed(line) for line in lines]
        if printing:
            shown.append(as_printed(printing))
        if self.printing and shown:
            replace_last_line(self, visible(shown.pop(0)))
        self.printing = bool(printing)
        self.write_lines(shown)

    def clear(self) -> FollowLog:
        super().clear()
        self.printing = False
        self.following = True
        self.placeholder = False
        self.elsewhere = None
        self._show_state()
        return self
