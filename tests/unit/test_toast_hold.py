"""What waits for a dialog to close (refine_tui.toasts.ToastHold): the dashboard's tests show it
in the app; here, the time each held toast is given and the order they come back in."""

from __future__ import annotations

from refine_tui.toasts import MIN_SHOWN_AGAIN_S, ToastHold


def test_a_toast_showing_when_a_dialog_opens_comes_back_for_the_time_it_had_left() -> None:
    hold = ToastHold()
    hold.shown(("long", "", {"timeout": 15}), now=100.0, timeout=15)
    hold.shown(("short", "", {"timeout": 4}), now=101.0, timeout=4)
    hold.shown(("gone", "", {"timeout": 1}), now=90.0, timeout=1)  # over before the dialog
    assert hold.dialog_opened(now=104.0)
    hold.hold(("said meanwhile", "Alert", {"timeout": 15}))
    back = hold.dialog_closed()
    assert [(message, options["timeout"]) for message, _, options in back] == [
        ("long", 11.0),  # 15 from 100, opened at 104
        ("short", MIN_SHOWN_AGAIN_S),  # one second left: at least a few to read it
        ("said meanwhile", 15),
    ]
    assert hold.dialog_closed() == []  # shown once


def test_nothing_showing_holds_nothing_and_needs_no_clearing() -> None:
    hold = ToastHold()
    hold.shown(("old", "", {}), now=0.0, timeout=5)
    assert not hold.dialog_opened(now=10.0)
    assert hold.dialog_closed() == []
