"""The plan of a batch (DESIGN §15): which Goals, as read once when it is made, and per Goal
what Cancel, Stop, Release or Reassign will do to it. Reads only: nothing here writes or
signals.

The plan is the batch's frozen set: each Goal's version, status and round as read here. The
batch (store.ops.bulk) acts on a Goal only while it is still at that version; the dashboard's
confirmation and `refine ... --dry-run` show ``summary()`` and each Goal's ``expect``/``why``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from store.errors import (
    CorruptGoalError,
    CorruptRunError,
    GoalNotFoundError,
    GoalStateError,
    InvalidInputError,
    NodeNotFoundError,
    NoProcessRecordError,
    NotPermittedError,
    NotThisNodeError,
)
from store.host.observe import live_workers
from store.host.processes import ProcessRecord
from store.journal.api import Journal
from store.model.execution import Run, run_from_stored
from store.model.goal import GOAL_STATUSES, goal_aggregate_id, goal_from_stored
from store.model.goals import REASSIGNABLE, CorruptGoal, Goal, Goals, check_name
from store.model.run import run_aggregate_id
from store.ops.evidence import (
    count,
    ending_of,
    ending_words,
    foreign_words,
    no_record_advice,
    registry_of,
)
from store.ops.nodes import list_nodes
from store.records import dataclass, replace

BULK_ACTIONS = ("cancel", "stop", "release", "reassign")
# What each action's turn reports when it was done to the Goal.
DONE = {"cancel": "cancelled", "stop": "stopped", "release": "released", "reassign": "reassigned"}
# The action's end already holds: nothing to do, and nothing wrong (a batch run again meets
# these for the Goals its first run did).
NOTHING_TO_DO = ("already terminal", "not running", "not held", "already there")
REFUSED, SKIPPED = "refused", "skipped"


@dataclass(frozen=True)
class Selection:
    """Every Goal of a node in one of these statuses (as the plan reads them)."""

    node_id: str
    statuses: tuple[str, ...]


@dataclass(frozen=True)
class PlannedGoal:
    """One Goal of the frozen set, as read when the plan was made, and what the action does."""

    goal_id: str
    title: str
    node_id: str
    status: str  # "corrupt" for a record that cannot be read
    version: int
    round: int
    run_id: str
    epoch: int | None  # its running attempt, if any
    record: ProcessRecord | None  # this node's record of that attempt (None: none here)
    expect: str  # DONE[action], one of NOTHING_TO_DO, or "refused"
    why: str
    code: str | None = None  # "refused": the error code the single-goal command gives
    after: str = ""  # what follows (a key of AFTER_WORDS): "stop-process", "requeued", ...
    to: str = ""  # reassign: the node this Goal moves to

    @property
    def stop_after(self) -> bool:
        """Cancel: its process runs here and is stopped once the batch's intents are in."""
        return self.after == "stop-process"

    def to_json(self) -> dict[str, Any]:
        return {
            "goal_id": self.goal_id,
            "title": self.title,
            "node_id": self.node_id,
            "status": self.status,
            "version": self.version,
            "round": self.round,
            "run_id": self.run_id,
            "epoch": self.epoch,
            "pid": self.record.pid if self.record is not None else None,
            "expect": self.expect,
        } | ({"to": self.to} if self.to else {})


@dataclass(frozen=True)
class BulkPlan:
    """A batch's frozen set and what it will do; ``store.ops.bulk.run_bulk`` carries it out."""

    action: str  # cancel | stop | release | reassign
    node: str  # this node: where processes can be stopped
    goals: tuple[PlannedGoal, ...]
    selection: Selection | None = None  # None: the Goals were named
    to: tuple[str, ...] = ()  # reassign: the nodes the Goals move to

    @property
    def acts(self) -> bool:
        """Some Goal of the batch would be acted on (else each is nothing to do, or refused)."""
        return any(p.expect in DONE.values() for p in self.goals)

    def summary(self) -> str:
        """One sentence for a confirmation, e.g. "Cancel 3 goals: 2 running (their processes
        are stopped after), 1 queued"."""
        head = f"{self.action.capitalize()} {count(len(self.goals), 'goal')}"
        if self.to:
            head += f" to node{'s' if len(self.to) > 1 else ''} {', '.join(self.to)}"
        if not self.goals:
            return f"{head}: none matches"
        groups = Counter(_group(p) for p in sorted(self.goals, key=_rank))
        return f"{head}: " + ", ".join(_phrase(n, *group) for group, n in groups.items())


def _rank(p: PlannedGoal) -> tuple[int, int]:
    """The summary's order: what is acted on (running first), nothing to do, refused."""
    kind = 0 if p.expect in DONE.values() else 1 if p.expect in NOTHING_TO_DO else 2
    return kind, STATUS_ORDER.index(p.status) if p.status in STATUS_ORDER else len(STATUS_ORDER)


STATUS_ORDER = ("running", "cancelled", "queued", "held", "completed", "exhausted")


# A planned Goal's aftermath (``PlannedGoal.after``) in words: (for one, for several).
AFTER_WORDS = {
    "stop-process": ("its process is stopped after", "their processes are stopped after"),
    "other-node": ("its node stops it", "their nodes stop them"),
    "no-record": ("no process record here: confirm cleanup", "no process records here"),
    "other-user": (
        "another user's process: its node stops it",
        "other users' processes: their nodes stop them",
    ),
    "requeued": ("requeued after", "requeued after"),
    "held": ("held after, until released", "held after, until released"),
    "exhausted": ("exhausted after", "exhausted after"),
    "cancelled": ("its pending cancellation recorded", "their pending cancellations recorded"),
    "queued": ("queued again", "queued again"),
    "held-there": ("it stays held until released", "they stay held until released"),
}


def _group(p: PlannedGoal) -> tuple[str, str]:
    """What a Goal is, and its aftermath, as the summary counts them."""
    if p.expect == REFUSED:
        return ("refused", p.code or "")
    if p.expect in NOTHING_TO_DO:
        return (p.expect, p.after or "nothing to do")
    if p.after == "other-node":
        return (f"{p.status} on another node", p.after)
    return (p.status, p.after)


def _phrase(n: int, what: str, after: str) -> str:
    one, several = AFTER_WORDS.get(after, (after, after))
    words = one if n == 1 else several
    return f"{n} {what}" + (f" ({words})" if words else "")


# --- reading the frozen set --------------------------------------------------------------------


def plan_bulk(
    journal: Journal,
    action: str,
    *,
    node: str,
    goal_ids: Sequence[str] | None = None,
    selection: Selection | None = None,
    grace_s: float = 5.0,
    to: str | Sequence[str] | None = None,
) -> BulkPlan:
    """Read the batch's Goals once (named ones, or a selection) and say what ``action`` does.

    Refused before anything is read when the input is wrong (InvalidInputError: an unknown
    action or status, names and a selection together, or neither; reassign without ``to``,
    or another action with it); a named Goal that does not exist is refused with all such ids
    named (GoalNotFoundError), and so is a ``to`` node the journal does not know
    (NodeNotFoundError: no Goal names it and it never beat, most likely a typo). Reassign to
    several nodes spreads the Goals: each to the node with the most room left (its capacity
    less the attempts running there, less the Goals already given to it). Cancel's reason is
    given to ``run_bulk``: the plan is what a confirmation shows before the reason is asked for.
    """
    if action not in BULK_ACTIONS:
        raise InvalidInputError(f"action must be one of {', '.join(BULK_ACTIONS)}")
    check_name(node, "node")
    if (goal_ids is None) == (selection is None):
        raise InvalidInputError("name the goals, or select them by node and status: not both")
    targets = _targets(to)
    if (action == "reassign") != bool(targets):
        raise InvalidInputError("reassign needs the node to move the goals to; no other action")
    with journal.snapshot():  # goals and their runs as of one moment
        if goal_ids is not None:
            entries = _named(journal, goal_ids)
        else:
            assert selection is not None
            _check_selection(selection)
            entries = Goals(journal).list_readable(
                status=list(selection.statuses), node_id=selection.node_id
            )
        runs = _current_runs(journal, [e for e in entries if isinstance(e, Goal)])
        spread = _Spread(_rooms(journal, targets)) if targets else None
    ours = [runs.get(e.goal_id) for e in entries if isinstance(e, Goal) and e.node_id == node]
    records = _records(journal, node, [r for r in ours if isinstance(r, Run)])
    planned = tuple(
        _plan_one(action, entry, runs.get(entry.goal_id), records, node, grace_s, spread)
        for entry in entries
    )
    return BulkPlan(action, node, _advised(journal, node, planned, runs), selection, targets)


def _advised(
    journal: Journal,
    node: str,
    planned: tuple[PlannedGoal, ...],
    runs: dict[str, Run | CorruptRunError],
) -> tuple[PlannedGoal, ...]:
    """A Stop refused for want of a process record says why there is none, and what to do, as
    the single Stop does (its worker found on this machine, the node live from another
    machine, an attempt still starting): "confirm cleanup" is the advice only when none holds."""
    registry, workers = None, None  # read once, for the first goal that needs them
    advised = []
    for p in planned:
        run = runs.get(p.goal_id)
        attempt = run.running_attempt if isinstance(run, Run) else None
        if p.code == NoProcessRecordError.code and attempt is not None:
            registry = registry or registry_of(journal, node)
            workers = live_workers() if workers is None else workers
            why = no_record_advice(registry, journal, p.run_id, attempt, workers)
            p = replace(p, why=why)
        elif p.epoch is not None and (p.record is not None or p.after == "no-record"):
            registry = registry or registry_of(journal, node)
            if foreign := foreign_words(registry, p.run_id, p.epoch, p.record):
                p = _foreign(p, foreign)
        advised.append(p)
    return tuple(advised)


def _foreign(p: PlannedGoal, words: str) -> PlannedGoal:
    """A planned Goal whose process this user cannot act on (``foreign_words``): a Stop is
    refused; a Cancel leaves the process to its node, which runs as the user it is."""
    if p.expect == "stopped":
        why, code = f"{words}: stop it as that user", NotPermittedError.code
        return replace(p, expect=REFUSED, why=why, code=code, after="")
    done = (
        f"already {p.status}"
        if p.expect == "already terminal"
        else f"running attempt {p.epoch}: cancelled"
    )
    return replace(p, why=f"{done}; {words}: its node stops it", after="other-user")


def _targets(to: str | Sequence[str] | None) -> tuple[str, ...]:
    """The nodes named to move Goals to, each once, in the order named."""
    names = [] if to is None else [to] if isinstance(to, str) else list(to)
    return tuple(dict.fromkeys(check_name(name, "node") for name in names))


def _rooms(journal: Journal, targets: tuple[str, ...]) -> dict[str, int]:
    """Each target's room (capacity less its running attempts; a node that never beat has
    none); unknown targets refused together."""
    nodes = {n.node_id: n for n in list_nodes(journal)}
    unknown = [t for t in targets if t not in nodes]
    if unknown:
        raise NodeNotFoundError(
            f"no node {', '.join(unknown)} in this journal: no goal names it and it never beat"
            " (start its `refine node` first, or check the name): nothing was done"
        )
    return {target: nodes[target].room for target in targets}


class _Spread:
    """The reassign targets and their room, taken Goal by Goal: the most room first."""

    def __init__(self, rooms: dict[str, int]) -> None:
        self.rooms = rooms
        self.order = {name: n for n, name in enumerate(rooms)}  # ties: the order named

    def __contains__(self, node_id: str) -> bool:
        return node_id in self.rooms

    def take(self) -> str:
        best = max(self.rooms, key=lambda name: (self.rooms[name], -self.order[name]))
        self.rooms[best] -= 1
        return best


def _check_selection(selection: Selection) -> None:
    check_name(selection.node_id, "node")
    statuses = selection.statuses
    if not statuses or any(s not in GOAL_STATUSES for s in statuses):
        raise InvalidInputError(f"statuses must be among {', '.join(GOAL_STATUSES)}")


def _named(journal: Journal, goal_ids: Sequence[str]) -> list[Goal | CorruptGoal]:
    """The named Goals in the order named (each once); all unknown ids refused together."""
    if isinstance(goal_ids, str) or not goal_ids:
        raise InvalidInputError("name at least one goal")
    ids = list(dict.fromkeys(check_name(g, "goal_id") for g in goal_ids))
    stored = journal.load_many([goal_aggregate_id(g) for g in ids])
    missing = [g for g in ids if goal_aggregate_id(g) not in stored]
    if missing:
        raise GoalNotFoundError(
            f"no goal {', '.join(missing)}: nothing was done", goal_id=missing[0]
        )
    entries: list[Goal | CorruptGoal] = []
    for goal_id in ids:
        row = stored[goal_aggregate_id(goal_id)]
        try:
            entries.append(goal_from_stored(row))
        except CorruptGoalError as exc:
            entries.append(CorruptGoal(goal_id, row.version, exc))
    return entries


def _current_runs(journal: Journal, goals: Iterable[Goal]) -> dict[str, Run | CorruptRunError]:
    """The current Run of each Goal that may have a running attempt (running, or cancelled
    with its cancellation pending), by goal id."""
    wanted = {g.goal_id: g.run_id for g in goals if g.status in ("running", "cancelled")}
    stored = journal.load_many([run_aggregate_id(r) for r in wanted.values()])
    runs: dict[str, Run | CorruptRunError] = {}
    for goal_id, run_id in wanted.items():
        row = stored.get(run_aggregate_id(run_id))
        if row is None:
            continue
        try:
            runs[goal_id] = run_from_stored(row)
        except CorruptRunError as exc:
            runs[goal_id] = exc
    return runs


def _records(journal: Journal, node: str, runs: Iterable[Run]) -> dict[str, ProcessRecord]:
    """This node's process records of these Runs' running attempts, by run id."""
    registry = None
    found: dict[str, ProcessRecord] = {}
    for run in runs:
        attempt = run.running_attempt
        if attempt is None:
            continue
        registry = registry or registry_of(journal, node)
        record = registry.get(run.run_id, attempt.epoch)
        if record is not None:
            found[run.run_id] = record
    return found


# --- what the action does to one Goal ---------------------------------------------------------


def _plan_one(
    action: str,
    entry: Goal | CorruptGoal,
    run: Run | CorruptRunError | None,
    records: dict[str, ProcessRecord],
    node: str,
    grace_s: float,
    spread: _Spread | None = None,
) -> PlannedGoal:
    if isinstance(entry, CorruptGoal):  # one bad record spoils its own row only
        error = entry.error
        return PlannedGoal(
            goal_id=entry.goal_id,
            title="",
            node_id="",
            status="corrupt",
            version=entry.version,
            round=0,
            run_id="",
            epoch=None,
            record=None,
            expect=REFUSED,
            why=error.message,
            code=error.code,
        )
    goal = entry
    if isinstance(run, CorruptRunError):
        return _planned(goal, None, None, REFUSED, run.message, code=run.code)
    attempt = run.running_attempt if run is not None and run.run_id == goal.run_id else None
    record = records.get(goal.run_id) if attempt is not None and goal.node_id == node else None
    epoch = attempt.epoch if attempt is not None else None
    if action == "cancel":
        return _plan_cancel(goal, epoch, record, node, grace_s)
    if action == "stop":
        return _plan_stop(goal, run, epoch, record, node, grace_s)
    if action == "reassign":
        assert spread is not None
        return _plan_reassign(goal, epoch, spread)
    if goal.terminal:
        return _planned(goal, None, None, "already terminal", f"already {goal.status}")
    if goal.status != "held":
        return _planned(goal, None, None, "not held", f"{goal.status}: nothing to release")
    return _planned(
        goal, None, None, "released", "held: released, the goal is queued again", after="queued"
    )


def _planned(
    goal: Goal,
    epoch: int | None,
    record: ProcessRecord | None,
    expect: str,
    why: str,
    *,
    code: str | None = None,
    after: str = "",
) -> PlannedGoal:
    return PlannedGoal(
        goal.goal_id,
        goal.title,
        goal.node_id,
        goal.status,
        goal.version,
        goal.round,
        goal.run_id,
        epoch,
        record,
        expect,
        why,
        code,
        after,
    )


def _signals(record: ProcessRecord, grace_s: float) -> str:
    return f"SIGTERM to process group {record.pgid}, SIGKILL after {grace_s:g} s"


def _plan_cancel(
    goal: Goal, epoch: int | None, record: ProcessRecord | None, node: str, grace_s: float
) -> PlannedGoal:
    which = f"attempt {epoch}"
    if goal.terminal:
        why = f"already {goal.status}"
        if epoch is None:
            return _planned(goal, None, None, "already terminal", why)
        if record is not None:  # a cancel whose cleanup was left undone (an interrupted batch)
            why += f"; {which} still runs here: its process is stopped now and the end recorded"
            return _planned(goal, epoch, record, "already terminal", why, after="stop-process")
        after, words = _elsewhere(goal, node)
        return _planned(goal, epoch, None, "already terminal", f"{why}; {words}", after=after)
    if epoch is None:
        return _planned(goal, None, None, "cancelled", f"{goal.status}: cancelled at once")
    if record is None:
        after, words = _elsewhere(goal, node)
        return _planned(
            goal, epoch, None, "cancelled", f"running {which}: cancelled; {words}", after=after
        )
    signals = _signals(record, grace_s)
    why = f"running {which} here: cancelled, then its process is stopped ({signals})"
    return _planned(goal, epoch, record, "cancelled", why, after="stop-process")


def _elsewhere(goal: Goal, node: str) -> tuple[str, str]:
    """Who ends a cancelled attempt that this node cannot stop: (aftermath, in words)."""
    if goal.node_id != node:
        return "other-node", f"it runs on node {goal.node_id}, whose scheduler stops it"
    return "no-record", "no process record here: confirm cleanup once its work has ended"


def _plan_stop(
    goal: Goal,
    run: Run | None,
    epoch: int | None,
    record: ProcessRecord | None,
    node: str,
    grace_s: float,
) -> PlannedGoal:
    if epoch is None or run is None:
        if goal.terminal:
            return _planned(goal, None, None, "already terminal", f"already {goal.status}")
        why = f"{goal.status}: no attempt is running, nothing to stop"
        return _planned(goal, None, None, "not running", why)
    if goal.node_id != node:
        why = f"attempt {epoch} runs on node {goal.node_id}: stop it from that node"
        return _planned(goal, epoch, None, REFUSED, why, code=NotThisNodeError.code)
    if record is None:
        why = (
            f"no process record for attempt {epoch} here: if its work has ended, confirm"
            " cleanup instead"
        )
        return _planned(goal, epoch, None, REFUSED, why, code=NoProcessRecordError.code)
    why = f"attempt {epoch}: {_signals(record, grace_s)}; {ending_words(goal, run, epoch)}"
    return _planned(goal, epoch, record, "stopped", why, after=ending_of(goal, run, epoch))


def _plan_reassign(goal: Goal, epoch: int | None, spread: _Spread) -> PlannedGoal:
    """A queued or held Goal moves to a target node as its next round (a held one stays held
    there: moving it is not a release); a running one is refused, its attempt first ends."""
    if goal.terminal:
        return _planned(goal, None, None, "already terminal", f"already {goal.status}")
    if goal.node_id in spread:
        return _planned(goal, None, None, "already there", f"{goal.status} on node {goal.node_id}")
    if goal.status not in REASSIGNABLE:
        which = f"attempt {epoch}" if epoch is not None else "its attempt"
        why = (
            f"{goal.status} on node {goal.node_id}: only a queued or held goal moves (stop"
            f" {which}, or confirm its cleanup if that node is gone, first)"
        )
        return _planned(goal, epoch, None, REFUSED, why, code=GoalStateError.code)
    to = spread.take()
    why = f"{goal.status} on node {goal.node_id}: moved to node {to} as round {goal.round + 1}"
    if goal.status == "held":
        why += ", held there until released"
    after = "held-there" if goal.status == "held" else ""
    return replace(_planned(goal, None, None, "reassigned", why, after=after), to=to)
