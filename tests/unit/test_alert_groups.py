"""Alerts raised together (``refine_tui.alerts.grouped``): one or two of a kind in their own
words; more, one notification that names them (the first eight) and says how many."""

from __future__ import annotations

from refine_tui.alerts import Alert, grouped


def exhausted(n: int) -> list[Alert]:
    return [Alert("exhausted", f"g{i}", f"goal g{i} is exhausted") for i in range(n)]


def test_one_or_two_of_a_kind_keep_their_own_words() -> None:
    assert grouped(exhausted(2)) == ["goal g0 is exhausted", "goal g1 is exhausted"]
    assert grouped([]) == []


def test_more_of_a_kind_are_one_notification_naming_the_first_eight() -> None:
    assert grouped(exhausted(3)) == ["3 goals are exhausted: g0, g1, g2"]
    assert grouped(exhausted(14)) == [
        "14 goals are exhausted: g0, g1, g2, g3, g4, g5, g6, g7 and 6 more"
    ]


def test_each_kind_is_grouped_on_its_own_in_the_order_first_raised() -> None:
    silent = [Alert("silent", f"b{i}", f"node b{i} went silent") for i in range(3)]
    cleanup = [Alert("cleanup", "loop", "attempt 1 of loop.r1 needs cleanup")]
    assert grouped([silent[0], *cleanup, *silent[1:], *exhausted(1)]) == [
        "3 nodes went silent: b0, b1, b2 (n: the nodes; x there confirms a node's attempts)",
        "attempt 1 of loop.r1 needs cleanup",
        "goal g0 is exhausted",
    ]
    many = [Alert("cleanup", f"g{i}", "") for i in range(4)]
    assert grouped(many) == [
        "4 attempts need cleanup (their processes are gone; x confirms each): g0, g1, g2, g3"
    ]


def test_alerts_are_paced_the_first_at_once_the_next_after_the_pace() -> None:
    from refine_tui.alerts import GATHER_S, PACE_S, Pace

    now = [100.0]
    pace = Pace(clock=lambda: now[0])
    assert pace.wait() == GATHER_S  # nothing said yet: gathered, then said
    pace.said()
    now[0] += 1.0
    assert pace.wait() == PACE_S - 1.0  # a trickle waits for the pace
    now[0] += PACE_S
    assert pace.wait() == GATHER_S  # quiet again: at once
