"""One dashboard of the fan-out bench: the real app, headless, noting when each new Goal's row
is painted.

    python -m bench.fanout_dashboard --journal URL

Prints ``ready`` once the dashboard is live and lists every Goal; then, when its stdin ends, one
JSON line: ``{goal_id: time.monotonic() of the first frame that showed its row}`` for the Goals
that appeared since ``ready`` (the bench's committer notes its commits on the same clock, which
is the machine's, not the process's). The Goal ids the bench wrote on stdin are waited for
first, up to ``PAINT_WAIT_S``: on a loaded machine the last rows may come after the bench's
own settle, and a row painted late is a late figure, not a missed one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parent.parent
if str(_ROOT) not in sys.path:  # tests/helpers lives beside the package, not in it
    sys.path.insert(0, str(_ROOT))

from bench.latency import SIZE, ProbeApp, listed, ready  # noqa: E402

PAINT_WAIT_S = 30.0  # for the rows of the Goals the bench committed, after its stdin ends


class RowClock(ProbeApp):
    """The real app; after each journal update is shown, the Goals new since ``ready``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.known: set[str] | None = None  # the Goals listed at ready (None: not ready yet)
        self.painted: dict[str, float] = {}

    def _probe(self) -> None:  # after RefineApp's handler updated the table (ProbeApp)
        if self.known is None:
            return
        new = [goal for goal in self.goal_rows if goal not in self.known]
        if new:
            self.known.update(new)
            self.call_after_refresh(self._painted, new)

    def _painted(self, goals: list[str]) -> None:
        now = time.monotonic()
        self.painted.update(dict.fromkeys(goals, now))


async def _serve(journal: str) -> dict[str, float]:
    app = RowClock(journal=journal, node="dashboard")
    async with app.run_test(size=SIZE):
        await ready(app)
        await listed(app)
        app.known = set(app.goal_rows)
        # Straight to the pipe: a headless app's print goes to a buffered copy of stdout.
        os.write(sys.__stdout__.fileno() if sys.__stdout__ else 1, b"ready\n")
        said = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # EOF
        deadline = time.monotonic() + PAINT_WAIT_S
        while set(said.split()) - app.painted.keys() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
    return app.painted


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--journal", required=True)
    args = parser.parse_args(argv)
    print(json.dumps(asyncio.run(_serve(args.journal))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
