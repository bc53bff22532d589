"""The top lines: which journal, which node, whether what you see is live, and the last commit."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

from rich.cells import cell_len
from rich.text import Text
from textual.widget import Widget

from refine_tui.format import clip, clock, visible

# state → (label, style): live is calm, anything that means "don't trust the screen" is loud.
STATES = {
    "live": ("● live", "bold green"),
    "snapshot": ("read-only · snapshot", "bold cyan"),  # a read-only folder: never changes
    "paused": ("❚❚ paused (p resumes)", "bold yellow"),
    "stale": ("● stale", "bold yellow"),
    "reconnecting": ("◌ reconnecting…", "bold yellow"),
    "connecting": ("○ opening…", "yellow"),
    "missing": ("✖ journal missing — waiting", "bold white on red"),
    "broken": ("✖ journal unusable — waiting", "bold white on red"),
}


ROLE_CELLS = 20  # a longer role name is cut: the state and the node come first
TICKER = ("last_sequence", "last_commit", "shown", "total")  # what every commit changes
TICKER_REPAINT_S = 0.25  # those alone repaint at most this often (StatusHeader.show)


@dataclass(frozen=True)
class HeaderState:
    journal: str
    node: str
    read_only: bool
    role: str | None = None  # the PostgreSQL role that reads (None: a file, SQLite)
    state: str = "connecting"
    last_sequence: int = 0
    last_commit: float | None = None
    detail: str = ""  # why the journal is missing/broken/stale
    shown: int = 0
    total: int = 0
    filter: str = ""


class StatusHeader(Widget):
    """Two lines that never wrap: cut at the width it has when it paints (so growing back
    shows everything again at once). The journal's state is never cut: the path gives way
    first, in the middle (``/srv/…/journal.db``), then the word "refine", then the node. Who
    reads a read-only journal (``read-only as refine_viewer``) goes with the state: the URL's
    user name is the first thing its middle cut takes."""

    DEFAULT_CSS = """
    StatusHeader { height: 2; background: $panel; padding: 0 1; }
    """

    def __init__(self, state: HeaderState, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.state = state
        self._painted_at = -TICKER_REPAINT_S  # (monotonic) the last repaint asked for
        self._repaint_due = False  # a repaint of the ticker is waiting for its turn

    def show(self, **changes: Any) -> None:
        """The header with ``changes``; repainted only if they change it (none: repainted).

        The last commit and the counts change with every commit: under a stream of them
        (50 a second) the header's two lines were drawn 50 times a second, ≈ 5–8 % of the
        dashboard's CPU, for numbers nobody reads that fast. A change of those alone is shown
        at most every ``TICKER_REPAINT_S``; anything else (the journal's state, the filter)
        at once."""
        state = replace(self.state, **changes)
        if state == self.state and changes:
            return
        ticker_only = bool(changes) and replace(state, **self._ticker(self.state)) == self.state
        self.state = state
        wait = self._painted_at + TICKER_REPAINT_S - time.monotonic()
        if ticker_only and wait > 0 and self.is_mounted:
            if not self._repaint_due:
                self._repaint_due = True
                self.set_timer(wait, self._repaint)
            return
        self._repaint()

    def _repaint(self) -> None:
        self._repaint_due = False
        self._painted_at = time.monotonic()
        self.refresh()

    @staticmethod
    def _ticker(state: HeaderState) -> dict[str, Any]:
        """What a commit changes: the last one, and the counts."""
        return {name: getattr(state, name) for name in TICKER}

    def render(self) -> Text:
        s = self.state
        width = self.content_size.width or 200
        top = _top_line(s, width)
        bottom = _bottom_line(s)
        bottom.truncate(width, overflow="ellipsis")
        return Text("\n").join([top, bottom])


def _top_line(s: HeaderState, width: int) -> Text:
    label, style = STATES.get(s.state, (s.state, ""))
    flag = ""
    if s.read_only and s.state != "snapshot":  # a snapshot's state says it
        flag = f"  read-only as {clip(visible(s.role), ROLE_CELLS)}" if s.role else "  read-only"
    journal, node, brand = visible(s.journal), visible(s.node), "refine "
    fixed = cell_len(f"  node {node}{flag}  {label}")
    if cell_len(brand + journal) + fixed > width:
        journal = cut_middle(journal, max(width - fixed - len(brand), 8))
    if cell_len(brand + journal) + fixed > width:
        brand = ""
    spare = width - cell_len(brand + journal) - cell_len(f"  node {flag}  {label}")
    if cell_len(node) > spare:
        node = clip(node, max(spare, 2))
    top = Text.assemble(
        (brand, "bold"),
        (journal, "underline"),
        "  node ",
        (node, "bold"),
        (flag, "bold yellow"),
        "  ",
        (label, style),
    )
    if cell_len(top.plain) > width:  # only the state itself left: keep it, cut what precedes
        top = Text.assemble((flag.strip() + " " if flag else "", "bold yellow"), (label, style))
    top.truncate(width, overflow="ellipsis")
    return top


def _bottom_line(s: HeaderState) -> Text:
    if s.state in ("missing", "broken", "stale", "reconnecting") and s.detail:
        calm = s.state in ("stale", "reconnecting")
        return Text(visible(s.detail), style="yellow" if calm else "red")
    commit = f"seq {s.last_sequence}"
    if s.last_commit is not None:
        commit += f" at {clock(s.last_commit)}"
    noun = "goal" if s.total == 1 else "goals"
    goals = f"{s.shown} of {s.total} {noun}" if s.shown != s.total else f"{s.total} {noun}"
    return Text.assemble(
        ("last commit ", "dim"),
        commit,
        ("  · ", "dim"),
        goals,
        (f"  · filter “{visible(s.filter)}”" if s.filter else "", "bold cyan"),
    )


def cut_middle(path: str, width: int) -> str:
    """``/srv/refine/prod/journal.db`` → ``/srv/…/journal.db``: the file name survives longest."""
    if cell_len(path) <= width:
        return path
    head, sep, name = path.rpartition("/")
    tail = sep + name
    room = width - cell_len(tail) - 1
    if room < 1:
        return "…" + name[-(width - 1) :] if width > 1 else "…"
    first = head.split("/", 2)
    keep = "/".join(first[:2]) + "/" if head.startswith("/") else first[0] + "/"
    return (keep if cell_len(keep) <= room else head[:room]) + "…" + tail
