"""``refine_tui.visible``: printable text passes without the control pattern, and no character
the pattern shows as an escape is printable, on the running Python's Unicode tables."""

from __future__ import annotations

import re
import sys

from refine_tui.visible import CONTROL, has_control, visible


def test_every_control_character_is_unprintable_so_printable_text_skips_the_pattern() -> None:
    controls = [c for c in map(chr, range(sys.maxunicode + 1)) if re.fullmatch(CONTROL, c)]
    assert len(controls) == 32 + 33 + 1 + 2 + 2 + 5 + 4  # C0, DEL + C1, ALM, LRM/RLM, ...
    assert [c for c in controls if c.isprintable()] == []
    assert all(has_control(f"a{c}b") for c in controls)


def test_unprintable_text_without_a_control_is_kept_as_it_is() -> None:
    for text in ["a\u00a0b", "\u3000", "\ue000", "a b"]:  # no-break space, ideographic, private
        assert not has_control(text)
        assert visible(text) == text


def test_controls_are_shown_as_escapes() -> None:
    assert visible("a\tb\x1b[2J\u202e") == "a\\tb\\x1b[2J\\u202e"
    assert visible("plain café 東京") == "plain café 東京"


def test_a_carriage_return_starts_the_line_over_as_on_a_terminal() -> None:
    from refine_tui.visible import as_printed

    assert as_printed("\rprogress 1%\rprogress 2%\rprogress 100%") == "progress 100%"
    assert as_printed("abcdef\rXY") == "XYcdef"  # written over, the rest stays
    assert as_printed("a CRLF line\r") == "a CRLF line"
    assert as_printed("\r") == "" and as_printed("plain") == "plain"
