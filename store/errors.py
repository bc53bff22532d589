"""Typed refusals. Every error has a stable ``code``; callers branch on the class or the code."""

from __future__ import annotations


class RefineError(Exception):
    """Base of every refusal the store raises. ``code`` is stable and machine-readable."""

    code = "REFINE_ERROR"

    def __init__(
        self, message: str, *, run_id: str | None = None, goal_id: str | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.run_id = run_id
        self.goal_id = goal_id

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class InvalidInputError(RefineError):
    code = "INVALID_INPUT"


class VersionConflictError(RefineError):
    code = "VERSION_CONFLICT"


class CommandConflictError(RefineError):
    code = "COMMAND_CONFLICT"


class RunExistsError(RefineError):
    code = "RUN_EXISTS"


class RunNotFoundError(RefineError):
    code = "RUN_NOT_FOUND"


class RunTerminalError(RefineError):
    code = "RUN_TERMINAL"


class CancelPendingError(RefineError):
    code = "CANCEL_PENDING"


class AttemptActiveError(RefineError):
    code = "ATTEMPT_ACTIVE"


class StaleAttemptError(RefineError):
    code = "STALE_ATTEMPT"


class CorruptRunError(RefineError):
    code = "CORRUPT_RUN"


class StorageError(RefineError):
    """The journal cannot be used right now. The subclasses say why; all keep code ``STORAGE``,
    and callers tell them apart by class, never by message text."""

    code = "STORAGE"


class JournalMissingError(StorageError):
    """No journal at the location (and it may not be created there), or no longer the one this
    handle opened (the file was deleted or replaced): reopen."""


class JournalLockedError(StorageError):
    """Another writer holds the journal longer than the busy timeout: try again later."""


class NotAJournalError(StorageError):
    """The location holds something else: another application's database, a damaged file or a
    newer schema."""


class StorageUnreachableError(StorageError):
    """The database cannot be reached: server down, connection lost, authentication refused,
    no permission to open the file."""


class ServerFullError(StorageUnreachableError):
    """The server is at its connection limit (SQLSTATE 53300: ``max_connections``, or a role's
    or database's own limit): unreachable for now, retried as any unreachable server is."""


class JournalNotPermittedError(StorageError):
    """The role may not do this (SQLSTATE 42501, or authorization refused: class 28): waiting
    does not help, so it is never retried; a writable open by a role that may only read is
    refused with it."""


class DiskFullError(StorageError):
    """The database has no room to commit: nothing was recorded."""


class BackendUnavailableError(StorageError):
    """The location names a backend this installation cannot load (e.g. its driver is missing)."""


class JournalClosedError(RefineError):
    code = "CLOSED"


class JournalReadOnlyError(RefineError):
    code = "READ_ONLY"


class DecisionError(RefineError):
    """A transition broke an invariant: a bug. Nothing was recorded; ``__cause__`` says why."""

    code = "DECISION_FAILED"


# --- Goals and operator commands -------------------------------------------------------------


class GoalExistsError(RefineError):
    code = "GOAL_EXISTS"


class GoalNotFoundError(RefineError):
    code = "GOAL_NOT_FOUND"


class GoalStateError(RefineError):
    """The Goal is not in a status that allows the operation (e.g. start of a held Goal)."""

    code = "GOAL_STATE"


class GoalTerminalError(RefineError):
    code = "GOAL_TERMINAL"


class CorruptGoalError(RefineError):
    code = "CORRUPT_GOAL"


class NotThisNodeError(RefineError):
    """The work belongs to another node; the message names the owner."""

    code = "NOT_THIS_NODE"


class NoActiveAttemptError(RefineError):
    code = "NO_ACTIVE_ATTEMPT"


class NoProcessRecordError(RefineError):
    """Stop needs this node's process record of the attempt; without one, confirm cleanup."""

    code = "NO_PROCESS_RECORD"


class NotPermittedError(RefineError):
    """Stop refused: the attempt's process runs as another user (its node's), whom this user
    may not signal; nothing was written or signalled."""

    code = "NOT_PERMITTED"


class ProcessAliveError(RefineError):
    """Cleanup refused: the recorded process is alive (same pid and create time): use Stop."""

    code = "PROCESS_ALIVE"


class StateDirInUseError(InvalidInputError):
    """A node's state dir holds another journal's process records and logs: one state dir
    serves one journal (the message names both, and what to do)."""

    code = "STATE_DIR_IN_USE"


class TargetNotEmptyError(RefineError):
    """`refine copy` writes only into an empty journal: nothing was copied."""

    code = "TARGET_NOT_EMPTY"


class WaitTimeoutError(RefineError):
    """`refine wait`: the goal did not reach a wanted status within the timeout (not yet, where
    GOAL_TERMINAL says never: the CLI gives it an exit code of its own)."""

    code = "WAIT_TIMEOUT"


class LogElsewhereError(RefineError):
    """`refine logs`: the attempt ran on another node; its log is a file on that machine."""

    code = "LOG_ELSEWHERE"


class NoLogError(RefineError):
    """`refine logs`: no such attempt, or it left no log on this node."""

    code = "NO_LOG"


# --- Nodes: presence and the cleanup of a whole node (DESIGN §14) ----------------------------


class NodeNotFoundError(InvalidInputError):
    """No Goal names the node and it never beat: the journal does not know it (a typo?)."""

    code = "NODE_NOT_FOUND"


class NodeLiveError(RefineError):
    """The node beats (``live``): `refine cleanup --node` leaves its attempts to it, and a second
    `refine node` of that name does not start beside it (unless ``--force``)."""

    code = "NODE_LIVE"


class NodeUnseenError(RefineError):
    """`refine cleanup --node`: the node has running attempts but never beat (it ran a version
    without presence), so nothing says it is gone: confirm each attempt instead."""

    code = "NODE_UNSEEN"
