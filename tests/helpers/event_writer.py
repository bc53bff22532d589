"""Another process committing: ``python -m tests.helpers.event_writer COMMANDS PREFIX``.

The journal comes by ``$REFINE_JOURNAL`` (a path or a URL). Commits COMMANDS Goal commands,
one goal at a time as a node and its worker would (create, start, settle: completed, failed,
or a cancel while running), each its own transaction; prints the last sequence committed. A
command that meets the server down (a restart) is tried again until it commits, with the same
command id, so a replay never commits twice.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from functools import partial

from store.errors import StorageError
from store.goals import Goals
from store.journal.api import Journal

NODE = "n1"


def committed(command: Callable[[], object]) -> None:
    for _ in range(600):
        try:
            command()
            return
        except StorageError:  # unreachable for a moment (a restart): same command id again
            time.sleep(0.1)
    raise SystemExit("the journal stayed unusable for a minute")


def steps(goals: Goals, gid: str, n: int) -> list[Callable[[], object]]:
    """One goal's commands: create, start, then completed, failed or cancelled by turns."""
    create = partial(goals.create, goal_id=gid, title=f"t {gid}", node_id=NODE, argv=["true"])
    start = partial(goals.start, goal_id=gid, node_id=NODE, worker=f"{NODE}/{gid}", token=gid)
    if n % 3 == 0:
        return [create, start, partial(goals.cancel, goal_id=gid, reason="r", command_id=gid)]
    failed = n % 3 == 2
    settle = partial(
        goals.settle,
        goal_id=gid,
        run_id=f"{gid}.r1",
        epoch=1,
        outcome="failed" if failed else "completed",
        reason="no" if failed else None,
    )
    return [create, start, settle]


def main() -> None:
    commands, prefix = int(sys.argv[1]), sys.argv[2]
    with Journal.open(os.environ["REFINE_JOURNAL"], create=False) as journal:
        goals = Goals(journal)
        done, n = 0, 0
        while done < commands:
            n += 1
            for step in steps(goals, f"{prefix}{n}", n)[: commands - done]:
                committed(step)
                done += 1
        print(journal.last_sequence(), flush=True)


if __name__ == "__main__":
    main()
