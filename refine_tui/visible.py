"""Text from the journal, a log or a process shown as plain text: controls visible, clipped.

Kept apart from ``refine_tui.format`` so the command line lays text out without importing
Rich (a quick `refine goals`, DESIGN §9): ASCII text is one cell per character, and only other
text loads ``rich.cells``, the width table the dashboard lays out with.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

# C0, DEL, C1, and the bidi/line controls that reorder or break what follows them on screen.
# Pattern text, compiled by ``re`` (and cached there) the first time text is not printable:
# compiling it costs ≈ 1.4 ms of a command's start-up (bench/cli.py) that most never need.
CONTROL = r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]"
_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escape(match: re.Match[str]) -> str:
    c = match.group()
    return _NAMED.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")


def has_control(text: str) -> bool:
    """Whether ``text`` holds a control character. Every one of them is unprintable for
    ``str.isprintable`` (categories Cc, Cf, Zl, Zp), so printable text needs no pattern."""
    return not text.isprintable() and re.search(CONTROL, text) is not None


def visible(text: str) -> str:
    """``text`` with every control character shown as an escape (``\\x1b``, ``\\u202e``)."""
    return re.sub(CONTROL, _escape, text) if has_control(text) else text


def cells(text: str) -> int:
    """Display width of visible ``text``: CJK and emoji take two cells, combining marks none."""
    if text.isascii():  # one cell per character (the common case: Rich not even imported)
        return len(text)
    from rich.cells import cell_len

    return cell_len(text)


def clip(text: str, width: int) -> str:
    """``text`` made visible, in at most ``width`` cells (CJK and emoji count two), cut with …."""
    text = visible(text)
    if text.isascii():  # one cell per character, cut without measuring each
        return text if len(text) <= width else text[: width - 1] + "…"
    if cells(text) <= width:
        return text
    cut, used = 0, 0
    for cut, char in enumerate(text):  # noqa: B007 (cut is the index where room runs out)
        used += cells(char)
        if used > width - 1:
            break
    return text[:cut] + "…"


def listed(names: Sequence[str], most: int) -> str:
    """``a, b, c``: the first ``most`` names, then how many more (``a, b and 3 more``)."""
    shown = ", ".join(names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


def as_printed(line: str) -> str:
    """``line`` as a terminal shows it: a carriage return goes back to the line's start, and
    what follows it is written over what was there (a progress bar's hundred updates are its
    last one; the CR of a CRLF line ending is none)."""
    if "\r" not in line:
        return line
    shown = ""
    for part in line.rstrip("\r").split("\r"):
        shown = part + shown[len(part) :]
    return shown
