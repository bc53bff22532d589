"""Pulses above the Goals table (DESIGN §17): starts, completions and failures per minute over
the last hour, one line: each a word with the current minute's count, then a ``Sparkline``."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Label, Sparkline

NAMES = {"starts": "started", "completions": "completed", "failures": "failed"}


class Pulses(Horizontal):
    """One line of three sparklines; ``show`` repaints only what changed."""

    def __init__(self, *, id: str) -> None:
        super().__init__(id=id)
        self.series: dict[str, list[int]] = {}

    def compose(self) -> ComposeResult:
        for kind in NAMES:
            yield Label(self.words(kind, 0), id=f"pulse-{kind}-now", classes="pulse-now")
            yield Sparkline([0] * 60, id=f"pulse-{kind}", classes=f"pulse {kind}")

    @staticmethod
    def words(kind: str, now: int) -> str:
        return f"{NAMES[kind]} {now:>3}/m "

    def show(self, series: dict[str, list[int]]) -> None:
        for kind, counts in series.items():
            if self.series.get(kind) == counts:
                continue
            self.query_one(f"#pulse-{kind}", Sparkline).data = counts
            self.query_one(f"#pulse-{kind}-now", Label).update(self.words(kind, counts[-1]))
        self.series = series
