"""Confirm cleanup of a whole node (DESIGN §14): `refine cleanup --node N`.

The operator states that node N's machine is gone (or its node stopped and its work ended):
every attempt the journal says runs on N is confirmed ended, each by the one-attempt Confirm
cleanup (``store.operator.confirm_cleanup``: its own command and command id per attempt, its
own checks, the Goal's redelivery rule), so a run that was interrupted can be run again and
does only what is left.

Presence (``presence``) is the precondition, never the trigger: refused while N is ``live``
(NodeLiveError, nothing written) and for a node that never beat (NodeUnseenError: nothing says
it is gone); an unknown node is bad input (NodeNotFoundError). Presence is read again before
each attempt: a node that comes back meanwhile keeps the attempts not yet confirmed. The method
recorded with each confirmation names the node's state and last beat.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from store.errors import (
    GoalStateError,
    GoalTerminalError,
    InvalidInputError,
    NoActiveAttemptError,
    NodeLiveError,
    NodeNotFoundError,
    NodeUnseenError,
    ProcessAliveError,
    RefineError,
    StaleAttemptError,
    StorageError,
)
from store.host.observe import live_workers
from store.journal.presence import State, iso_utc
from store.model.goal import OPERATOR_CONFIRMED, check_name, check_reason
from store.model.goals import REASSIGNABLE, Goals
from store.ops.bulk_plan import BulkPlan, Selection, plan_bulk
from store.ops.evidence import (
    alive_words,
    check_writable,
    count,
    default_operator,
    ending_of,
    record_of,
    worker_alive_words,
)
from store.ops.nodes import ActiveAttempt, NodeView, active_attempts, node_view, waiting_counts
from store.ops.operator import ActionReport, confirm_cleanup
from store.records import dataclass, replace

if TYPE_CHECKING:
    from store.journal.api import Journal

# The attempt ended otherwise between the listing and its confirmation: nothing left to do.
_ENDED_MEANWHILE = (NoActiveAttemptError, StaleAttemptError, GoalStateError, GoalTerminalError)


@dataclass(frozen=True)
class NodeCleanup:
    """What `refine cleanup --node` did: the node as found, and one report per attempt."""

    node: NodeView
    reports: tuple[ActionReport, ...]
    errors: tuple[RefineError, ...]  # why each attempt reported ``refused`` was, in order
    waiting: int = 0  # its Goals queued or held once done: only it starts them, or a move

    def text(self, *, next_step: bool = True) -> str:
        """Each attempt's line; ``next_step``: and what moves the Goals now waiting here."""
        head = f"node {self.node.node_id} {_seen_words(self.node)}"
        if not self.reports:  # one line, as a refusal is (issue 22): the dry run says the rest
            return f"{head}: nothing left to confirm (no attempt runs there)"
        lines = [f"{head}: {count(len(self.reports), 'running attempt')}"]
        lines += [f"  {r.text()}" for r in self.reports]
        if next_step:
            lines.append(self.next_step())
        return "\n".join(line for line in lines if line)

    def next_step(self, how: str = "") -> str:
        """What moves the Goals that now wait for this node (queued or held there, some by this
        cleanup): "" if none. ``how``: what does it, where the command line is not what the
        operator uses."""
        waiting = self.waiting
        if not waiting:
            return ""
        node = self.node.node_id
        how = how or f"`refine reassign --node {node} --status queued,held --to NODE`"
        return (
            f"{count(waiting, 'goal')} now wait{'s' if waiting == 1 else ''} for node {node}:"
            f" {how} moves {'it' if waiting == 1 else 'them'}"
        )


ENDINGS = ("requeued", "held", "exhausted", "cancelled")  # as ``ending_of`` says, in this order
WAITING_ENDINGS = ("requeued", "held")  # the endings that leave the Goal waiting for the node
_ENDING_WORDS = {
    "requeued": "requeued",
    "held": "held (redelivery: operator)",
    "exhausted": "exhausted (all attempts used)",
    "cancelled": "cancelled (a cancellation was pending)",
}


@dataclass(frozen=True)
class NodeCleanupPlan:
    """What `cleanup_node` finds before it writes: the node, and the attempts it would confirm
    (the dashboard's one confirmation says this, with the counts)."""

    node: NodeView
    attempts: tuple[ActiveAttempt, ...]
    # (goal id, why) of the attempts whose cleanup is refused on this machine: their process
    # is alive here (a stopped node's workers outlive it), as its confirmation would find.
    alive: tuple[tuple[str, str], ...] = ()
    # The node stopped cleanly on another machine: its workers outlive it there, unseen here.
    unseen: bool = False

    def refused(self, attempt: ActiveAttempt) -> str | None:
        """Why confirming ``attempt`` is refused here (its process alive), or None."""
        return dict(self.alive).get(attempt.goal.goal_id)

    def expect(self, attempt: ActiveAttempt) -> str:
        """What confirming ``attempt`` does: an ending (``ENDINGS``), or ``refused``."""
        return (
            "refused"
            if self.refused(attempt)
            else ending_of(attempt.goal, attempt.run, attempt.epoch)
        )

    def alive_text(self) -> str:
        """The attempts refused because their process is alive here, in words."""
        k = len(self.alive)
        return (
            f"{k} refused: {'its process is' if k == 1 else 'their processes are'} alive on"
            f" this machine (stop {'that goal' if k == 1 else 'those goals'} instead)"
        )

    def endings(self) -> dict[str, int]:
        """How many Goals each ending would get (``ENDINGS``; those with none left out)."""
        counts = dict.fromkeys(ENDINGS, 0)
        for a in self.attempts:
            if not self.refused(a):
                counts[ending_of(a.goal, a.run, a.epoch)] += 1
        return {ending: n for ending, n in counts.items() if n}

    def text(self, when: Callable[[float], str | None] = iso_utc) -> str:
        """One sentence with the counts; ``when`` writes the node's last beat."""
        node, n = self.node, len(self.attempts)
        if not n:
            return f"node {node.node_id}: nothing left to confirm (no attempt runs there)"
        since = f" ({node.state} since {when(node.presence.last_seen)})" if node.presence else ""
        endings = []
        for i, (ending, k) in enumerate(self.endings().items()):
            will = (" goal will be" if k == 1 else " goals will be") if i == 0 else ""
            endings.append(f"{k}{will} {_ENDING_WORDS[ending]}")
        if self.alive:
            endings.append(self.alive_text())
        said = f"Confirm the end of {count(n, 'attempt')} of node {node.node_id}{since}: "
        return said + ", ".join(endings) + self.unseen_words()

    def unseen_words(self) -> str:
        """The warning for a node that stopped cleanly on another machine ("" otherwise): a
        node's exit leaves its workers running, and nothing here can see them."""
        if not self.unseen or self.node.presence is None:
            return ""
        host = self.node.presence.host
        return (
            f"; node {self.node.node_id} stopped cleanly on host {host}, and its workers outlive"
            f" it: this machine cannot see whether they still run, so confirm only once their"
            f" work has ended (on {host} the cleanup refuses the attempts still running)"
        )

    def waiting_after(self, journal: Journal) -> list[str]:
        """The Goals that will wait for this node once its cleanup is done (queued or held
        there now, and those the cleanup requeues or holds), by id: what ``--to`` moves."""
        node_id = self.node.node_id
        now = Goals(journal).list_readable(status=list(REASSIGNABLE), node_id=node_id)
        ids = {goal.goal_id for goal in now}
        for a in self.attempts:
            if self.expect(a) in WAITING_ENDINGS:
                ids.add(a.goal.goal_id)
        return sorted(ids)


def plan_node_cleanup(
    journal: Journal, node_id: str, *, dry_run: bool = False, here: str | None = None
) -> NodeCleanupPlan:
    """The attempts `cleanup_node` would confirm, refused as it refuses (a bad or unknown node,
    a live one, one that never beat) and writing nothing. ``dry_run``: a preview, which a
    journal opened read-only may show too. ``here``: the operator's own node; the attempts
    whose cleanup will be refused on this machine (their recorded process, or their worker,
    alive here: a stopped node's workers outlive it) are said to be refused."""
    check_name(node_id, "node")
    if not dry_run:
        check_writable(journal)
    node = node_view(journal, node_id, count=False)  # its attempts are read just below
    if node is None:
        raise NodeNotFoundError(
            f"no node {node_id} in this journal: no goal names it and it never beat"
        )
    _refuse_live(node)
    attempts = active_attempts(journal, node_id)
    if attempts and node.state == "unknown":
        raise NodeUnseenError(
            f"node {node_id} never sent a heartbeat (a node without presence, or never started):"
            f" nothing says it is gone; confirm each of its {count(len(attempts), 'attempt')} with"
            " refine cleanup RUN --epoch E"
        )
    alive = _alive_here(journal, attempts, here) if here is not None and attempts else ()
    unseen = bool(attempts) and node.state == "stopped" and not _on_this_machine(node)
    return NodeCleanupPlan(replace(node, running=len(attempts)), tuple(attempts), alive, unseen)


def _on_this_machine(node: NodeView) -> bool:
    """Whether the node beat from this machine (its host name), where its workers are seen."""
    return node.presence is not None and node.presence.host == os.uname().nodename


def _alive_here(
    journal: Journal, attempts: Sequence[ActiveAttempt], here: str
) -> tuple[tuple[str, str], ...]:
    """(goal id, why) of the attempts whose cleanup ``confirm_cleanup`` refuses on this
    machine: a process record of ``here`` proves the process alive, or the attempt's worker
    runs here (found by its token, recorded or not)."""
    workers = live_workers()  # one pass over the processes for them all
    found = []
    for a in attempts:
        mine = a.goal.node_id == here
        record = record_of(journal, here, a.run.run_id, a.epoch) if mine else None
        why = alive_words(record, a.epoch)
        running = a.run.running_attempt
        pid = workers.get(running.worker) if running is not None else None
        if why is None and pid is not None:
            why = worker_alive_words(pid, a.epoch)
        if why is not None:
            found.append((a.goal.goal_id, f"{ProcessAliveError.code}: {why}"))
    return tuple(found)


def cleanup_node(
    journal: Journal,
    node_id: str,
    *,
    here: str,
    operator: str | None = None,
    method: str = OPERATOR_CONFIRMED,
) -> NodeCleanup:
    """Confirm the end of every running attempt of ``node_id`` while it is silent or stopped.

    ``here`` is the operator's own node: where its process records can be checked (a worker
    still alive on this machine refuses its attempt, as one-attempt cleanup does).
    """
    operator = check_name(operator or default_operator(), "operator")
    check_name(node_id, "node")
    check_name(here, "node")
    check_reason(method, "method")
    plan = plan_node_cleanup(journal, node_id)  # without ``here``: each confirmation checks
    # This machine's workers, looked for once for every attempt: each one is claimed already,
    # so its worker runs by now or has ended.
    workers = live_workers()
    done = [_confirm(journal, node_id, a, here, operator, method, workers) for a in plan.attempts]
    errors = tuple(error for _, error in done if error is not None)
    waiting = waiting_counts(journal)[node_id]
    return NodeCleanup(plan.node, tuple(report for report, _ in done), errors, waiting)


def plan_moving_waiting(
    journal: Journal, node_id: str, *, here: str, to: Sequence[str]
) -> BulkPlan:
    """The reassign of every Goal that waits for ``node_id`` (queued or held there) to ``to``
    (several: spread by room): what follows a node's cleanup when its machine is gone for good.
    Refused as the reassign refuses (an unknown ``to`` node), and ``to`` naming the node
    itself (InvalidInputError); writes nothing."""
    check_name(node_id, "node")
    if node_id in to:
        raise InvalidInputError(
            f"the goals of node {node_id} cannot move to node {node_id}: they wait there already"
        )
    waiting = Selection(node_id, REASSIGNABLE)
    return plan_bulk(journal, "reassign", node=here, selection=waiting, to=to)


def _refuse_live(node: NodeView) -> None:
    if node.state == "live":
        raise NodeLiveError(
            f"node {node.node_id} is live ({_seen_words(node)}): its attempts are its own to end;"
            " stop the node, or wait until it is silent"
        )


def _confirm(
    journal: Journal,
    node_id: str,
    attempt: ActiveAttempt,
    here: str,
    operator: str,
    method: str,
    workers: Mapping[str, int],
) -> tuple[ActionReport, RefineError | None]:
    """Confirm one attempt as its own command; a refusal is this attempt's report (and why)."""
    try:
        node = node_view(journal, node_id, count=False)  # again: it may have come back
        assert node is not None
        _refuse_live(node)
        report = confirm_cleanup(
            journal,
            attempt.run.run_id,
            epoch=attempt.epoch,
            node=here,
            operator=operator,
            method=_method(method, node)[:500],
            workers=workers,
        )
        return report, None
    except StorageError:
        raise  # the journal is gone for now: run it again later, it does what is left
    except _ENDED_MEANWHILE as exc:
        why = f"it ended meanwhile, nothing to confirm ({exc.message})"
        return _report(attempt, "skipped", why), None
    except RefineError as exc:
        return _report(attempt, "refused", f"{exc.code}: {exc.message}"), exc


def _method(method: str, node: NodeView) -> str:
    """The recorded method: the operator's words and the evidence, the node's last beat."""
    return f"{method}: node {node.node_id} {_seen_words(node)}"


def _seen_words(node: NodeView) -> str:
    state: State = node.state
    if node.presence is None:
        return f"{state}, never seen"
    return f"{state}, last beat {iso_utc(node.presence.last_seen)}"


def _report(attempt: ActiveAttempt, outcome: str, why: str) -> ActionReport:
    return ActionReport(
        action="cleanup",
        goal_id=attempt.goal.goal_id,
        run_id=attempt.run.run_id,
        epoch=attempt.epoch,
        node_id=attempt.goal.node_id,
        signals=(),
        process="none",
        requeued=False,
        held=False,
        outcome=outcome,
        why=why,
    )
