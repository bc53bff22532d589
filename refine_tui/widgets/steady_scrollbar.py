"""A scrollbar drawn again only when what it shows changes.

Textual repaints a scrollbar, every line of it, whenever the height of what it scrolls, its
window or its position changes, and again after each layout that changed the height. Under a
stream of new Goals the table grows by a row a commit, and its bar was drawn again each time
(twice in most frames), though the thumb moves by a cell only every so many rows: counted at 50
new Goals a second over 500 Goals, the bar rendered more lines than the table did (9,240 against
5,181 for 300 Goals). Here a plain repaint of a vertical bar repaints only the lines where the
bar Textual's own renderer would draw (its cells and their colours) differs from the one the
repaint before asked for, none if it is the same; a new length or CSS of its own (a tint, say)
repaints it all, and anything else (regions, a layout, a recompose) goes to Textual as it comes.
"""

from __future__ import annotations

from typing import Self

from rich.color import Color
from rich.segment import Segment
from rich.style import Style
from textual.geometry import Region
from textual.scrollbar import ScrollBar, ScrollBarRender

Shown = tuple[int, dict[str, object], list[Segment]]  # the bar's length, its CSS, its cells


class SteadyScrollBar(ScrollBar):
    def __init__(self, vertical: bool = True, name: str | None = None, *, thickness: int = 1):
        super().__init__(vertical, name, thickness=thickness)
        self._shown: Shown | None = None  # what the last repaint asked for would draw

    def refresh(
        self, *regions: Region, repaint: bool = True, layout: bool = False, recompose: bool = False
    ) -> Self:
        plain = repaint and not (regions or layout or recompose)
        if not plain or not self.vertical or self.parent is None:
            return super().refresh(*regions, repaint=repaint, layout=layout, recompose=recompose)
        before, shown = self._shown, self.shown()
        self._shown = shown
        if shown is None or before is None or not _same_frame(before, shown):
            return super().refresh()
        pairs = enumerate(zip(before[2], shown[2], strict=True))
        moved = [y for y, (old, new) in pairs if old != new]
        if moved:  # the thumb's ends: a line each
            super().refresh(*(Region(0, y, self.size.width, 1) for y in moved))
        return self

    def shown(self) -> Shown | None:
        """The bar's length, the widget's own CSS and the cells the renderer draws along it, as
        ``ScrollBarRender`` draws them for what ``render`` gives; None: another renderer."""
        bar = self.render()
        if type(bar) is not ScrollBarRender or not isinstance(bar.style, Style):
            return None
        length = self.size.height if self.vertical else self.size.width
        thickness = self.size.width if self.vertical else self.size.height
        drawn = bar.render_bar(
            size=length,
            window_size=bar.window_size,
            virtual_size=bar.virtual_size,
            position=bar.position,
            vertical=bar.vertical,
            thickness=thickness,
            back_color=bar.style.bgcolor or Color.parse("#555555"),
            bar_color=bar.style.color or Color.parse("bright_magenta"),
        )
        return length, dict(self.styles.get_rules()), list(drawn.segments)


def _same_frame(before: Shown, shown: Shown) -> bool:
    """The same length and style, and as many cells (the renderer draws a thumb that ends past
    the bar with cells beyond it)."""
    return before[:2] == shown[:2] and len(before[2]) == len(shown[2])
