"""Pulses above the Goals table (DESIGN §17): starts, completions and failures per minute over
the last hour, one line: each a word with the current minute's count, then a ``Sparkline``;
"filtered" before them when they count only the Goals the filter shows."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Label, Sparkline

NAMES = {"starts": "started", "completions": "completed", "failures": "failed"}
NARROWED = "filtered:"


class Pulses(Horizontal):
    """One line of three sparklines; ``show`` repaints only what changed."""

    def __init__(self, *, id: str) -> None:
        super().__init__(id=id)
        self.series: dict[str, list[int]] = {}
        self.narrowed = False

    def compose(self) -> ComposeResult:
        yield Label(NARROWED, id="pulse-narrowed", classes="pulse-now")  # hidden until narrowed
        for kind in NAMES:
            yield Label(self.words(kind, 0), id=f"pulse-{kind}-now", classes="pulse-now")
            yield Sparkline([0] * 60, id=f"pulse-{kind}", classes=f"pulse {kind}")

    @staticmethod
    def words(kind: str, now: int) -> str:
        return f"{NAMES[kind]} {now:>3}/m "

    def show(self, series: dict[str, list[int]], narrowed: bool = False) -> None:
        """``narrowed``: the counts are only the Goals the filter shows."""
        if narrowed != self.narrowed:
            self.narrowed = narrowed
            self.query_one("#pulse-narrowed", Label).display = narrowed
        for kind, counts in series.items():
            before = self.series.get(kind)
            if before == counts:
                continue
            self.query_one(f"#pulse-{kind}", Sparkline).data = counts
            words = self.words(kind, counts[-1])
            # A count of the same width leaves the line's layout as it is: no layout of the
            # screen (and its full repaint) each time the minute moves on (≈ 70 ms, profiled).
            same_width = before is not None and len(words) == len(self.words(kind, before[-1]))
            self.query_one(f"#pulse-{kind}-now", Label).update(words, layout=not same_width)
        self.series = series
