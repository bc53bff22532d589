"""Pulses (store/ops/pulses.py): counted in all and per Goal; a filter's, some Goals' sum."""

from __future__ import annotations

from store.ops.pulses import WINDOW_MIN, Pulses

NOW = 1_800_000_000.0


def test_narrowed_counts_only_the_goals_named() -> None:
    pulses = Pulses()
    pulses.note([
        ("attempt.claimed", NOW, "run:alpha.r1"),
        ("attempt.completed", NOW, "run:alpha.r1"),
        ("attempt.claimed", NOW - 120, "run:beta.r2"),
        ("attempt.failed", NOW, "run:beta.r2"),
        ("goal.created", NOW, "goal:beta"),  # not an attempt's: never counted
    ])  # fmt: skip
    every = pulses.totals().series(NOW)
    assert [sum(every[k]) for k in ("starts", "completions", "failures")] == [2, 1, 1]
    for named in ({"alpha"}, {"alpha", "gone", "more", "than", "counted"}):  # both walks
        alpha = pulses.narrowed_to(named)
        assert alpha.narrowed and not pulses.totals().narrowed
        series = alpha.series(NOW)
        assert [sum(series[k]) for k in ("starts", "completions", "failures")] == [1, 1, 0]
    assert sum(pulses.narrowed_to(set()).series(NOW)["starts"]) == 0


def test_prune_drops_what_left_the_window_per_goal_too() -> None:
    pulses = Pulses()
    pulses.note([("attempt.claimed", NOW, "run:old.r1"), ("attempt.claimed", NOW, "run:new.r1")])
    pulses.note([("attempt.completed", NOW + 60 * WINDOW_MIN, "run:new.r1")])
    pulses.prune(NOW + 60 * WINDOW_MIN)
    assert list(pulses.by_goal) == ["new"]
    assert sum(pulses.counts.values()) == 1
