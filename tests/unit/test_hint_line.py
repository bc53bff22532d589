"""The line above the footer says why keys are greyed in whole entries: a narrow terminal
drops the last ones (… says some were left out) rather than cutting one in the middle (60
columns showed `… · R: not held · m:`)."""

from __future__ import annotations

from refine_tui.keys import fitted


def test_every_entry_when_they_fit() -> None:
    assert fitted(["s: held", "x: nothing running"], 80) == "s: held · x: nothing running"


def test_whole_entries_only_then_an_ellipsis() -> None:
    entries = ["s: no process here — x confirms cleanup", "R: not held", "m: running"]
    assert fitted(entries, 58) == "s: no process here — x confirms cleanup · R: not held …"
    assert fitted(entries, 45) == "s: no process here — x confirms cleanup …"
    assert fitted(entries, 40) == "s: no process here — x confirms cleanup"  # no room for …


def test_a_first_entry_longer_than_the_line_is_cut() -> None:
    assert fitted(["s: a very long reason indeed", "c: x"], 12) == "s: a very l…"


def test_wide_characters_count_two_cells() -> None:
    assert fitted(["s: 完了", "c: done"], 10) == "s: 完了 …"
