"""Goal and Run statuses are defined once (store.statuses); the names every layer imported
before are the same values, and what is stored or printed is the same plain text."""

from __future__ import annotations

import json

from store import statuses
from store.canonical import canonical_json
from store.journal import sqlite
from store.model import goal, goals, run
from store.model.execution import RUN_STATUSES, RunStatus
from store.statuses import GoalStatus


def test_the_values_are_the_stored_strings() -> None:
    assert statuses.GOAL_STATUSES == (
        "queued", "held", "running", "completed", "exhausted", "cancelled"
    )  # fmt: skip
    assert RUN_STATUSES == ("queued", "running", "completed", "exhausted", "cancelled")
    assert sorted(statuses.TERMINAL_STATUSES) == ["cancelled", "completed", "exhausted"]
    assert statuses.ACTIVE_GOAL_STATUSES == ("queued", "held", "running")
    assert all(type(s) is str for s in (*statuses.GOAL_STATUSES, *RUN_STATUSES))
    assert set(RunStatus) == set(GoalStatus) - {"held"}  # a Run is never held


def test_a_member_is_its_value_in_json_and_in_text() -> None:
    assert GoalStatus.HELD == "held" and hash(GoalStatus.HELD) == hash("held")
    assert f"{GoalStatus.HELD}" == str(GoalStatus.HELD) == "held"
    assert json.dumps({"status": RunStatus.RUNNING}) == '{"status": "running"}'
    assert canonical_json({"status": GoalStatus.QUEUED}) == '{"status":"queued"}'
    assert GoalStatus("cancelled") is GoalStatus.CANCELLED


def test_the_old_names_are_the_same_values() -> None:
    assert goal.GOAL_STATUSES is goals.GOAL_STATUSES is statuses.GOAL_STATUSES
    assert goal.TERMINAL_STATUSES is run.TERMINAL_STATUSES is statuses.TERMINAL_STATUSES
    assert run.RUN_STATUSES is statuses.RUN_STATUSES
    assert sqlite.ACTIVE_STATUSES is statuses.ACTIVE_GOAL_STATUSES
    assert goals.GoalStatus is GoalStatus
