"""The README's screenshots show the dashboard as it is now (issue 24 item 20).

A screenshot goes stale silently: a key is added, a column renamed, and the picture in the
README still shows the old screen. Each check renders the real app the way
``scripts/screenshots.py`` does and compares the text of the lines that name the keys (the
footer) and the columns (the table's header) with the committed SVG. Regenerate with
``python scripts/screenshots.py`` when one fails.
"""

from __future__ import annotations

import html
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import screenshots  # noqa: E402

_TEXT = re.compile(r'<text[^>]*\sx="([\d.]+)"\s+y="([\d.]+)"[^>]*>([^<]*)</text>')


def screen_lines(svg: str) -> list[str]:
    """The terminal's text, line by line, from a Textual SVG screenshot."""
    rows: dict[float, list[tuple[float, str]]] = {}
    for x, y, text in _TEXT.findall(svg):
        rows.setdefault(float(y), []).append((float(x), html.unescape(text).replace("\xa0", " ")))
    return ["".join(t for _, t in sorted(row)).rstrip() for _, row in sorted(rows.items())]


def test_screen_lines_reads_textual_svg() -> None:
    svg = (
        '<text class="a" x="12.2" y="20" textLength="1">b</text>'
        '<text class="a" x="0" y="20" textLength="1">a&#160;</text>'
        '<text class="a" x="0" y="44.4" textLength="1">&lt;x&gt;</text>'
    )
    assert screen_lines(svg) == ["a b", "<x>"]


def footer(lines: list[str]) -> str:
    return " ".join(lines[-1].split())


def table_header(lines: list[str], first_column: str) -> str:
    return next(" ".join(line.split()) for line in lines if first_column in line.split())


@pytest.mark.parametrize(("name", "first_column"), [("goals", "Goal"), ("runs", "Run")])
async def test_committed_screenshot_shows_todays_keys_and_columns(
    name: str, first_column: str, tmp_path: Path
) -> None:
    committed = screen_lines((ROOT / "screenshots" / f"{name}.svg").read_text())
    fresh = screen_lines((await screenshots.render(name, tmp_path)).read_text())
    assert footer(committed) == footer(fresh), "regenerate: python scripts/screenshots.py"
    assert table_header(committed, first_column) == table_header(fresh, first_column)
