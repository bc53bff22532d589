"""Durable cancellation (seed invariant 7): a pending cancellation is never cleared, replaced or
bypassed; it ends only as cancelled with its own reason, never as queued or exhausted."""

from __future__ import annotations

import pytest

from store.errors import (
    AttemptActiveError,
    CancelPendingError,
    RunTerminalError,
    StaleAttemptError,
    VersionConflictError,
)
from store.journal.sqlite import Journal
from store.model.execution import Execution, Run
from tests.helpers.run_support import assert_consistent, claim, footprint, submit

REASON = "operator: wrong branch"


def cleanup(epoch: int, by: str = "dana@n1") -> dict[str, object]:
    return {"epoch": epoch, "confirmed_by": by, "method": "sigterm"}


@pytest.fixture
def ex(journal: Journal) -> Execution:
    return Execution(journal)


def pending(ex: Execution, max_attempts: int = 3, epochs: int = 1) -> Run:
    """A Run whose attempt ``epochs`` is running with a cancellation pending."""
    submit(ex, max_attempts=max_attempts)
    for epoch in range(1, epochs):
        version, _ = claim(ex, worker=f"w{epoch}")
        ex.fail(
            command_id=f"f{epoch}",
            run_id="r1",
            expected_version=version,
            epoch=epoch,
            reason="flaky",
            evidence=[],
        )
    version, _ = claim(ex, worker=f"w{epochs}")
    return ex.request_cancel(
        command_id="rc", run_id="r1", expected_version=version, reason=REASON
    ).run


def current(ex: Execution) -> Run:
    run = ex.read("r1")
    assert run is not None
    return run


def test_a_request_changes_no_attempt_and_is_recorded(ex: Execution, journal: Journal) -> None:
    submit(ex)
    version, _ = claim(ex)
    before = current(ex)
    run = ex.request_cancel(
        command_id="rc", run_id="r1", expected_version=version, reason=REASON
    ).run
    assert run.cancel_requested == {"reason": REASON} and run.status == "running"
    assert run.attempts == before.attempts and run.cancel_reason is None
    assert ex.history("r1")[-1].data == {"run_id": "r1", "epoch": 1, "reason": REASON}
    assert ex.history("r1")[-1].type == "run.cancel-requested"
    assert_consistent(journal)


def test_a_request_on_a_queued_run_cancels_it_at_once(ex: Execution) -> None:
    submit(ex)
    run = ex.request_cancel(command_id="rc", run_id="r1", expected_version=1, reason=REASON).run
    assert (run.status, run.cancel_reason, run.cancel_requested) == ("cancelled", REASON, None)
    with pytest.raises(RunTerminalError):
        ex.claim(command_id="c", run_id="r1", expected_version=2, worker="w")


def test_a_pending_request_is_never_replaced(ex: Execution, journal: Journal) -> None:
    run = pending(ex)
    before = footprint(journal)
    with pytest.raises(CancelPendingError):
        ex.request_cancel(
            command_id="rc2", run_id="r1", expected_version=run.version, reason="another reason"
        )
    with pytest.raises(CancelPendingError):  # same reason, new command: still a second request
        ex.request_cancel(
            command_id="rc3", run_id="r1", expected_version=run.version, reason=REASON
        )
    assert footprint(journal) == before


def test_a_completion_cannot_bypass_it(ex: Execution, journal: Journal) -> None:
    run = pending(ex)
    before = footprint(journal)
    for epoch in (1, 2):  # the owner's own epoch, and a stale one: pending is seen first
        with pytest.raises(CancelPendingError):
            ex.complete(
                command_id=f"done{epoch}",
                run_id="r1",
                expected_version=run.version,
                epoch=epoch,
                evidence=["out"],
            )
    with pytest.raises(CancelPendingError):
        ex.claim(command_id="c", run_id="r1", expected_version=run.version, worker="w2")
    assert footprint(journal) == before
    assert current(ex).cancel_requested == {"reason": REASON}


@pytest.mark.parametrize("epochs", [1, 3])  # with attempts left, and on the last budgeted one
def test_a_failure_ends_as_cancelled_not_retried(epochs: int, ex: Execution) -> None:
    run = pending(ex, max_attempts=3, epochs=epochs)
    ended = ex.fail(
        command_id="fail",
        run_id="r1",
        expected_version=run.version,
        epoch=epochs,
        reason="killed by cancel",
        evidence=["log"],
    ).run
    assert ended.status == "cancelled" and ended.cancel_reason == REASON
    assert ended.cancel_requested is None
    assert ended.attempts[-1].state == "failed" and ended.attempts[-1].reason == "killed by cancel"
    assert [e.type for e in ex.history("r1")][-2:] == ["attempt.failed", "run.cancelled"]
    with pytest.raises(RunTerminalError):  # no retry follows
        ex.claim(command_id="retry", run_id="r1", expected_version=ended.version, worker="w9")


@pytest.mark.parametrize("epochs", [1, 2])
def test_an_interrupt_ends_as_cancelled_not_requeued(epochs: int, ex: Execution) -> None:
    run = pending(ex, max_attempts=2, epochs=epochs)
    ended = ex.interrupt(
        command_id="stop", run_id="r1", expected_version=run.version, cleanup=cleanup(epochs)
    ).run
    assert (ended.status, ended.cancel_reason) == ("cancelled", REASON)
    assert ended.attempts[-1].state == "interrupted"
    assert ended.attempts[-1].worker == f"w{epochs}"


def test_cancel_with_cleanup_keeps_the_pending_reason(ex: Execution, journal: Journal) -> None:
    run = pending(ex)
    before = footprint(journal)
    with pytest.raises(AttemptActiveError):  # a running attempt needs its cleanup confirmed
        ex.cancel(command_id="c0", run_id="r1", expected_version=run.version, reason="other")
    with pytest.raises(StaleAttemptError):
        ex.cancel(
            command_id="c1",
            run_id="r1",
            expected_version=run.version,
            reason="other",
            cleanup=cleanup(2),
        )
    assert footprint(journal) == before
    ended = ex.cancel(
        command_id="c2",
        run_id="r1",
        expected_version=run.version,
        reason="a different reason",
        cleanup=cleanup(1, by="w1"),
    ).run
    assert (ended.status, ended.cancel_reason) == ("cancelled", REASON)  # its own reason
    assert ended.attempts[0].cleanup == cleanup(1, by="w1")
    assert ex.history("r1")[-1].data == {"run_id": "r1", "reason": REASON}
    assert_consistent(journal)


def test_cancel_without_a_request(ex: Execution) -> None:
    submit(ex)
    with pytest.raises(StaleAttemptError):  # nothing runs: no cleanup to confirm
        ex.cancel(command_id="c0", run_id="r1", expected_version=1, reason="x", cleanup=cleanup(1))
    version, _ = claim(ex)
    ended = ex.cancel(
        command_id="c1",
        run_id="r1",
        expected_version=version,
        reason="done here",
        cleanup=cleanup(1),
    ).run
    assert (ended.status, ended.cancel_reason) == ("cancelled", "done here")


def test_a_stale_caller_sees_the_request_after_rereading(ex: Execution) -> None:
    submit(ex)
    version, _ = claim(ex)
    ex.request_cancel(command_id="rc", run_id="r1", expected_version=version, reason=REASON)
    with pytest.raises(VersionConflictError):  # whatever version the owner read
        ex.fail(
            command_id="f", run_id="r1", expected_version=version, epoch=1, reason="x", evidence=[]
        )
    fresh = current(ex)
    assert fresh.cancel_requested == {"reason": REASON}
    ended = ex.fail(
        command_id="f",
        run_id="r1",
        expected_version=fresh.version,
        epoch=1,
        reason="x",
        evidence=[],
    ).run
    assert ended.status == "cancelled"


def test_a_replay_does_not_clear_it(ex: Execution) -> None:
    submit(ex)
    first = ex.claim(command_id="claim", run_id="r1", expected_version=1, worker="w1")
    ex.request_cancel(command_id="rc", run_id="r1", expected_version=2, reason=REASON)
    again = ex.claim(command_id="claim", run_id="r1", expected_version=1, worker="w1")
    assert again.replayed and again.run == first.run  # the old state, as that command left it
    assert again.run.cancel_requested is None
    assert current(ex).cancel_requested == {"reason": REASON}  # current state keeps it


def test_it_survives_reopening_the_journal(journal_location: str) -> None:
    path = journal_location
    with Journal.open(path) as journal:
        pending(Execution(journal))
    with Journal.open(path) as journal:
        ex = Execution(journal)
        run = current(ex)
        assert run.cancel_requested == {"reason": REASON}
        with pytest.raises(CancelPendingError):
            ex.complete(
                command_id="d", run_id="r1", expected_version=run.version, epoch=1, evidence=[]
            )
