"""Messages from the live worker to the app: small, and one per batch of commits.

A burst of commits arrives as one watcher batch, and the worker reads everything since the last
sequence in one go, so a burst becomes one ``JournalUpdate``; the next read starts only after the
previous one was applied (Dolphie's rule), so updates never overlap.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from textual.message import Message

from refine_tui.rows import AttemptRow, GoalRow, RunRow, WorkerRow
from store.journal.api import Event
from store.journal.presence import Presence
from store.ops.attempt_spans import AttemptSpan
from store.ops.nodes import NodeView
from store.ops.pulses import Pulses


@dataclass
class JournalUpdate(Message):
    """What changed, read off the UI thread. ``full``: ``goals`` is the whole visible set."""

    full: bool
    goals: dict[str, GoalRow | None]
    total: int
    last_sequence: int
    last_commit: float | None
    runs: list[RunRow] | None = None  # the drilled-into Goal's Runs, when they may have changed
    attempts: list[AttemptRow] | None = None  # the drilled-into Run's Attempts, likewise
    workers: list[WorkerRow] | None = None
    history: list[Event] = field(default_factory=list)  # new events of the detail pane's Run
    partial: bool = False  # a full read's first screen: the whole set follows at once
    painted: threading.Event | None = None  # (partial) set once the first screen is painted
    snapshot: bool = False  # the journal is a frozen snapshot (read-only folder): never changes
    nodes: list[NodeView] | None = None  # every node's presence (the Nodes view is shown)
    presence: NodeView | None = None  # the drilled-into attempts' node, when it is another one
    pulses: Pulses | None = None  # the last hour's attempt counts per minute (when they changed)
    # The timeline screen's (goal_id, run_id) and its attempts, when they may have changed.
    timeline: tuple[tuple[str, str | None], list[AttemptSpan]] | None = None
    # Every node's presence and the database's clock (read every few seconds, for alerts).
    node_presence: tuple[float, list[Presence]] | None = None


@dataclass
class JournalTrouble(Message):
    """The journal cannot be read: ``state`` is ``missing``, ``broken`` or ``stale``."""

    state: str
    detail: str
