"""Textual's own floor for a screen that ticks once a second, beside the busy dashboard whose
young attempts tick (what bounds DESIGN §9's idle ≤ 0.5 % of a core there).

    python -m bench.textual_floor [--seconds 30] [--rounds 3]

Each arm runs in tmux (120×40, a real terminal) and is measured as ``bench.idle`` measures the
dashboard: the process's user + system CPU over ``--seconds`` after it settled, in % of one
core. The arms, interleaved round by round (medians, and each round's figure):

- ``timer``: a Textual app of seven one-line labels with a timer firing once a second that
  changes nothing (the event loop, the timer and Textual's idle work);
- ``1 label`` / ``7 labels``: the same timer writing a new number into one / seven of the
  labels (same width: ``update(layout=False)``, so a frame repaints only them), the least
  Textual work a ticking cell can cost;
- ``dashboard``: ``refine tui`` on the busy journal whose running attempts are young (seven
  elapsed cells on screen tick once a second: ``bench.idle``'s "busy, young").
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.common import NODE, TmuxDashboard, journal_with, shift_history
from bench.idle import HISTORY_ENDS_S, SETTLE_S, SIZE, _cpu

LABELS = 7  # the elapsed cells the busy-young dashboard shows ticking


def floor_app(ticking: int) -> None:
    """The app of the Textual arms: ``LABELS`` labels, ``ticking`` of them written each second."""
    from textual.app import App, ComposeResult
    from textual.widgets import Label

    class Floor(App[None]):
        def compose(self) -> ComposeResult:
            for n in range(LABELS):
                yield Label(f"{n:>4}", id=f"l{n}")

        def on_mount(self) -> None:
            self.count = 0
            self.set_interval(1.0, self.tick)

        def tick(self) -> None:
            self.count += 1
            for n in range(ticking):
                self.query_one(f"#l{n}", Label).update(f"{self.count % 1000:>4}", layout=False)

    Floor().run()


def arm_cpu(command: list[str], seconds: float, ready: str) -> float:
    """% of one core used by ``command`` in tmux over ``seconds``, once ``ready`` shows."""
    with TmuxDashboard("", SIZE, command=command) as pane:
        pane.wait_for(lambda screen: ready in screen)
        time.sleep(SETTLE_S)
        before, began = _cpu(pane.process), time.monotonic()
        time.sleep(seconds)
        return 100 * (_cpu(pane.process) - before) / (time.monotonic() - began)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--app", type=int, help=argparse.SUPPRESS)  # run a Textual arm's app
    args = parser.parse_args(argv)
    if args.app is not None:
        floor_app(args.app)
        return 0
    folder = Path(tempfile.mkdtemp(prefix="refine-floor-"))
    try:
        source = journal_with(1000, folder, mix="busy", log=print)
        app = [sys.executable, "-m", "bench.textual_floor", "--app"]
        arms = {"timer": [*app, "0"], "1 label": [*app, "1"], f"{LABELS} labels": [*app, "7"]}
        figures: dict[str, list[float]] = {name: [] for name in [*arms, "dashboard"]}
        for _ in range(args.rounds):
            for name, command in arms.items():
                figures[name].append(arm_cpu(command, args.seconds, "   6"))
            journal = folder / "round.db"  # a fresh copy: its history ends seconds ago
            shutil.copyfile(source, journal)
            shift_history(journal, HISTORY_ENDS_S["young"])
            dashboard = [sys.executable, "-m", "refine_tui.cli", "--journal", str(journal)]
            dashboard += ["--node", NODE, "tui"]
            figures["dashboard"].append(arm_cpu(dashboard, args.seconds, " queued "))
        for name, values in figures.items():
            rounds = ", ".join(f"{v:.2f}" for v in values)
            print(
                f"ticking once a second, {name}: {statistics.median(values):.2f} % of a core"
                f" (rounds: {rounds})"
            )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
