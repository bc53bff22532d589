"""A Goal's attempts as spans of time (DESIGN §17, the attempt timeline): for each attempt of
its Runs (every round, or one Run), when it was claimed, when it ended and how.

Times are commit times (wall clock, informational: they order and size bars, never decide
anything). Reads only; one snapshot.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from store.errors import RefineError
from store.model.goal import run_id_for
from store.model.run import Run, run_aggregate_id, run_from_stored
from store.ops.reads import ENDINGS, read_goal, run_history
from store.records import dataclass

if TYPE_CHECKING:
    from store.journal.api import Journal

Outcome = Literal["completed", "failed", "interrupted", "cancelled", "running"]
OUTCOMES: tuple[Outcome, ...] = ("completed", "failed", "interrupted", "cancelled", "running")


@dataclass(frozen=True)
class AttemptSpan:
    """One attempt on a time axis. ``ended_at`` None: it runs (or its end is not recorded)."""

    run_id: str
    round: int
    epoch: int
    worker: str
    outcome: Outcome
    reason: str  # a failure's reason, a run's cancel reason ("" when none)
    started_at: float | None
    ended_at: float | None


def attempt_spans(journal: Journal, goal_id: str, run_id: str | None = None) -> list[AttemptSpan]:
    """The attempts of ``goal_id``'s Runs, oldest round first, each Run's by epoch (only
    ``run_id``'s when given). A Goal or Run that does not exist (or a corrupt Run) has none."""
    with journal.snapshot():
        goal = read_goal(journal, goal_id)
        if goal is None:
            return []
        rounds = range(1, goal.round + 1)
        wanted = {n: run_id_for(goal_id, n) for n in rounds}
        if run_id is not None:
            wanted = {n: r for n, r in wanted.items() if r == run_id}
        stored = journal.load_many([run_aggregate_id(r) for r in wanted.values()])
        spans: list[AttemptSpan] = []
        for n, rid in wanted.items():
            record = stored.get(run_aggregate_id(rid))
            try:
                run = run_from_stored(record) if record is not None else None
            except RefineError:
                continue  # `refine check` names it
            if run is not None and run.attempts:
                spans += _spans(journal, run, n)
    return spans


def _spans(journal: Journal, run: Run, round_: int) -> list[AttemptSpan]:
    started: dict[int, float] = {}
    ended: dict[int, float] = {}
    cancelled_at: float | None = None
    for event in run_history(journal, run.run_id):
        epoch = event.data.get("epoch")
        if event.type == "attempt.claimed" and isinstance(epoch, int):
            started[epoch] = event.committed_at
        elif event.type in ENDINGS and isinstance(epoch, int):
            ended[epoch] = event.committed_at
        elif event.type == "run.cancelled":
            cancelled_at = event.committed_at
    spans = []
    for a in run.attempts:
        outcome: Outcome = a.state  # type: ignore[assignment]  # one of ATTEMPT_STATES
        reason = a.reason or ""
        end = ended.get(a.epoch) if a.state != "running" else None
        # Ended by the Run's cancellation: its ending and run.cancelled are one command (one
        # commit time); a queued Run cancelled later leaves its last attempt's outcome alone.
        if end is not None and end == cancelled_at and a.state != "completed":
            outcome, reason = "cancelled", run.cancel_reason or ""
        spans.append(
            AttemptSpan(
                run_id=run.run_id,
                round=round_,
                epoch=a.epoch,
                worker=a.worker,
                outcome=outcome,
                reason=reason,
                started_at=started.get(a.epoch),
                ended_at=end,
            )
        )
    return spans
