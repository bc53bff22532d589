"""How values read on screen: durations, clock times, sizes, status colours, literal text.

Text from the journal, a log or a process is data: ``visible`` shows its control, escape and
bidi characters as ``\\x1b``-style escapes, ``literal`` makes it a Rich ``Text`` (never markup).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from rich.text import Text

from refine_tui.visible import clip as clip  # re-exported: the dashboard reads them here
from refine_tui.visible import has_control
from refine_tui.visible import visible as visible


def literal(text: str, style: str = "") -> Text:
    """Text shown as it is: no markup, control characters made visible."""
    return Text(visible(text), style=style)


def literal_text(text: Text) -> Text:
    """A Rich Text with its control characters made visible, its styles kept."""
    if not has_control(text.plain):
        return text
    out = Text(style=text.style, justify=text.justify, overflow=text.overflow, end=text.end)
    out.no_wrap = text.no_wrap
    cuts = sorted({s.start for s in text.spans} | {s.end for s in text.spans})
    for piece in text.divide(cuts):  # each piece lies wholly inside or outside each span
        part = Text(visible(piece.plain), style=piece.style)
        for span in piece.spans:
            part.stylize(span.style)
        out.append_text(part)
    return out


STATUS_STYLES = {
    "queued": "cyan",
    "held": "bold yellow",
    "running": "bold green",
    "completed": "dim green",
    "exhausted": "bold red",
    "cancelled": "magenta",
    "corrupt": "reverse red",
    "failed": "red",
    "interrupted": "yellow",
}
NOTE_STYLES = {
    "needs cleanup": "bold reverse yellow",
    "cancelling…": "bold magenta",
    "node silent": "bold red",  # as the Nodes view says it
}


def status_text(status: str) -> Text:
    """A status word in its colour (the first word decides: ``interrupted (…)``)."""
    return literal(status, STATUS_STYLES.get(status.split(" ", 1)[0], ""))


def note_text(note: str) -> Text:
    note = visible(note)
    text = Text(note)
    for marker, style in NOTE_STYLES.items():
        start = note.find(marker)
        if start >= 0:
            text.stylize(style, start, start + len(marker))
    return text


def duration(seconds: float | None) -> str:
    """``42s``, ``3m05s``, ``42m``, ``2h14m``, ``3d02h``: short and fixed-ish width.

    Seconds show for the first ten minutes only (as ``kubectl`` ages do): past that they are
    noise, and a ticking elapsed time then repaints once a minute instead of every second.
    """
    if seconds is None:
        return ""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def clock(at: float | None) -> str:
    """Local wall-clock time of day (commit times are informational only)."""
    return "" if at is None else time.strftime("%H:%M:%S", time.localtime(at))


def size(n: int | None) -> str:
    """Memory in at most 5 characters: ``512K``, ``27M``, ``1.2G``."""
    if n is None:
        return ""
    value = float(n)
    for unit in ("B", "K", "M", "G", "T"):
        if value < 1024 or unit == "T":
            return f"{value:.1f}{unit}" if value < 10 and unit != "B" else f"{value:.0f}{unit}"
        value /= 1024
    return ""


def percent(p: float | None) -> str:
    return "" if p is None else f"{p:.0f}%"


_QUIET_KEYS = {"run_id", "attempt_id", "goal_id", "pins"}


def event_data(data: Mapping[str, Any]) -> str:
    """An event's data on one line: ``epoch=2 worker=w-1 reason="exit 1"`` (ids are implied)."""
    parts = []
    for key, value in data.items():
        if key in _QUIET_KEYS or value in (None, [], {}):
            continue
        if isinstance(value, Mapping):
            value = " ".join(f"{k}={v}" for k, v in value.items())
            parts.append(f"{key}({value})")
        elif isinstance(value, list):
            parts.append(f"{key}={','.join(str(v) for v in value)}")
        elif isinstance(value, str) and " " in value:
            parts.append(f'{key}="{value}"')
        else:
            parts.append(f"{key}={value}")
    return " ".join(parts)
