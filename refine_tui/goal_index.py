"""Every Goal's searchable words in memory, so a filter at 100,000 Goals is a scan of short strings.

The journal's ``contains`` pre-filter scans every stored state (≈ 90 ms at 100k) and parses each
hit (a common word like "queued" hits tens of thousands: ≈ 0.4 s). Here each Goal is one
lowercase line ``id\\ntitle\\nstatus\\nnode`` (≈ 3 ms to scan 100k). Built once in the read
thread after the first paint, then kept current from the rows the dashboard reads anyway: every
commit reaches it as a touched Goal whose row is re-read (``update``).
"""

from __future__ import annotations

from collections.abc import Mapping

from refine_tui.rows import GoalRow
from store import reads
from store.journal_api import Journal


def _words(goal_id: str, title: object, status: object, node_id: object) -> str:
    return "\n".join(str(f or "") for f in (goal_id, title, status, node_id)).lower()


class GoalIndex:
    """Goal id → its searchable line. ``matching`` is what ``RefineApp.matches_filter`` shows."""

    def __init__(self, lines: dict[str, str]) -> None:
        self._lines = lines

    @classmethod
    def build(cls, journal: Journal) -> GoalIndex:
        """Read every Goal once (call under the read connection, in a thread: ≈ 1 s at 100k)."""
        lines = {}
        with journal.snapshot():
            for goal_id, state in reads.goal_states(journal):
                lines[goal_id] = _words(
                    goal_id, state.get("title"), state.get("status"), state.get("node_id")
                )
        return cls(lines)

    def __len__(self) -> int:
        return len(self._lines)

    def update(self, rows: Mapping[str, GoalRow | None]) -> None:
        """Take in rows just read (None: the Goal is gone)."""
        for goal_id, row in rows.items():
            if row is None:
                self._lines.pop(goal_id, None)
            else:
                self._lines[goal_id] = _words(goal_id, row.title, row.status, row.node_id)

    def matching(self, text: str, limit: int) -> list[str]:
        """The first ``limit`` Goal ids (by id) whose id, title, status or node has ``text``."""
        needle = text.lower()
        found = sorted(g for g, line in self._lines.items() if needle in line)
        return found[:limit]
