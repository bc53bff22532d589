"""The console scripts ``refine`` and ``refine-tui`` (``python -m refine_tui.launch`` alike).

The command line's modules load with the cyclic garbage collector off, then are frozen out of
its way: they live as long as the command, and the collections that walked them while they
loaded were 11 young and 1 middle one, ≈ 2–3 ms of every command's CPU (counted with
``gc.callbacks``, `docs/benchmarks.md`). Collection is back on before the command runs.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable, Sequence

Main = Callable[[Sequence[str] | None], int]


def load() -> tuple[Main, Main]:
    """``refine_tui.cli``'s ``main`` and ``tui_main``, loaded without collecting."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        from refine_tui.cli import main, tui_main
    finally:
        gc.freeze()
        if collecting:
            gc.enable()
    return main, tui_main


def main(argv: Sequence[str] | None = None) -> int:
    return load()[0](argv)


def tui_main(argv: Sequence[str] | None = None) -> int:
    return load()[1](argv)


if __name__ == "__main__":
    sys.exit(main())
