"""The attempt timeline's layout (DESIGN §17): attempts, now and a width → one bar per attempt
on a shared time axis, long idle gaps collapsed into a marked few cells. Pure: no Textual, no
journal; the screen (``screens/timeline.py``) colours what this lays out.

The axis runs from the first attempt's start to the last one's end (``now`` while one runs, so
the running bar grows as time passes). Stretches where attempts ran (and the short gaps between
them) are drawn to scale; a gap longer than ``GAP_MIN_S`` and than ``GAP_SHARE`` of the time
attempts ran takes only its mark (``⋯ 3h ⋯``), so a 10-second retry after a 3-hour wait is not
a 1-cell bar.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from refine_tui import format as fmt
from store.ops.attempt_spans import AttemptSpan

GAP_MIN_S = 60.0  # a shorter idle gap is drawn to scale
GAP_SHARE = 0.25  # ... and so is one shorter than this share of the time attempts ran
# Each outcome has its own fill, so the bars read without colour too (the labels say it).
FILL = {"completed": "█", "failed": "▓", "interrupted": "▒", "cancelled": "░", "running": "█"}
HEAD = "▶"  # the running attempt's growing end
OUTCOME_WIDTH = len("interrupted")


@dataclass(frozen=True)
class Piece:
    """A stretch of time drawn to scale: ``t0``–``t1`` on columns ``x0``–``x1`` (exclusive)."""

    t0: float
    t1: float
    x0: int
    x1: int

    def x(self, t: float) -> float:
        if self.t1 <= self.t0:
            return float(self.x0)
        return self.x0 + (t - self.t0) / (self.t1 - self.t0) * (self.x1 - self.x0)


@dataclass(frozen=True)
class Gap:
    """A collapsed idle gap: ``seconds`` long, shown as its mark on ``width`` columns."""

    x0: int
    width: int
    seconds: float

    @property
    def mark(self) -> str:
        words = f"⋯ {fmt.duration(self.seconds)} ⋯"
        return words if len(words) <= self.width else "⋯" * self.width


@dataclass(frozen=True)
class Bar:
    """An attempt's bar: columns ``x0``–``x1`` (exclusive) of the axis."""

    span: AttemptSpan
    x0: int
    x1: int
    seconds: float  # how long it ran (until now, while it runs)

    def cells(self) -> str:
        """The bar's characters (``x1 - x0`` of them)."""
        n = self.x1 - self.x0
        fill = FILL.get(self.span.outcome, "█")
        if self.span.outcome == "running" and n >= 2:
            return fill * (n - 1) + HEAD
        return fill * n


@dataclass(frozen=True)
class Layout:
    width: int  # the axis' columns
    bars: list[Bar]
    pieces: list[Piece]
    gaps: list[Gap]

    def bar_line(self, bar: Bar) -> str:
        """A row's axis part: spaces, the bar, spaces (``width`` characters)."""
        return " " * bar.x0 + bar.cells() + " " * (self.width - bar.x1)

    def axis(self) -> str:
        """``├──…──┤`` under each stretch drawn to scale, each gap's mark between them."""
        line = [" "] * self.width
        for p in self.pieces:
            for x in range(p.x0, p.x1):
                line[x] = "─"
            line[p.x0] = "├"
            if p.x1 - p.x0 > 1:
                line[p.x1 - 1] = "┤"
        for g in self.gaps:
            line[g.x0 : g.x0 + g.width] = g.mark.center(g.width)
        return "".join(line)

    def ticks(self, running: bool) -> str:
        """Clock times under the axis: each stretch's start where it fits, the end at the right
        (``now`` while an attempt runs)."""
        if not self.pieces:
            return " " * self.width
        line = [" "] * self.width
        end = fmt.clock(self.pieces[-1].t1) + (" now" if running else "")
        end = end[-self.width :]
        line[self.width - len(end) :] = end
        free_until = self.width - len(end) - 1  # a label must end before this column
        for p in self.pieces:
            label = fmt.clock(p.t0)
            if p.x0 + len(label) > free_until or (p.x0 > 0 and line[p.x0 - 1] != " "):
                continue
            line[p.x0 : p.x0 + len(label)] = label
        return "".join(line)


def label(span: AttemptSpan, seconds: float) -> str:
    """A row's words: ``R2 #1 interrupted  3m05s`` (round, attempt, outcome, how long)."""
    return f"R{span.round} #{span.epoch} {span.outcome:<{OUTCOME_WIDTH}} {fmt.duration(seconds):>6}"


def layout(spans: Sequence[AttemptSpan], now: float, width: int) -> Layout:
    """Bars for ``spans`` on ``width`` columns (at least one each) at time ``now``."""
    width = max(1, width)
    times = [_times(s, now) for s in spans]
    if not spans:
        return Layout(width, [], [], [])
    stretches, gaps = _collapse(sorted(times))
    if width < len(stretches) + len(gaps):  # no room for a column each: one stretch
        stretches, gaps = [(stretches[0][0], stretches[-1][1])], []
    pieces, placed = _place(stretches, gaps, width)
    bars = []
    for span, (t0, t1) in zip(spans, times, strict=True):
        piece = next(p for p in pieces if p.t0 <= t0 <= p.t1)
        # Both ends rounded alike: an attempt claimed as the last one ended starts where it
        # ended, neither overlapping it nor leaving a blank cell between them.
        x0 = min(round(piece.x(t0)), piece.x1 - 1)
        x1 = min(max(x0 + 1, round(piece.x(t1))), piece.x1)
        bars.append(Bar(span, x0, x1, t1 - t0))
    return Layout(width, bars, pieces, placed)


def _times(span: AttemptSpan, now: float) -> tuple[float, float]:
    """(start, end) on the axis: a running attempt ends now (never before it started)."""
    start = span.started_at if span.started_at is not None else span.ended_at
    start = now if start is None else start
    end = span.ended_at if span.ended_at is not None else now
    return start, max(start, end)


def _collapse(
    times: list[tuple[float, float]],
) -> tuple[list[tuple[float, float]], list[float]]:
    """The stretches drawn to scale and the collapsed gaps between them (seconds each)."""
    clusters: list[list[float]] = []
    for t0, t1 in times:
        if clusters and t0 <= clusters[-1][1]:
            clusters[-1][1] = max(clusters[-1][1], t1)
        else:
            clusters.append([t0, t1])
    ran = sum(t1 - t0 for t0, t1 in clusters)
    limit = max(GAP_MIN_S, GAP_SHARE * ran)
    stretches = [(clusters[0][0], clusters[0][1])]
    gaps = []
    for t0, t1 in clusters[1:]:
        gap = t0 - stretches[-1][1]
        if gap > limit:
            stretches.append((t0, t1))
            gaps.append(gap)
        else:
            stretches[-1] = (stretches[-1][0], t1)
    return stretches, gaps


def _place(
    stretches: list[tuple[float, float]], gaps: list[float], width: int
) -> tuple[list[Piece], list[Gap]]:
    """Columns for each stretch (by its share of the time, at least one) and each gap's mark."""
    marks = [len(Gap(0, 99, g).mark) for g in gaps]
    if width - sum(marks) < len(stretches):  # too narrow for the words: one ⋯ a gap
        marks = [1] * len(gaps)
    spare = max(0, width - sum(marks) - len(stretches))
    total = sum(t1 - t0 for t0, t1 in stretches)
    shares = [
        (t1 - t0) / total * spare if total > 0 else spare / len(stretches) for t0, t1 in stretches
    ]
    cols = [1 + math.floor(s) for s in shares]
    left = spare - sum(c - 1 for c in cols)  # columns the rounding down left over
    by_remainder = sorted(range(len(shares)), key=lambda i: shares[i] - math.floor(shares[i]))
    for i in by_remainder[len(by_remainder) - left :] if left else ():
        cols[i] += 1
    pieces, placed, x = [], [], 0
    for i, (t0, t1) in enumerate(stretches):
        pieces.append(Piece(t0, t1, x, x + cols[i]))
        x += cols[i]
        if i < len(gaps):
            placed.append(Gap(x, marks[i], gaps[i]))
            x += marks[i]
    return pieces, placed
