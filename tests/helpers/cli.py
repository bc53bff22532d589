"""Running `refine` in-process for the CLI tests, and the journal's logical content."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from refine_tui.cli import main


def refine(capsys: pytest.CaptureFixture[str], journal: Path, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["--journal", str(journal), "--node", "n1", *args])
    out, err = capsys.readouterr()
    return code, out, err


def dump(path: Path) -> list[str]:
    """The journal's logical content: what must not change after a refusal."""
    with sqlite3.connect(path) as conn:
        return list(conn.iterdump())
