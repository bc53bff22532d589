"""The Goals API: every Goal transition with the Run change it implies, and the Goal reads.

A Goal (record and rules: store.model.goal) names the node that may advance it, its recipe (an
argv list), its budget and how an interrupted attempt is redelivered. Each Round of a Goal has
one Run (``<goal_id>.r<round>``), kept by store.model.execution. Every operation here that changes a
Goal and its Run commits both in one ``journal.execute`` with both aggregates in ``expected``, so
they never disagree.

Pins of a Goal's Run (fixed at submission):
- ``candidate_digest``: "sha256:" + sha256 of the canonical JSON of the recipe {argv, cwd};
- ``recipe_revision``: RECIPE_REVISION, the recipe format (argv list + cwd, version 1);
- ``scenario_revision``: "node:<node_id>", the node the Round was submitted for.

A Round moves on only by reassignment: the old Run (queued) is cancelled as superseded and a new
Run is submitted for the new node, so a worker launched for an older Round can never claim.

One module over 600 lines because each transition's pure decision (``_decide_*``) sits beside
the one ``Goals`` method that commits it: a rule and its command are read together.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from store.errors import (
    CommandConflictError,
    CorruptGoalError,
    DecisionError,
    GoalExistsError,
    GoalNotFoundError,
    GoalStateError,
    GoalTerminalError,
    InvalidInputError,
    NotThisNodeError,
    RefineError,
    RunNotFoundError,
    VersionConflictError,
)
from store.journal.api import Change, Command, Journal, Outcome, Stored
from store.model.execution import (
    Attempt,
    Run,
    decide_run,
    run_from_stored,
    validate_run_command,
)
from store.model.goal import (
    GOAL_STATUSES,
    MAX_NAME,
    MAX_ROUND,
    OPERATOR_CONFIRMED,
    TERMINAL_STATUSES,
    WORKER_CLEANUP_METHOD,
    CorruptGoal,
    Goal,
    GoalStatus,
    check_actor,
    check_argv,
    check_budget,
    check_cwd,
    check_epoch,
    check_goal_state,
    check_identifier,
    check_integer,
    check_name,
    check_reason,
    check_redelivery,
    check_run_of,
    check_title,
    ended_by_words,
    goal_aggregate_id,
    goal_from_stored,
    goal_id_of_run,
    goal_text,
    goal_view,
    pins_for,
    run_id_for,
)
from store.model.run import run_aggregate_id, run_view
from store.records import dataclass

# The Goal model's names that callers have always imported from here.
__all__ = [
    "GOAL_STATUSES",
    "MAX_NAME",
    "OPERATOR_CONFIRMED",
    "SETTLE_OUTCOMES",
    "TERMINAL_STATUSES",
    "CorruptGoal",
    "Goal",
    "GoalResult",
    "GoalStatus",
    "Goals",
    "check_epoch",
    "check_name",
    "ended_by_words",
    "goal_from_stored",
    "goal_id_of_run",
    "pins_for",
    "run_id_for",
]


SETTLE_OUTCOMES = ("completed", "failed", "cancelled")


@dataclass(frozen=True)
class Start:
    """One claim of ``Goals.start_many``: what ``Goals.start`` takes."""

    goal_id: str
    node_id: str
    worker: str
    token: str
    round: int | None = None


@dataclass(frozen=True)
class GoalResult:
    goal: Goal
    run: Run | None
    replayed: bool
    attempt: Attempt | None = None


def _command_id(value: str) -> str:
    return check_identifier(value, "command_id")


# --- decisions: pure functions of what the journal loaded ------------------------------------


def _loaded_goal(loaded: Mapping[str, Stored | None], goal_id: str) -> tuple[Goal, dict[str, Any]]:
    """The Goal a command acts on (re-validated) and its stored state, which the new state is
    built from (so the fields it keeps are not checked twice)."""
    stored = loaded[goal_aggregate_id(goal_id)]
    if stored is None:
        raise GoalNotFoundError(f"no goal {goal_id}", goal_id=goal_id)
    return goal_from_stored(stored), stored.state


def _loaded_run(loaded: Mapping[str, Stored | None], run_id: str) -> Run:
    stored = loaded[run_aggregate_id(run_id)]
    if stored is None:
        raise RunNotFoundError(f"no run {run_id}", run_id=run_id)
    return run_from_stored(stored)


def _goal_change(
    goal: Goal, before: dict[str, Any], event: str, data: Mapping[str, Any], **fields: Any
) -> Change:
    """The Goal's new state, checked before it is written (and so never re-checked after).

    ``before``: the stored state ``goal`` was validated from; the fields the new state keeps
    from it are the very objects that passed, so only the changed ones are checked again.
    """
    state = {**before, **fields}
    try:
        check_goal_state(state, checked=before)
    except InvalidInputError as exc:
        raise DecisionError(
            f"decision broke a goal rule: {exc.message}", goal_id=goal.goal_id
        ) from exc
    return Change(
        goal_aggregate_id(goal.goal_id),
        state,
        [(event, {"goal_id": goal.goal_id, **data})],
        folded=True,
        text=goal_text(state),
    )


def _same_round(goal: Goal, run_id: str) -> None:
    if goal.run_id != run_id:
        raise GoalStateError(
            f"goal {goal.goal_id} moved on to round {goal.round} (run {goal.run_id}), not {run_id}",
            goal_id=goal.goal_id,
            run_id=run_id,
        )


def _refuse_terminal(goal: Goal) -> None:
    if goal.terminal:
        raise GoalTerminalError(f"goal {goal.goal_id} is {goal.status}", goal_id=goal.goal_id)


def _decide_create(state: dict[str, Any], submit: dict[str, Any], loaded: Any) -> list[Change]:
    goal_id = state["goal_id"]
    if loaded[goal_aggregate_id(goal_id)] is not None:
        raise GoalExistsError(f"goal {goal_id} already exists", goal_id=goal_id)
    run = decide_run("submit", loaded[run_aggregate_id(submit["run_id"])], submit)
    data = {k: v for k, v in state.items() if k not in ("goal_id", "status", "cancel_reason")}
    return [
        Change(
            goal_aggregate_id(goal_id),
            state,
            [("goal.created", {"goal_id": goal_id, **data})],
            folded=True,
            text=goal_text(state),  # every field checked by create, exact types
        ),
        run,
    ]


def _decide_start(
    goal_id: str, node_id: str, run_id: str, claim: dict[str, Any], loaded: Any
) -> list[Change]:
    goal, before = _loaded_goal(loaded, goal_id)
    _refuse_terminal(goal)
    if goal.node_id != node_id:
        raise NotThisNodeError(
            f"goal {goal_id} belongs to node {goal.node_id}, not {node_id}", goal_id=goal_id
        )
    _same_round(goal, run_id)
    if goal.status != "queued":
        raise GoalStateError(f"goal {goal_id} is {goal.status}, not queued", goal_id=goal_id)
    run = decide_run("claim", loaded[run_aggregate_id(run_id)], claim)
    epoch = len(run.state["attempts"])
    data = {"round": goal.round, "run_id": run_id, "epoch": epoch, "worker": claim["worker"]}
    return [_goal_change(goal, before, "goal.started", data, status="running"), run]


def _after_attempt(
    goal: Goal, before: dict[str, Any], run: Change, why: str, *, interrupted: bool
) -> Change | None:
    """The Goal's ending once its Run's attempt ended (None: the Goal is already right)."""
    status = run.state["status"]
    base = {"round": goal.round, "run_id": goal.run_id, "why": why}
    if status == "cancelled":
        if goal.status == "cancelled":
            return None
        reason = run.state["cancel_reason"]
        return _goal_change(
            goal,
            before,
            "goal.cancelled",
            {**base, "reason": reason},
            status="cancelled",
            cancel_reason=reason,
        )
    if goal.status != "running":
        raise GoalStateError(
            f"goal {goal.goal_id} is {goal.status} while its run has a running attempt",
            goal_id=goal.goal_id,
        )
    if status == "completed":
        return _goal_change(goal, before, "goal.completed", base, status="completed")
    if status == "exhausted":
        return _goal_change(goal, before, "goal.exhausted", base, status="exhausted")
    if interrupted and goal.redelivery == "operator":
        return _goal_change(goal, before, "goal.held", base, status="held")
    return _goal_change(goal, before, "goal.queued", base, status="queued")


def _decide_settle(
    goal_id: str, run_id: str, epoch: int, outcome: str, inputs: dict[str, Any], loaded: Any
) -> list[Change]:
    goal, before = _loaded_goal(loaded, goal_id)
    _same_round(goal, run_id)
    stored_run = loaded[run_aggregate_id(run_id)]
    if outcome == "cancelled":
        op, inputs = "cancel", _worker_cancel(_loaded_run(loaded, run_id), epoch, inputs)
    else:
        op = "complete" if outcome == "completed" else "fail"
    run = decide_run(op, stored_run, inputs)
    why = f"attempt {epoch} {outcome} (reported by its worker)"
    if outcome == "failed":
        why = f"attempt {epoch} failed: {inputs['reason']}"
    goal_change = _after_attempt(goal, before, run, why, interrupted=False)
    return [c for c in (goal_change, run) if c is not None]


def _worker_cancel(run: Run, epoch: int, inputs: dict[str, Any]) -> dict[str, Any]:
    """A worker's own cancel: the pending reason (or its own), its cleanup confirmation."""
    running = [a for a in run.attempts if a.state == "running"]
    worker = running[-1].worker if running else "unknown"
    pending = run.cancel_requested["reason"] if run.cancel_requested else None
    reason = pending or inputs["reason"]
    if reason is None:
        raise InvalidInputError("a cancelled report needs a reason", run_id=run.run_id)
    cleanup = {"epoch": epoch, "confirmed_by": worker, "method": WORKER_CLEANUP_METHOD}
    return validate_run_command(
        "cancel", {"run_id": run.run_id, "reason": reason, "cleanup": cleanup}
    )


def _decide_interrupt(
    goal_id: str, run_id: str, cleanup: dict[str, Any], loaded: Any
) -> list[Change]:
    goal, before = _loaded_goal(loaded, goal_id)
    _same_round(goal, run_id)
    stored_run = loaded[run_aggregate_id(run_id)]
    current = _loaded_run(loaded, run_id)
    how = ended_by_words(cleanup["method"], cleanup["confirmed_by"])
    if current.cancel_requested:
        reason = current.cancel_requested["reason"]
        inputs = validate_run_command(
            "cancel", {"run_id": run_id, "reason": reason, "cleanup": cleanup}
        )
        run = decide_run("cancel", stored_run, inputs)
    else:
        run = decide_run("interrupt", stored_run, {"run_id": run_id, "cleanup": cleanup})
    why = f"attempt {cleanup['epoch']} interrupted ({how})"
    goal_change = _after_attempt(goal, before, run, why, interrupted=True)
    return [c for c in (goal_change, run) if c is not None]


def _decide_cancel(
    goal_id: str, run_id: str, reason: str, by: str | None, loaded: Any
) -> list[Change]:
    goal, before = _loaded_goal(loaded, goal_id)
    _refuse_terminal(goal)
    if goal.run_id != run_id:
        raise VersionConflictError(
            f"goal {goal_id} moved on to round {goal.round} while cancelling; try again",
            goal_id=goal_id,
        )
    current = _loaded_run(loaded, run_id)
    op = "request_cancel" if current.status == "running" else "cancel"
    run = decide_run(op, loaded[run_aggregate_id(run_id)], {"run_id": run_id, "reason": reason})
    data = {
        "round": goal.round,
        "run_id": run_id,
        "reason": reason,
        "run_status": run.state["status"],
        "by": by,
    }
    return [
        _goal_change(
            goal, before, "goal.cancelled", data, status="cancelled", cancel_reason=reason
        ),
        run,
    ]


def _decide_release(goal_id: str, run_id: str, by: str | None, loaded: Any) -> list[Change]:
    goal, before = _loaded_goal(loaded, goal_id)
    _refuse_terminal(goal)
    if goal.status != "held":
        raise GoalStateError(f"goal {goal_id} is {goal.status}, not held", goal_id=goal_id)
    _same_round(goal, run_id)
    if _loaded_run(loaded, run_id).status != "queued":
        raise GoalStateError(f"run {run_id} is not queued", goal_id=goal_id, run_id=run_id)
    data = {"round": goal.round, "run_id": run_id, "by": by}
    return [_goal_change(goal, before, "goal.released", data, status="queued")]


REASSIGNABLE = ("held", "queued")  # the statuses a Goal can move to another node in


def _decide_reassign(
    goal_id: str, node_id: str, old_run: str, loaded: Any, by: str | None = None
) -> list[Change]:
    goal, before = _loaded_goal(loaded, goal_id)
    _refuse_terminal(goal)
    if goal.status not in REASSIGNABLE:
        raise GoalStateError(
            f"goal {goal_id} is {goal.status}: only a queued or held goal can be reassigned",
            goal_id=goal_id,
        )
    if goal.node_id == node_id:
        raise GoalStateError(f"goal {goal_id} is already on node {node_id}", goal_id=goal_id)
    _same_round(goal, old_run)
    if goal.round >= MAX_ROUND:
        raise GoalStateError(f"goal {goal_id} has reached round {MAX_ROUND}", goal_id=goal_id)
    round_ = goal.round + 1
    new_run = run_id_for(goal_id, round_)
    reason = f"superseded: goal reassigned to node {node_id} (round {round_})"
    old = decide_run(
        "cancel", loaded[run_aggregate_id(old_run)], {"run_id": old_run, "reason": reason}
    )
    submit = validate_run_command(
        "submit",
        {
            "run_id": new_run,
            "pins": pins_for(goal.state()["recipe"], node_id),
            "budget": dict(goal.budget),
        },
    )
    new = decide_run("submit", loaded[run_aggregate_id(new_run)], submit)
    data = {
        "from_node": goal.node_id,
        "to_node": node_id,
        "round": round_,
        "run_id": new_run,
        "previous_run_id": old_run,
    } | ({"by": by} if by is not None else {})
    change = _goal_change(
        goal, before, "goal.reassigned", data, node_id=node_id, round=round_, run_id=new_run
    )
    return [change, old, new]


# --- the API ---------------------------------------------------------------------------------


class Goals:
    """Goal commands and reads over one journal. Every command is one journal transaction."""

    def __init__(self, journal: Journal) -> None:
        if not isinstance(journal, Journal):
            raise InvalidInputError("Goals needs a Journal")
        self._journal = journal

    @property
    def journal(self) -> Journal:
        return self._journal

    # --- commands ------------------------------------------------------------------------------

    def create(
        self,
        *,
        goal_id: str,
        title: str,
        node_id: str,
        argv: Sequence[str],
        cwd: str | None = None,
        max_attempts: int = 3,
        attempt_timeout_ms: int = 3_600_000,
        redelivery: str = "safe",
    ) -> GoalResult:
        """A queued Goal at round 1 and its Run submitted. Repeating it exactly replays."""
        goal_id = check_name(goal_id, "goal_id")
        if goal_id_of_run(goal_id) is not None:
            raise InvalidInputError(
                f"goal_id {goal_id} reads as a run id ({goal_id_of_run(goal_id)}.r<round>):"
                " choose an id that does not end in .r<digits>"
            )
        recipe = {"argv": check_argv(argv), "cwd": check_cwd(cwd)}
        budget = {"max_attempts": max_attempts, "attempt_timeout_ms": attempt_timeout_ms}
        state: dict[str, Any] = {
            "goal_id": goal_id,
            "title": check_title(title),
            "node_id": check_name(node_id, "node_id"),
            "status": "queued",
            "round": 1,
            "run_id": run_id_for(goal_id, 1),
            "recipe": recipe,
            "budget": check_budget(budget),
            "redelivery": check_redelivery(redelivery),
            "cancel_reason": None,
        }
        # The Run's inputs are made of fields checked just above, so they are not validated a
        # second time; the Run's own rules still check its new state before it is written.
        submit = {
            "run_id": state["run_id"],
            "pins": pins_for(recipe, node_id),
            "budget": state["budget"],
        }
        try:
            outcome = self._execute(
                f"goal:{goal_id}:create",
                {"op": "goal.create", "goal": state},
                goal_id,
                [state["run_id"]],
                lambda loaded: _decide_create(state, submit, loaded),
            )
        except CommandConflictError as exc:
            # The create id is derived from the goal id: it was used, so the goal exists.
            raise GoalExistsError(
                f"goal {goal_id} already exists with other settings", goal_id=goal_id
            ) from exc
        return self._result(goal_id, state["run_id"], outcome)

    def start(
        self, *, goal_id: str, node_id: str, worker: str, token: str, round: int | None = None
    ) -> GoalResult:
        """queued → running and the Run claimed, in one transaction (``attempt`` is set).

        Refused when the Goal is not queued, names another node, or its round moved on
        (``round``: the round the caller was launched for). The first start to commit wins.
        """
        command, run_id = self._start_command(Start(goal_id, node_id, worker, token, round))
        outcome = self._journal.execute(
            command_id=command.command_id,
            payload=command.payload,
            expected=command.expected,
            decide=command.decide,
        )
        return self._started(goal_id, run_id, outcome)

    def start_many(self, starts: Sequence[Start]) -> builtins.list[GoalResult | RefineError]:
        """Several starts in one transaction, in order (a node claiming for the workers it
        launched together: ADR-003's batching of transitions). Each is the very command its
        ``start`` would be (the same command id, so a repeat of either replays), with its own
        receipt, events and refusal: a refused start, or an invalid one, writes nothing and is
        returned in its place. A StorageError fails them all: nothing is written."""
        prepared: builtins.list[tuple[Start, str] | RefineError] = []
        commands: builtins.list[Command] = []
        for start in starts:
            try:
                command, run_id = self._start_command(start)
            except RefineError as exc:
                prepared.append(exc)
                continue
            prepared.append((start, run_id))
            commands.append(command)
        outcomes = iter(self._journal.execute_batch(commands) if commands else ())
        results: builtins.list[GoalResult | RefineError] = []
        for item in prepared:
            if isinstance(item, RefineError):  # invalid: never sent
                results.append(item)
            elif isinstance(outcome := next(outcomes), RefineError):  # refused in the batch
                results.append(outcome)
            else:
                start, run_id = item
                results.append(self._started(start.goal_id, run_id, outcome))
        return results

    def _start_command(self, start: Start) -> tuple[Command, str]:
        """``start``'s command (validated), and the id of the Run it claims."""
        goal_id, node_id = start.goal_id, start.node_id
        check_name(goal_id, "goal_id")
        check_name(node_id, "node_id")
        check_identifier(start.token, "token")
        if start.round is not None:
            check_integer(start.round, "round", 1, MAX_ROUND)
        # A worker names its round: no need to read the Goal first (the decision reads it).
        run_id = (
            run_id_for(goal_id, start.round)
            if start.round is not None
            else self._run_id_of(goal_id)
        )
        worker = start.worker
        claim = validate_run_command("claim", {"run_id": run_id, "worker": worker})
        payload = {"op": "goal.start", "goal_id": goal_id, "node_id": node_id, "worker": worker}
        command = Command(
            _command_id(f"run:{run_id}:claim:{start.token}"),
            payload,
            {goal_aggregate_id(goal_id): None, run_aggregate_id(run_id): None},
            lambda loaded: _decide_start(goal_id, node_id, run_id, claim, loaded),
        )
        return command, run_id

    def _started(self, goal_id: str, run_id: str, outcome: Outcome) -> GoalResult:
        result = self._result(goal_id, run_id, outcome)
        attempt = result.run.attempts[-1] if result.run and result.run.attempts else None
        return GoalResult(result.goal, result.run, result.replayed, attempt)

    def settle(
        self,
        *,
        goal_id: str,
        run_id: str,
        epoch: int,
        outcome: str,
        reason: str | None = None,
        evidence: Sequence[str] = (),
    ) -> GoalResult:
        """The attempt owner's report: completed, failed (retry while budget lasts), cancelled."""
        check_name(goal_id, "goal_id")
        check_run_of(goal_id, run_id)
        check_epoch(epoch)
        if outcome not in SETTLE_OUTCOMES or type(outcome) is not str:
            raise InvalidInputError(
                "outcome must be completed, failed or cancelled", goal_id=goal_id
            )
        if outcome == "completed":
            if reason is not None:
                raise InvalidInputError("a completed report has no reason", goal_id=goal_id)
            inputs = {"run_id": run_id, "epoch": epoch, "evidence": evidence}
            inputs = validate_run_command("complete", inputs)
        elif outcome == "failed":
            inputs = {
                "run_id": run_id,
                "epoch": epoch,
                "reason": reason,
                "evidence": evidence,
            }
            inputs = validate_run_command("fail", inputs)
        else:
            if reason is not None:
                check_reason(reason)
            if evidence not in ((), []):
                raise InvalidInputError("a cancelled report carries no evidence", goal_id=goal_id)
            inputs = {"reason": reason, "evidence": []}
        payload = {
            "op": "goal.settle",
            "goal_id": goal_id,
            "run_id": run_id,
            "epoch": epoch,
            "outcome": outcome,
            "reason": reason,
            "evidence": inputs["evidence"],
        }
        result = self._execute(
            _command_id(f"run:{run_id}:settle:{epoch}"),
            payload,
            goal_id,
            [run_id],
            lambda loaded: _decide_settle(goal_id, run_id, epoch, outcome, inputs, loaded),
        )
        return self._result(goal_id, run_id, result)

    def interrupt(
        self,
        *,
        goal_id: str,
        run_id: str,
        epoch: int,
        goal_version: int,
        run_version: int,
        confirmed_by: str,
        method: str,
        command_id: str,
    ) -> GoalResult:
        """End a running attempt by a cleanup confirmation, at the Goal and Run versions read.

        A pending cancellation ends as ``cancel`` with the cleanup; otherwise the Goal is
        requeued (``safe``), held (``operator``) or exhausted. VersionConflictError when the
        Goal or the Run changed since they were read.
        """
        check_name(goal_id, "goal_id")
        check_run_of(goal_id, run_id)
        check_integer(goal_version, "goal_version", 1, 2**53 - 1)
        check_integer(run_version, "run_version", 1, 2**53 - 1)
        cleanup = {"epoch": epoch, "confirmed_by": confirmed_by, "method": method}
        cleanup = validate_run_command("interrupt", {"run_id": run_id, "cleanup": cleanup})[
            "cleanup"
        ]
        payload = {"op": "goal.interrupt", "goal_id": goal_id, "run_id": run_id, "cleanup": cleanup}
        outcome = self._execute(
            _command_id(command_id),
            payload,
            goal_id,
            [run_id],
            lambda loaded: _decide_interrupt(goal_id, run_id, cleanup, loaded),
            versions=(goal_version, run_version),
        )
        return self._result(goal_id, run_id, outcome)

    def cancel(
        self,
        *,
        goal_id: str,
        reason: str,
        command_id: str,
        by: str | None = None,
        expected_version: int | None = None,
        run_id: str | None = None,
    ) -> GoalResult:
        """Terminal intent: Goal cancelled; its Run cancelled (queued) or cancel_requested.

        ``expected_version``: the Goal's version as the caller read it (VersionConflictError
        when it changed since); ``run_id``: the Goal's current Run as read then (saves a read;
        a Run the Goal has moved on from is refused by the decision).
        """
        check_name(goal_id, "goal_id")
        check_reason(reason)
        _command_id(command_id)
        check_actor(by)
        run_id = self._checked_run_id(goal_id, expected_version, run_id)
        outcome = self._execute(
            command_id,
            {"op": "goal.cancel", "goal_id": goal_id, "reason": reason, "by": by},
            goal_id,
            [run_id],
            lambda loaded: _decide_cancel(goal_id, run_id, reason, by, loaded),
            versions=(expected_version, None),
        )
        return self._result(goal_id, run_id, outcome)

    def release(
        self,
        *,
        goal_id: str,
        command_id: str,
        by: str | None = None,
        expected_version: int | None = None,
        run_id: str | None = None,
    ) -> GoalResult:
        """held → queued: the operator has checked the external state.

        ``expected_version`` and ``run_id`` as for ``cancel``."""
        check_name(goal_id, "goal_id")
        _command_id(command_id)
        check_actor(by)
        run_id = self._checked_run_id(goal_id, expected_version, run_id)
        outcome = self._execute(
            command_id,
            {"op": "goal.release", "goal_id": goal_id, "by": by},
            goal_id,
            [run_id],
            lambda loaded: _decide_release(goal_id, run_id, by, loaded),
            versions=(expected_version, None),
        )
        return self._result(goal_id, run_id, outcome)

    def reassign(
        self, *, goal_id: str, node_id: str, expected_version: int, by: str | None = None
    ) -> GoalResult:
        """Move a queued or held Goal to another node: a new round with a new Run. ``by``: the
        operator who moved it, recorded with the event (as Cancel and Release record theirs)."""
        check_name(goal_id, "goal_id")
        check_name(node_id, "node_id")
        check_integer(expected_version, "expected_version", 1, 2**53 - 1)
        check_actor(by)
        goal = self._require(goal_id)
        old_run, new_run = goal.run_id, run_id_for(goal_id, goal.round + 1)
        if goal.version != expected_version:
            # A repeat of a reassign that committed at this version names the Runs it moved
            # between (the round has moved on since): the journal replays it, or refuses.
            moved = self._reassigned_at(goal_id, expected_version + 1)
            if moved is None:
                raise VersionConflictError(
                    f"goal {goal_id} is at version {goal.version}, not {expected_version}",
                    goal_id=goal_id,
                )
            old_run, new_run = moved
        outcome = self._execute(
            _command_id(f"goal:{goal_id}:reassign:{expected_version}:{node_id}"),
            {"op": "goal.reassign", "goal_id": goal_id, "node_id": node_id}
            | ({"by": by} if by is not None else {}),  # a reassign of before `by` replays
            goal_id,
            [old_run, new_run],
            lambda loaded: _decide_reassign(goal_id, node_id, old_run, loaded, by),
            versions=(expected_version, None, None),
        )
        return self._result(goal_id, new_run, outcome)

    # --- reads ---------------------------------------------------------------------------------

    def read(self, goal_id: str) -> Goal | None:
        check_name(goal_id, "goal_id")
        stored = self._journal.load(goal_aggregate_id(goal_id))
        return goal_from_stored(stored) if stored is not None else None

    def list_readable(
        self,
        *,
        status: str | Sequence[str] | None = None,
        node_id: str | None = None,
        newest_first: bool = False,
        limit: int | None = None,
        after_id: str | None = None,
    ) -> list[Goal | CorruptGoal]:
        """Like ``list``, with a corrupt stored Goal in its place (one bad record, one row).
        ``after_id``: only the Goals after that id, in id order (the next page of a listing)."""
        statuses = [status] if isinstance(status, str) else status
        if statuses is not None and (
            type(statuses) not in (list, tuple) or any(s not in GOAL_STATUSES for s in statuses)
        ):
            raise InvalidInputError(f"status must be one of {', '.join(GOAL_STATUSES)}")
        if node_id is not None:
            check_name(node_id, "node_id")
        if limit is not None:
            check_integer(limit, "limit", 1, 2**53 - 1)
        rows = self._journal.aggregates(
            "goal",
            status=list(statuses) if statuses is not None else None,
            node_id=node_id,
            newest_first=newest_first,
            limit=limit,
            after_id=None if after_id is None else goal_aggregate_id(after_id),
        )
        entries: list[Goal | CorruptGoal] = []
        for row in rows:
            try:
                entries.append(goal_from_stored(row))
            except CorruptGoalError as exc:
                entries.append(CorruptGoal(row.aggregate_id.partition(":")[2], row.version, exc))
        return entries

    def list(
        self,
        *,
        status: str | Sequence[str] | None = None,
        node_id: str | None = None,
        newest_first: bool = False,
        limit: int | None = None,
    ) -> builtins.list[Goal]:
        entries = self.list_readable(
            status=status, node_id=node_id, newest_first=newest_first, limit=limit
        )
        for entry in entries:
            if isinstance(entry, CorruptGoal):
                raise entry.error
        return [entry for entry in entries if isinstance(entry, Goal)]

    def runs(self, goal_id: str) -> builtins.list[Run]:
        """The Runs of every round of a Goal, oldest first ([] for an unknown Goal)."""
        goal = self.read(goal_id)
        if goal is None:
            return []
        ids = [run_aggregate_id(run_id_for(goal_id, r)) for r in range(1, goal.round + 1)]
        found = self._journal.load_many(ids)
        return [run_from_stored(found[i]) for i in ids if i in found]

    def current_run(self, goal: Goal) -> Run | None:
        stored = self._journal.load(run_aggregate_id(goal.run_id))
        return run_from_stored(stored) if stored is not None else None

    # --- plumbing ------------------------------------------------------------------------------

    def _reassigned_at(self, goal_id: str, version: int) -> tuple[str, str] | None:
        """The Runs (from, to) of the reassign that made this Goal version (None: no reassign)."""
        after = 0
        while page := self._journal.history(goal_aggregate_id(goal_id), after, 100):
            for event in page:
                if event.version != version:
                    continue
                runs = (event.data.get("previous_run_id"), event.data.get("run_id"))
                if event.type != "goal.reassigned" or not all(
                    isinstance(r, str) and goal_id_of_run(r) == goal_id for r in runs
                ):
                    return None
                return str(runs[0]), str(runs[1])
            after = page[-1].sequence
        return None

    def _run_id_of(self, goal_id: str) -> str:
        """The Run a command on this Goal acts on. A missing Goal is refused by the command's
        decision (GoalNotFoundError), so a read-only journal, a replay and a reused command id
        are answered first, in the seed's refusal order."""
        try:
            goal = self.read(goal_id)
        except CorruptGoalError:  # refused by the decision too, in its turn
            goal = None
        return goal.run_id if goal is not None else run_id_for(goal_id, 1)

    def _checked_run_id(
        self, goal_id: str, expected_version: int | None, run_id: str | None
    ) -> str:
        """The Run a command acts on: the caller's (checked to be one of this Goal's), else
        the one the Goal names now."""
        if expected_version is not None:
            check_integer(expected_version, "expected_version", 1, 2**53 - 1)
        if run_id is None:
            return self._run_id_of(goal_id)
        check_run_of(goal_id, run_id)
        return run_id

    def _require(self, goal_id: str) -> Goal:
        goal = self.read(goal_id)
        if goal is None:
            raise GoalNotFoundError(f"no goal {goal_id}", goal_id=goal_id)
        return goal

    def _execute(
        self,
        command_id: str,
        payload: Mapping[str, Any],
        goal_id: str,
        run_ids: Sequence[str],
        decide: Callable[[Mapping[str, Stored | None]], builtins.list[Change]],
        versions: Sequence[int | None] | None = None,
    ) -> Outcome:
        ids = [goal_aggregate_id(goal_id), *map(run_aggregate_id, run_ids)]
        expected = dict(zip(ids, versions or [None] * len(ids), strict=True))
        return self._journal.execute(
            command_id=command_id, payload=payload, expected=expected, decide=decide
        )

    def _result(self, goal_id: str, run_id: str, outcome: Outcome) -> GoalResult:
        """The Goal and Run as the command left them (unchanged ones as stored now).

        A state this command wrote passed its checks in the decision, before the write: it is
        viewed, not checked again. A replayed receipt or a state read now is re-validated.
        """
        goal_agg, run_agg = goal_aggregate_id(goal_id), run_aggregate_id(run_id)
        fresh = {} if outcome.replayed else outcome.states
        goal_written, run_written = fresh.get(goal_agg), fresh.get(run_agg)
        if goal_written is not None:
            goal = goal_view(goal_written.state, goal_written.version)
        else:
            stored = outcome.states.get(goal_agg) or self._journal.load(goal_agg)
            assert stored is not None  # a committed command always leaves its Goal
            goal = goal_from_stored(stored)
        if run_written is not None:
            run: Run | None = run_view(run_written.state, run_written.version)
        else:
            stored_run = outcome.states.get(run_agg) or self._journal.load(run_agg)
            run = run_from_stored(stored_run) if stored_run is not None else None
        return GoalResult(goal, run, outcome.replayed)
