"""Waiting for a condition in tests: poll until it holds, fail after a generous timeout.

The timeouts are generous for a busy CI box and never measured: a wait ends as soon as the
condition holds, so no test asserts on wall-clock time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def wait_until(
    condition: Callable[[], T],
    timeout: float = 20.0,
    what: str = "condition",
    *,
    step: float = 0.03,
) -> T:
    """Poll ``condition`` until it returns something truthy (returned); AssertionError after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(step)


async def until(pilot: Any, condition: Callable[[], object], timeout: float = 15.0) -> None:
    """Let a Pilot-driven app run until ``condition`` holds (it must keep running meanwhile)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        assert pilot.app.is_running, "the dashboard stopped"
        await pilot.pause(0.03)


def node_recorded_exit(read: Callable[[str], tuple[Any, Any]], goal_id: str) -> Any:
    """The Run of ``goal_id`` once its node has recorded the end of its first attempt, checked
    to be the node's own record: interrupted, its process found gone (``process-exited``).
    ``read``: goal id → (goal or status, Run), as the test's journal reads it."""
    _, run = wait_until(
        lambda: (got := read(goal_id))[1].attempts[0].state != "running" and got,
        timeout=60, what="the node recording the end",
    )  # fmt: skip
    (first, *_) = run.attempts
    assert first.state == "interrupted" and first.cleanup is not None, first
    assert first.cleanup["method"] == "process-exited", first.cleanup
    return run
