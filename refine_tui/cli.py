"""The `refine` command line (being built; see README)."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    print("refine: not yet", file=sys.stderr)
    return 2


def tui_main(argv: list[str] | None = None) -> int:
    print("refine-tui: not yet", file=sys.stderr)
    return 2
