"""The attempt timeline's layout (refine_tui/timeline_layout.py): bars on one time axis, in
order, within the width, the running one growing, long idle gaps collapsed and marked."""

from __future__ import annotations

import pytest

from refine_tui.timeline_layout import FILL, HEAD, label, layout
from store.ops.attempt_spans import AttemptSpan

H = 3600.0


def span(epoch: int, outcome: str, start: float, end: float | None, round_: int = 1) -> AttemptSpan:
    return AttemptSpan(f"g.r{round_}", round_, epoch, f"w-{epoch}", outcome, "", start, end)  # type: ignore[arg-type]


STORY = [  # interrupted, failed after a short wait, then running after three idle hours
    span(1, "interrupted", 0, 100),
    span(2, "failed", 130, 200),
    span(3, "running", 3 * H, None),
]


@pytest.mark.parametrize("width", [1, 2, 5, 20, 52, 172])
def test_every_bar_fits_the_width_has_a_cell_and_keeps_the_order(width: int) -> None:
    laid = layout(STORY, 3 * H + 50, width)
    assert [b.span.epoch for b in laid.bars] == [1, 2, 3]
    for bar in laid.bars:
        assert 0 <= bar.x0 < bar.x1 <= width
        assert len(laid.bar_line(bar)) == width
    assert len(laid.axis()) == width and len(laid.ticks(running=True)) == width
    starts = [b.x0 for b in laid.bars]
    assert starts == sorted(starts)


def test_a_long_idle_gap_is_collapsed_and_marked_with_its_length() -> None:
    laid = layout(STORY, 3 * H + 50, 52)
    assert len(laid.gaps) == 1  # the 30 s between attempts 1 and 2 is drawn to scale
    gap = laid.gaps[0]
    assert gap.seconds == 3 * H - 200
    assert "⋯ 2h56m ⋯" in laid.axis()
    first, second, running = laid.bars
    assert first.x1 <= second.x0 and second.x1 <= gap.x0 <= gap.x0 + gap.width <= running.x0
    # Without the collapse the 50 s running bar would be one cell of 52; collapsed, the two
    # stretches share the axis by the time attempts ran in them (200 s and 50 s).
    assert running.x1 - running.x0 >= 5


def test_a_short_gap_is_drawn_to_scale() -> None:
    spans = [span(1, "failed", 0, 100), span(2, "completed", 150, 250)]
    laid = layout(spans, 1000, 50)
    assert laid.gaps == [] and "⋯" not in laid.axis()
    assert laid.bars[0].x1 < laid.bars[1].x0  # the 50 s between them is blank


def test_the_running_bar_grows_as_time_passes() -> None:
    widths = []
    for now in (3 * H + 10, 3 * H + 100, 3 * H + 1000):
        running = layout(STORY, now, 52).bars[-1]
        widths.append(running.x1 - running.x0)
        assert running.cells().endswith(HEAD)
    assert widths[0] < widths[1] < widths[2]


def test_each_outcome_has_its_own_fill_and_label() -> None:
    outcomes = ["completed", "failed", "interrupted", "cancelled", "running"]
    spans = [
        span(n, o, n * 10.0, n * 10.0 + 5 if o != "running" else None)
        for n, o in enumerate(outcomes, 1)
    ]
    laid = layout(spans, 60, 60)
    for bar in laid.bars:
        assert set(bar.cells()) <= {FILL[bar.span.outcome], HEAD}
        assert bar.span.outcome in label(bar.span, bar.seconds)
    assert label(laid.bars[2].span, 185) == "R1 #3 interrupted  3m05s"


def test_attempts_at_one_instant_and_no_attempts() -> None:
    same = [span(1, "failed", 5.0, 5.0), span(2, "completed", 5.0, 5.0)]
    laid = layout(same, 5.0, 30)
    assert all(b.x1 - b.x0 >= 1 for b in laid.bars)
    assert layout([], 5.0, 30).bars == []


def test_the_ticks_name_the_start_and_now() -> None:
    laid = layout(STORY, 3 * H + 50, 60)
    ticks = laid.ticks(running=True)
    assert ticks.rstrip().endswith(" now") and ticks.startswith(ticks.strip()[:8])


def test_rounds_label_their_run() -> None:
    laid = layout([span(1, "failed", 0, 10), span(1, "completed", 20, 30, round_=2)], 40, 40)
    assert [label(b.span, b.seconds)[:5] for b in laid.bars] == ["R1 #1", "R2 #1"]


def test_an_attempt_claimed_as_the_last_ended_starts_where_it_ended() -> None:
    spans = [span(1, "failed", 0, 3.3), span(2, "failed", 3.3, 6.6), span(3, "failed", 6.6, 10)]
    for width in (23, 52, 54, 77):
        bars = layout(spans, 10, width).bars
        assert [b.x1 for b in bars[:-1]] == [b.x0 for b in bars[1:]], width
