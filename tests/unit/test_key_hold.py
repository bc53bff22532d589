"""KeyHold: keys typed while a dialog is on its way are held, and let go after its time."""

from __future__ import annotations

from textual import events

from refine_tui.key_hold import KeyHold


def key(name: str) -> events.Key:
    return events.Key(name, name if len(name) == 1 else None)


def test_keys_are_held_only_between_start_and_stop() -> None:
    hold = KeyHold()
    assert not hold.take(key("s")) and not hold.active
    hold.start()
    assert hold.take(key("s")) and hold.take(key("enter"))
    assert [k.key for k in hold.stop()] == ["s", "enter"]
    assert not hold.active and not hold.take(key("t")) and hold.stop() == []


def test_a_store_that_does_not_answer_does_not_keep_the_keyboard() -> None:
    hold = KeyHold(hold_s=0.0)  # its time is up at once
    hold.start()
    assert not hold.take(key("q")) and not hold.active
    assert hold.stop() == []  # what was held is let go: the keys work again
