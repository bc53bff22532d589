"""Pulses (store/ops/pulses.py): counted in all and per Goal; a filter's, some Goals' sum."""

from __future__ import annotations

import json
from typing import Any

from store.ops.pulses import WINDOW_MIN, Pulses

NOW = 1_800_000_000.0


def test_narrowed_counts_only_the_goals_named() -> None:
    pulses = Pulses()
    pulses.note([
        ("attempt.claimed", NOW, "run:alpha.r1", None),
        ("attempt.completed", NOW, "run:alpha.r1", None),
        ("attempt.claimed", NOW - 120, "run:beta.r2", None),
        ("attempt.failed", NOW, "run:beta.r2", None),
        ("goal.created", NOW, "goal:beta", None),  # not an attempt's: never counted
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
    pulses.note([
        ("attempt.claimed", NOW, "run:old.r1", None),
        ("attempt.claimed", NOW, "run:new.r1", None),
    ])  # fmt: skip
    pulses.note([("attempt.completed", NOW + 60 * WINDOW_MIN, "run:new.r1", None)])
    pulses.prune(NOW + 60 * WINDOW_MIN)
    assert list(pulses.by_goal) == ["new"]
    assert sum(pulses.counts.values()) == 1


def test_an_interruption_someone_chose_is_not_a_failure() -> None:
    """A Stop's or a Cancel's end (its signals, a worker or node ending a cancelled attempt) is
    not counted as a failure; a process found gone or an attempt confirmed lost is."""

    def interrupted(method: str, as_text: bool = False) -> tuple[str, float, str, Any]:
        data = {"epoch": 1, "cleanup": {"epoch": 1, "confirmed_by": "x", "method": method}}
        return ("attempt.interrupted", NOW, "run:g.r1", json.dumps(data) if as_text else data)

    chosen = ["sigterm", "sigkill", "worker-stopped", "cancel cleanup by node n1: SIGTERM to …"]
    befell = [
        "process-exited",
        "operator-confirmed",
        "operator-confirmed: node b silent, last beat 2026-12-05T10:42:07.000Z",
    ]
    pulses = Pulses()
    pulses.note([interrupted(m) for m in chosen + befell])
    pulses.note([interrupted(m, as_text=True) for m in chosen + befell])
    assert sum(pulses.totals().series(NOW)["failures"]) == 2 * len(befell)
