"""The top lines: which journal, which node, whether what you see is live, and the last commit."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.widgets import Static

from refine_tui.format import clock, visible

# state → (label, style): live is calm, anything that means "don't trust the screen" is loud.
STATES = {
    "live": ("● live", "bold green"),
    "paused": ("❚❚ paused (p resumes)", "bold yellow"),
    "stale": ("● stale", "bold yellow"),
    "connecting": ("○ opening…", "yellow"),
    "missing": ("✖ journal missing — waiting", "bold white on red"),
    "broken": ("✖ journal unusable — waiting", "bold white on red"),
}


@dataclass(frozen=True)
class HeaderState:
    journal: str
    node: str
    read_only: bool
    state: str = "connecting"
    last_sequence: int = 0
    last_commit: float | None = None
    detail: str = ""  # why the journal is missing/broken/stale
    shown: int = 0
    total: int = 0
    filter: str = ""


class StatusHeader(Static):
    DEFAULT_CSS = """
    StatusHeader { height: 2; background: $panel; padding: 0 1; }
    """

    def show(self, s: HeaderState) -> None:
        label, style = STATES.get(s.state, (s.state, ""))
        top = Text.assemble(
            ("refine ", "bold"),
            (visible(s.journal), "underline"),
            "  node ",
            (visible(s.node), "bold"),
            ("  read-only" if s.read_only else "", "bold yellow"),
            "  ",
            (label, style),
        )
        if s.state in ("missing", "broken", "stale") and s.detail:
            bottom = Text(visible(s.detail), style="red" if s.state != "stale" else "yellow")
        else:
            commit = f"seq {s.last_sequence}"
            if s.last_commit is not None:
                commit += f" at {clock(s.last_commit)}"
            noun = "goal" if s.total == 1 else "goals"
            goals = f"{s.shown} of {s.total} {noun}" if s.shown != s.total else f"{s.total} {noun}"
            bottom = Text.assemble(
                ("last commit ", "dim"),
                commit,
                ("  · ", "dim"),
                goals,
                (f"  · filter “{visible(s.filter)}”" if s.filter else "", "bold cyan"),
            )
        top.truncate(max(10, self.size.width - 2) if self.size.width else 200, overflow="ellipsis")
        self.update(Text("\n").join([top, bottom]))
