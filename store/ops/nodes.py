"""The nodes a journal knows (DESIGN §14): each one's presence and the attempts it runs.

``list_nodes`` is what `refine nodes` prints: one row per node that has Goals or has beaten,
with its presence (store.journal.presence), the attempts the journal says run there and the
Goals that wait for it (queued or held there: after its machine is gone, until moved).
``active_attempts`` finds those attempts: every Run whose status is ``running`` (an attempt
runs, its Goal ``running``, or ``cancelled`` while its cleanup is pending), read where it is
stored. Reads only.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from store.errors import RefineError
from store.journal.presence import Presence, State, iso_utc
from store.model.goal import Goal, goal_aggregate_id, goal_from_stored, goal_id_of_run
from store.model.goals import REASSIGNABLE
from store.model.run import Run, run_from_stored
from store.records import dataclass

if TYPE_CHECKING:
    from store.journal.api import Journal


@dataclass(frozen=True)
class ActiveAttempt:
    """A running attempt as the journal records it: its Goal and its Goal's current Run."""

    goal: Goal
    run: Run
    epoch: int


@dataclass(frozen=True)
class NodeView:
    """One node as `refine nodes` shows it. Presence fields are None for an ``unknown`` node
    (it has Goals but never beat: not started since presence exists)."""

    node_id: str
    state: State
    running: int  # attempts the journal says run there
    presence: Presence | None
    age_s: float | None  # seconds since its last beat, by the database's clock
    waiting: int = 0  # its Goals queued or held: only this node starts them (or a reassign)

    @property
    def room(self) -> int:
        """Attempts it could start: its capacity less those running (a node that never beat
        has no capacity known: none; an orphan counted beyond capacity: below none)."""
        return (self.presence.capacity if self.presence is not None else 0) - self.running

    def to_json(self) -> dict[str, object]:
        p = self.presence
        return {
            "node_id": self.node_id,
            "host": p.host if p else None,
            "state": self.state,
            "last_seen": iso_utc(p.last_seen) if p else None,
            "seen_ago_s": None if self.age_s is None else round(self.age_s, 3),
            "running": self.running,
            "waiting": self.waiting,
            "capacity": p.capacity if p else None,
            "version": p.version if p else None,
            "heartbeat_s": p.interval_s if p else None,
            "started_at": iso_utc(p.started_at) if p else None,
            "stopped_at": iso_utc(p.stopped_at) if p else None,
        }


def active_attempts(journal: Journal, node_id: str | None = None) -> list[ActiveAttempt]:
    """The running attempts (of ``node_id``'s Goals, else of every node), by goal id.

    A record that cannot be read (corrupt) is left out: `refine check` names it."""
    with journal.snapshot():
        runs: dict[str, Run] = {}
        for stored in journal.aggregates("run", status="running"):
            try:
                run = run_from_stored(stored)
            except RefineError:
                continue
            goal_id = goal_id_of_run(run.run_id)
            if goal_id is not None and run.running_attempt is not None:
                runs[goal_id] = run
        goals = journal.load_many([goal_aggregate_id(g) for g in runs])
    found = []
    for goal_id, run in sorted(runs.items()):
        stored_goal = goals.get(goal_aggregate_id(goal_id))
        try:
            goal = goal_from_stored(stored_goal) if stored_goal is not None else None
        except RefineError:
            continue
        if goal is None or goal.run_id != run.run_id:
            continue  # not its Goal's current Run: `refine check` has more to say
        if node_id is None or goal.node_id == node_id:
            attempt = run.running_attempt
            assert attempt is not None
            found.append(ActiveAttempt(goal, run, attempt.epoch))
    return found


def list_nodes(journal: Journal) -> list[NodeView]:
    """Every node that has Goals or has beaten, by node id."""
    with journal.snapshot():
        now, rows = journal.presence()
        named = journal.goal_nodes()
        running = Counter(a.goal.node_id for a in active_attempts(journal))
        waiting = waiting_counts(journal)
    beaten = {row.node_id: row for row in rows}
    return [
        _view(node_id, beaten.get(node_id), running[node_id], now, waiting[node_id])
        for node_id in sorted({*beaten, *named})
    ]


def node_view(journal: Journal, node_id: str, *, count: bool = True) -> NodeView | None:
    """One node as `refine nodes` shows it; None when the journal does not know it.
    ``count=False``: its presence alone (``running`` 0), without reading any Run."""
    with journal.snapshot():
        now, rows = journal.presence()
        row = next((r for r in rows if r.node_id == node_id), None)
        known = row is not None or node_id in journal.goal_nodes()
        running = len(active_attempts(journal, node_id)) if known and count else 0
        waiting = waiting_counts(journal)[node_id] if known and count else 0
    return _view(node_id, row, running, now, waiting) if known else None


def waiting_counts(journal: Journal) -> Counter[str]:
    """Each node's Goals queued or held (one read of the index of the Goals still moving)."""
    counts = journal.count_by_status_and_node("goal", REASSIGNABLE)
    waiting: Counter[str] = Counter()
    for (_, node_id), n in counts.items():
        if node_id is not None:
            waiting[node_id] += n
    return waiting


def _view(node_id: str, row: Presence | None, running: int, now: float, waiting: int) -> NodeView:
    if row is None:
        return NodeView(node_id, "unknown", running, None, None, waiting)
    age = max(0.0, now - row.last_seen)
    return NodeView(node_id, row.state(now), running, row, age, waiting)
