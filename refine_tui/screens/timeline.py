"""The attempt timeline (`t` on a Goal, Run or Attempt; DESIGN §17): one row per attempt of the
Goal's Runs (or of one Run), a bar from its start to its end on a shared time axis, coloured and
labelled by outcome; the running one grows each second; long idle gaps collapsed and marked.

The screen owns what it shows: which Goal (and Run), the attempts last read and its clock. Its
part of the read is ``follower.wants.timeline``; the attempts come back with the journal
updates that touch the Goal (``show``). The layout is ``refine_tui.timeline_layout``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult, RenderResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Footer, Label

from refine_tui import format as fmt
from refine_tui.follow import JournalFollower
from refine_tui.timeline_layout import FILL, HEAD, Layout, label, layout
from store.ops.attempt_spans import OUTCOMES, AttemptSpan

TimelineKey = tuple[str, str | None]  # (goal_id, run_id or None: every round)
STYLES = {
    "completed": "green",
    "failed": "red",
    "interrupted": "yellow",
    "cancelled": "magenta",
    "running": "bold cyan",
}
TICK_S = 1.0


class TimelineChart(Widget):
    """The rows, the axis and its clock times, laid out for the widget's width."""

    DEFAULT_CSS = """
    TimelineChart { height: auto; }
    """

    def __init__(self, clock: Callable[[], float], *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.clock = clock
        self.spans: list[AttemptSpan] = []
        self.laid: Layout | None = None  # the last layout drawn (tests read it)

    def show(self, spans: Sequence[AttemptSpan]) -> None:
        self.spans = list(spans)
        self.refresh(layout=True)

    def get_content_height(self, container: object, viewport: object, width: int) -> int:
        return len(self.spans) + 2 if self.spans else 1

    def render(self) -> RenderResult:
        if not self.spans:
            return Text("no attempts yet: the goal has not been started", style="dim")
        now = self.clock()
        words = [label(s, 0) for s in self.spans]  # the widest label sets the axis' start
        pad = max(len(w) for w in words) + 1
        laid = self.laid = layout(self.spans, now, self.size.width - pad)
        text = Text(no_wrap=True, overflow="crop")
        for bar in laid.bars:
            outcome = bar.span.outcome
            style = STYLES.get(outcome, "")
            row = label(bar.span, bar.seconds).ljust(pad)
            at = row.index(outcome)  # the outcome word in its colour
            text.append(row[:at])
            text.append(outcome, style=style)
            text.append(row[at + len(outcome) :])
            text.append(" " * bar.x0)
            text.append(bar.cells(), style=style)
            text.append(" " * (laid.width - bar.x1) + "\n")
        running = any(s.outcome == "running" for s in self.spans)
        text.append(" " * pad + laid.axis() + "\n", style="dim")
        text.append(" " * pad + laid.ticks(running), style="dim")
        return text


class TimelineScreen(Screen[None]):
    """The timeline of ``goal_id``'s attempts (only ``run_id``'s when given)."""

    BINDINGS: ClassVar = [
        Binding("escape,t", "close", "Back"),
        Binding("q", "app.quit", "Quit"),
    ]
    DEFAULT_CSS = """
    TimelineScreen #timeline-title { height: 1; width: 100%; padding: 0 1; background: $boost; }
    TimelineScreen #timeline-legend { height: 1; width: 100%; padding: 0 1; color: $text-muted; }
    TimelineScreen #timeline-body { height: 1fr; padding: 0 1; scrollbar-size-vertical: 1; }
    """

    def __init__(
        self,
        goal_id: str,
        run_id: str | None,
        *,
        follower: JournalFollower,
        clock: Callable[[], float],
    ) -> None:
        super().__init__()
        self.key: TimelineKey = (goal_id, run_id)
        self.follower = follower
        self.chart = TimelineChart(clock, id="timeline-chart")
        self.read_once = False  # the first read came back (before it: "reading…")

    def compose(self) -> ComposeResult:
        yield Label(fmt.literal(self.title_words()), id="timeline-title")
        yield Label(legend(), id="timeline-legend")
        with VerticalScroll(id="timeline-body"):
            yield self.chart
        yield Footer(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        self.follower.wants.timeline = self.key
        self.run_worker(self.follower.read([self.key[0]]), exit_on_error=False)
        self.set_interval(TICK_S, self.tick)

    def on_unmount(self) -> None:
        if self.follower.wants.timeline == self.key:
            self.follower.wants.timeline = None

    def show(self, key: TimelineKey, spans: Sequence[AttemptSpan]) -> None:
        """The timeline slice of a journal update (for ``key``: another one's is ignored)."""
        if key != self.key:
            return
        self.read_once = True
        self.chart.show(spans)
        self.query_one("#timeline-title", Label).update(fmt.literal(self.title_words()))

    def tick(self) -> None:
        """The running attempt grows (and the others' share of the axis shrinks)."""
        if any(s.outcome == "running" for s in self.chart.spans):
            self.chart.refresh()

    def title_words(self) -> str:
        goal_id, run_id = self.key
        spans = self.chart.spans
        about = f"run {run_id}" if run_id else f"goal {goal_id}"
        if not self.read_once:
            return f"Timeline of {about} · reading…   (escape: back)"
        rounds = len({s.run_id for s in spans})
        n = len(spans)
        counts = f"{rounds} run{'s' * (rounds != 1)}, {n} attempt{'s' * (n != 1)}"
        return f"Timeline of {about} · {counts}   (escape: back)"

    def action_close(self) -> None:
        self.dismiss(None)


def legend() -> Text:
    """What each fill and colour means, and the collapsed gap's mark."""
    text = Text(no_wrap=True, overflow="ellipsis")
    for outcome in OUTCOMES:
        fill = FILL[outcome] + (HEAD if outcome == "running" else "")
        text.append(fill, style=STYLES[outcome])
        text.append(f" {outcome}  ")
    text.append("⋯ idle gap")
    return text
