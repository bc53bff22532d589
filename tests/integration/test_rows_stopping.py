"""An attempt a Stop or Cancel on this node is ending is not `needs cleanup`.

Seen in tmux on PostgreSQL: `c` on a running Goal, enter, and an alert "attempt 1 of job-2.r1
needs cleanup (its process is gone; x confirms)" came with the cancellation, though the
canceller recorded the attempt's end a moment later: the dashboard read the row between the
signal and the record. The stopper's marker (``ProcessRegistry.mark_stopping``) says who ends
the attempt, until when; the row is an orphan only once nobody is ending it.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from refine_tui.rows import Reader
from store.journal.sqlite import Journal
from store.model.goals import Goals
from tests.helpers.dashboard import end
from tests.helpers.registry import node_registry, record_worker

NODE = "n1"


def row_of(journal_path: Path) -> tuple[bool, str]:
    with Journal.open(journal_path, read_only=True) as journal:
        row = Reader(journal, NODE).goal_rows(["loop"])["loop"]
    assert row is not None
    return row.needs_cleanup, row.note


def test_a_dead_attempt_being_stopped_here_is_not_an_orphan_until_its_stopper_gives_up(
    journal_path: Path,
) -> None:
    with Journal.open(journal_path) as journal:
        goals = Goals(journal)
        goals.create(goal_id="loop", title="loop", node_id=NODE, argv=["sleep", "60"])
        goals.start(goal_id="loop", node_id=NODE, worker="w-loop", token="t")
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    record_worker(journal_path, NODE, "loop.r1", proc, worker="w-loop")
    registry = node_registry(journal_path, NODE)
    assert row_of(journal_path) == (False, "")
    end(proc)  # the stopper's SIGTERM: gone, and nothing recorded yet
    assert row_of(journal_path) == (True, "needs cleanup")
    marker = registry.mark_stopping("loop.r1", 1, by="dana@n1", until=time.time() + 60)
    assert row_of(journal_path) == (False, "")  # its stopper records the end
    registry.clear_stopping(marker)
    assert row_of(journal_path) == (True, "needs cleanup")
    registry.mark_stopping("loop.r1", 1, by="dana@n1", until=time.time() - 1)  # gave up
    assert row_of(journal_path) == (True, "needs cleanup")
    registry.remove("loop.r1", 1)  # the worker's record gone too (it removes it as it exits)
    registry.mark_stopping("loop.r1", 1, by="lee@n1", until=time.time() + 60)
    assert row_of(journal_path) == (False, "")
