"""The status names of a Goal and of a Run, defined once for every layer.

The values are the strings stored in the journal and shown in ``--json``: a member compares and
hashes as its value (``StrEnum``), so the names may be spelled either way. The tuples and sets
below hold the plain strings (an SQL term or a ``repr`` never sees a member).
"""

from __future__ import annotations

from enum import StrEnum


class GoalStatus(StrEnum):
    QUEUED = "queued"
    HELD = "held"
    RUNNING = "running"
    COMPLETED = "completed"
    EXHAUSTED = "exhausted"
    CANCELLED = "cancelled"


class RunStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    EXHAUSTED = "exhausted"
    CANCELLED = "cancelled"


GOAL_STATUSES: tuple[str, ...] = tuple(status.value for status in GoalStatus)
RUN_STATUSES: tuple[str, ...] = tuple(status.value for status in RunStatus)
# A Goal and a Run end the same three ways; a Goal still moving is in one of the others.
TERMINAL_GOAL_STATUSES: tuple[str, ...] = tuple(
    status.value for status in (GoalStatus.COMPLETED, GoalStatus.EXHAUSTED, GoalStatus.CANCELLED)
)
TERMINAL_STATUSES = frozenset(TERMINAL_GOAL_STATUSES)
ACTIVE_GOAL_STATUSES: tuple[str, ...] = tuple(
    status for status in GOAL_STATUSES if status not in TERMINAL_STATUSES
)
