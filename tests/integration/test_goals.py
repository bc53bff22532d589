"""Goals over a real SQLite journal: every Goal change commits with its Run change, refusals
are typed and write nothing, redelivery follows the Goal's rule, and the journal stays foldable."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from store.errors import (
    CancelPendingError,
    CommandConflictError,
    CorruptGoalError,
    GoalExistsError,
    GoalNotFoundError,
    GoalStateError,
    GoalTerminalError,
    InvalidInputError,
    JournalReadOnlyError,
    NotThisNodeError,
    RefineError,
    StaleAttemptError,
    VersionConflictError,
)
from store.journal.sqlite import Change, Journal, Stored
from store.model.goals import MAX_NAME, Goals, goal_from_stored, goal_id_of_run, pins_for
from store.ops.check import check_journal


def add(goals: Goals, goal_id: str = "build", **kw) -> None:
    args = {"title": "Build it", "node_id": "n1", "argv": ["make", "all"], **kw}
    goals.create(goal_id=goal_id, **args)


def start(goals: Goals, goal_id: str = "build", token: str = "t1", node: str = "n1"):
    return goals.start(goal_id=goal_id, node_id=node, worker=f"{node}:{token}", token=token)


def interrupt(goals: Goals, started, command_id: str = "op:stop:1"):
    return goals.interrupt(
        goal_id=started.goal.goal_id,
        run_id=started.run.run_id,
        epoch=started.attempt.epoch,
        goal_version=started.goal.version,
        run_version=started.run.version,
        confirmed_by="dana@n1",
        method="sigterm",
        command_id=command_id,
    )


def refused_without_writing(journal: Journal, error: type[RefineError], call) -> RefineError:
    before = journal.last_sequence()
    with pytest.raises(error) as info:
        call()
    assert journal.last_sequence() == before
    return info.value


def goal_events(journal: Journal, goal_id: str = "build") -> list[str]:
    return [e.type for e in journal.history("goal:" + goal_id, 0, 1000)]


def test_create_start_settle_commit_goal_and_run_together(journal: Journal) -> None:
    goals = Goals(journal)
    created = goals.create(goal_id="build", title="Build", node_id="n1", argv=["make"], cwd="/src")
    assert created.goal.status == "queued" and created.goal.round == 1
    assert created.run.run_id == "build.r1" and created.run.status == "queued"
    assert created.run.pins == pins_for({"argv": ["make"], "cwd": "/src"}, "n1")
    assert created.run.pins["candidate_digest"].startswith("sha256:")
    again = goals.create(goal_id="build", title="Build", node_id="n1", argv=["make"], cwd="/src")
    assert again.replayed and again.goal == created.goal
    refused_without_writing(
        journal,
        GoalExistsError,
        lambda: goals.create(goal_id="build", title="Other", node_id="n1", argv=["make"]),
    )

    started = start(goals)
    assert started.goal.status == "running" and started.run.status == "running"
    assert started.attempt.epoch == 1 and started.attempt.worker == "n1:t1"
    replay = start(goals)  # the same token: a replay, never a second attempt
    assert replay.replayed and replay.attempt == started.attempt

    done = goals.settle(
        goal_id="build", run_id="build.r1", epoch=1, outcome="completed", evidence=["exit:0"]
    )
    assert done.goal.status == "completed" and done.run.status == "completed"
    assert goal_events(journal) == ["goal.created", "goal.started", "goal.completed"]
    # each command committed both aggregates, one version each
    events = journal.events_after(0)
    assert {e.aggregate_id for e in events if e.type == "goal.started"} == {"goal:build"}
    assert journal.load("goal:build").version == 3 and journal.load("run:build.r1").version == 3
    assert goals.list(status="completed") == [done.goal]
    assert [r.run_id for r in goals.runs("build")] == ["build.r1"]
    assert check_journal(journal).clean


@pytest.mark.parametrize("redelivery", ["safe", "operator"])
def test_failed_attempts_retry_either_way_until_the_budget_is_gone(
    journal: Journal, redelivery: str
) -> None:
    goals = Goals(journal)
    add(goals, max_attempts=2, redelivery=redelivery)
    start(goals, token="a")
    first = goals.settle(
        goal_id="build", run_id="build.r1", epoch=1, outcome="failed", reason="exit code 2"
    )
    assert first.goal.status == "queued" and first.run.status == "queued"
    start(goals, token="b")
    refused_without_writing(  # a second, different report for epoch 1: its settle id is used
        journal,
        CommandConflictError,
        lambda: goals.settle(goal_id="build", run_id="build.r1", epoch=1, outcome="completed"),
    )
    last = goals.settle(
        goal_id="build", run_id="build.r1", epoch=2, outcome="failed", reason="exit code 2"
    )
    assert last.goal.status == "exhausted" and last.run.status == "exhausted"
    assert goal_events(journal)[-1] == "goal.exhausted"
    assert check_journal(journal).clean


def test_interrupted_operator_goal_is_held_until_released(journal: Journal) -> None:
    goals = Goals(journal)
    add(goals, goal_id="safe")
    add(goals, goal_id="pay", redelivery="operator")
    assert interrupt(goals, start(goals, "safe"), "op:stop:a").goal.status == "queued"
    held = interrupt(goals, start(goals, "pay"), "op:stop:b")
    refused_without_writing(  # the interrupted worker's late report
        journal,
        StaleAttemptError,
        lambda: goals.settle(goal_id="pay", run_id="pay.r1", epoch=1, outcome="completed"),
    )
    assert held.goal.status == "held" and held.run.status == "queued"
    assert held.run.attempts[0].cleanup == {
        "epoch": 1,
        "confirmed_by": "dana@n1",
        "method": "sigterm",
    }
    refused_without_writing(journal, GoalStateError, lambda: start(goals, "pay", token="t2"))
    released = goals.release(goal_id="pay", command_id="op:release:1", by="dana")
    assert released.goal.status == "queued"
    assert start(goals, "pay", token="t3").attempt.epoch == 2
    refused_without_writing(
        journal, GoalStateError, lambda: goals.release(goal_id="pay", command_id="op:release:2")
    )
    assert goal_events(journal, "pay") == [
        "goal.created",
        "goal.started",
        "goal.held",
        "goal.released",
        "goal.started",
    ]
    assert check_journal(journal).clean


def test_interrupt_is_refused_at_stale_versions_and_exhausts_the_last_attempt(
    journal: Journal,
) -> None:
    goals = Goals(journal)
    add(goals, max_attempts=1)
    started = start(goals)
    goals.cancel(goal_id="build", reason="changed plans", command_id="op:cancel:1")
    refused_without_writing(journal, VersionConflictError, lambda: interrupt(goals, started))
    # at fresh versions, the pending cancellation ends as cancel with the cleanup
    goal = goals.read("build")
    run = goals.current_run(goal)
    ended = goals.interrupt(
        goal_id="build",
        run_id="build.r1",
        epoch=1,
        goal_version=goal.version,
        run_version=run.version,
        confirmed_by="dana@n1",
        method="sigkill",
        command_id="op:stop:2",
    )
    assert ended.goal.status == "cancelled" and ended.run.status == "cancelled"
    assert ended.run.cancel_reason == "changed plans"

    add(goals, goal_id="one", max_attempts=1)
    assert interrupt(goals, start(goals, "one"), "op:stop:3").goal.status == "exhausted"
    assert check_journal(journal).clean


def test_start_refusals_are_typed_and_write_nothing(journal: Journal) -> None:
    goals = Goals(journal)
    add(goals)
    refused_without_writing(journal, NotThisNodeError, lambda: start(goals, node="n2"))
    refused_without_writing(journal, GoalNotFoundError, lambda: start(goals, "nope"))
    start(goals)
    refused_without_writing(journal, GoalStateError, lambda: start(goals, token="t2"))
    goals.settle(goal_id="build", run_id="build.r1", epoch=1, outcome="completed")
    refused_without_writing(journal, GoalTerminalError, lambda: start(goals, token="t3"))


def test_reassign_moves_the_round_on_and_the_first_commit_wins(journal: Journal) -> None:
    goals = Goals(journal)
    add(goals)
    add(goals, goal_id="race")
    version = goals.read("build").version
    moved = goals.reassign(goal_id="build", node_id="n2", expected_version=version)
    assert (moved.goal.node_id, moved.goal.round, moved.goal.run_id) == ("n2", 2, "build.r2")
    assert moved.run.status == "queued" and moved.run.pins["scenario_revision"] == "node:n2"
    old = goals.runs("build")[0]
    assert old.status == "cancelled" and "reassigned to node n2" in old.cancel_reason
    # a worker launched by n1 for round 1 loses: the node (and the round) moved on
    refused_without_writing(journal, NotThisNodeError, lambda: start(goals, token="late"))
    refused_without_writing(
        journal,
        GoalStateError,
        lambda: goals.start(goal_id="build", node_id="n2", worker="w", token="x", round=1),
    )
    # start commits first: the reassign read the older version and is refused
    race_version = goals.read("race").version
    start(goals, "race")
    refused_without_writing(
        journal,
        VersionConflictError,
        lambda: goals.reassign(goal_id="race", node_id="n2", expected_version=race_version),
    )
    refused_without_writing(
        journal,
        GoalStateError,
        lambda: goals.reassign(
            goal_id="race", node_id="n2", expected_version=goals.read("race").version
        ),
    )
    assert check_journal(journal).clean


def test_a_repeated_reassign_replays_even_after_the_goal_moved_on(journal: Journal) -> None:
    """The seed's replay rule holds for reassign: the same command again (a caller that does
    not know whether it committed) is ``replayed``, never a VERSION_CONFLICT."""
    goals = Goals(journal)
    add(goals)
    first = goals.reassign(goal_id="build", node_id="n2", expected_version=1)
    again = goals.reassign(goal_id="build", node_id="n2", expected_version=1)
    assert again.replayed and again.goal == first.goal and again.run == first.run
    start(goals, node="n2")
    later = goals.reassign(goal_id="build", node_id="n2", expected_version=1)
    assert later.replayed and later.goal == first.goal
    refused_without_writing(
        journal,
        VersionConflictError,
        lambda: goals.reassign(goal_id="build", node_id="n3", expected_version=1),
    )
    with Journal.open(journal.location, read_only=True) as ro:
        refused_without_writing(
            journal,
            JournalReadOnlyError,
            lambda: Goals(ro).reassign(goal_id="build", node_id="n2", expected_version=1),
        )
    assert check_journal(journal).clean


RACER = """
import sys
from store.errors import RefineError
from store.model.goals import Goals
from store.journal.sqlite import Journal
with Journal.open(sys.argv[1]) as j:
    try:
        Goals(j).start(goal_id="race", node_id="n1", worker="w" + sys.argv[2], token=sys.argv[2])
        print("won")
    except RefineError as exc:
        print(exc.code)
"""


def test_racing_starts_across_processes_have_one_winner(
    journal: Journal, journal_location: str
) -> None:
    goals = Goals(journal)
    add(goals, goal_id="race")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, journal_location, str(i)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(4)
    ]
    results = sorted(p.communicate(timeout=30)[0].strip() for p in procs)
    assert results.count("won") == 1
    assert set(results) - {"won"} <= {"GOAL_STATE"}
    assert len(goals.current_run(goals.read("race")).attempts) == 1


def test_a_missing_goal_is_refused_after_the_journal_and_the_command_id(journal: Journal) -> None:
    """The seed's order holds for a Goal that is not there: read-only, then replay or
    COMMAND_CONFLICT, and only then GOAL_NOT_FOUND."""
    goals = Goals(journal)
    add(goals)
    goals.cancel(goal_id="build", reason="r", command_id="op:cancel:1")
    refused_without_writing(
        journal,
        CommandConflictError,
        lambda: goals.cancel(goal_id="missing", reason="r", command_id="op:cancel:1"),
    )
    refused_without_writing(
        journal,
        GoalNotFoundError,
        lambda: goals.cancel(goal_id="missing", reason="r", command_id="op:cancel:2"),
    )
    with Journal.open(journal.location, read_only=True) as ro:
        ro_goals = Goals(ro)
        for call in (
            lambda: ro_goals.cancel(goal_id="missing", reason="r", command_id="op:cancel:3"),
            lambda: ro_goals.release(goal_id="missing", command_id="op:release:1"),
            lambda: start(ro_goals, "missing"),
        ):
            refused_without_writing(journal, JournalReadOnlyError, call)


def test_cancel_is_terminal_intent_with_the_run_in_the_same_transaction(journal: Journal) -> None:
    goals = Goals(journal)
    add(goals, goal_id="queued")
    add(goals, goal_id="busy")
    now = goals.cancel(
        goal_id="queued", reason="not needed", command_id="op:cancel:a", by="dana@n1"
    )
    assert now.goal.status == "cancelled" and now.goal.cancel_reason == "not needed"
    assert now.run.status == "cancelled" and now.run.cancel_reason == "not needed"
    refused_without_writing(
        journal,
        GoalTerminalError,
        lambda: goals.cancel(goal_id="queued", reason="again", command_id="op:cancel:b"),
    )

    start(goals, "busy")
    intent = goals.cancel(goal_id="busy", reason="wrong input", command_id="op:cancel:c")
    assert intent.goal.status == "cancelled" and intent.run.status == "running"
    assert intent.run.cancel_requested == {"reason": "wrong input"}
    refused_without_writing(  # the owner may not complete past a pending cancellation
        journal,
        CancelPendingError,
        lambda: goals.settle(goal_id="busy", run_id="busy.r1", epoch=1, outcome="completed"),
    )
    ended = goals.settle(goal_id="busy", run_id="busy.r1", epoch=1, outcome="cancelled")
    assert ended.run.status == "cancelled" and ended.run.cancel_reason == "wrong input"
    assert ended.run.attempts[0].cleanup["confirmed_by"] == "n1:t1"
    assert ended.goal.status == "cancelled"
    assert check_journal(journal).clean


def test_corrupt_goal_records_are_refused_and_never_interpreted(journal: Journal) -> None:
    goals = Goals(journal)
    add(goals)
    good = journal.load("goal:build").state
    for broken in (
        {**good, "status": "paused"},
        {**good, "run_id": "build.r7"},
        {**good, "cancel_reason": "why"},
        {**good, "recipe": {"argv": [], "cwd": None}},
        {**good, "extra": 1},
        None,
    ):
        with pytest.raises(CorruptGoalError):
            goal_from_stored(Stored("goal:build", 1, broken))
    with pytest.raises(CorruptGoalError):
        goal_from_stored(Stored("goal:other", 1, good))
    bad = {**good, "status": "paused"}
    journal.execute(
        command_id="test:corrupt",
        payload={},
        expected={"goal:build": None},
        decide=lambda loaded: [Change("goal:build", bad, [("test.corrupt", {})])],
    )
    with pytest.raises(CorruptGoalError):
        goals.read("build")
    refused_without_writing(journal, CorruptGoalError, lambda: start(goals, token="t9"))


def test_longest_ids_still_make_valid_run_and_command_ids(journal: Journal) -> None:
    goals = Goals(journal)
    goal_id = "g" * MAX_NAME
    add(goals, goal_id=goal_id, node_id="n" * MAX_NAME)
    started = goals.start(goal_id=goal_id, node_id="n" * MAX_NAME, worker="w", token="t" * 40)
    assert started.attempt.attempt_id == f"{goal_id}.r1/1"
    refused_without_writing(
        journal, InvalidInputError, lambda: add(goals, goal_id="g" * (MAX_NAME + 1))
    )


BAD_CREATE = [
    {"goal_id": "has space"},
    {"goal_id": "a:b"},
    {"goal_id": ""},
    {"goal_id": 7},
    {"title": ""},
    {"title": "x" * 201},
    {"title": "line\nbreak"},
    {"argv": []},
    {"argv": "make"},
    {"argv": ["make", 1]},
    {"argv": [""]},
    {"cwd": ""},
    {"redelivery": "maybe"},
    {"max_attempts": 0},
    {"max_attempts": 21},
    {"max_attempts": True},
    {"attempt_timeout_ms": 0},
    {"node_id": "n/1"},
    {"argv": ["echo", "\ud800"]},
    {"argv": ["echo", "a\0b"]},
    {"cwd": "/tmp/\ud800"},
    {"title": "lone \ud800"},
]


@pytest.mark.parametrize("bad", BAD_CREATE)
def test_bad_create_input_is_refused_before_anything_is_touched(journal: Journal, bad) -> None:
    args = {"goal_id": "g", "title": "T", "node_id": "n1", "argv": ["true"], **bad}
    refused_without_writing(journal, InvalidInputError, lambda: Goals(journal).create(**args))


@settings(max_examples=60, deadline=None)
@given(
    goal_id=st.one_of(st.text(max_size=70), st.integers()),
    title=st.one_of(st.text(max_size=210), st.none()),
    argv=st.one_of(st.lists(st.text(max_size=5), max_size=3), st.text(max_size=3)),
    redelivery=st.sampled_from(["safe", "operator", "x", ""]),
    max_attempts=st.integers(-2, 25),
)
def test_fuzzed_input_gives_only_typed_errors(
    tmp_path_factory: pytest.TempPathFactory, goal_id, title, argv, redelivery, max_attempts
) -> None:
    # A fresh journal per example: a Goal left by an earlier example must not make this one's
    # calls legitimately succeed.
    with Journal.open(tmp_path_factory.mktemp("fuzz") / "journal.db") as journal:
        goals = Goals(journal)
        try:
            goals.create(
                goal_id=goal_id,
                title=title,
                node_id="n1",
                argv=argv,
                redelivery=redelivery,
                max_attempts=max_attempts,
            )
            created = True
        except RefineError:
            assert journal.last_sequence() == 0
            created = False
        for call in (
            lambda: goals.start(goal_id=goal_id, node_id="n1", worker=title, token="t"),
            lambda: goals.cancel(goal_id=goal_id, reason=title, command_id="op:cancel:f"),
            lambda: goals.settle(
                goal_id=goal_id, run_id=title, epoch=max_attempts, outcome="failed", reason=title
            ),
        ):
            before = journal.last_sequence()
            if not created:
                # Nothing exists, so every command on it is refused.
                refused_without_writing(journal, RefineError, call)
                continue
            try:
                call()
            except RefineError:
                assert journal.last_sequence() == before
        assert check_journal(journal).violations == []


def test_text_rules_refuse_exactly_control_characters_and_what_cannot_be_stored() -> None:
    # Titles refuse Unicode categories Cc and Cs; argv and cwd refuse NUL and what UTF-8
    # cannot encode. The rules search with one regex each: every code point agrees with the
    # definitions they replace (unicodedata, str.encode).
    import unicodedata

    from store.model.goal import check_argv, check_cwd, check_title

    def refused(check, value) -> bool:
        try:
            check(value)
        except InvalidInputError:
            return True
        return False

    for code in range(0x110000):
        char = chr(code)
        control = unicodedata.category(char) in ("Cc", "Cs")
        try:
            char.encode()
            unstorable = char == "\0"
        except UnicodeEncodeError:
            unstorable = True
        assert refused(check_title, f"a{char}") == control, hex(code)
        assert refused(check_argv, ["a", char]) == unstorable, hex(code)
        if code % 97 == 0 or unstorable:
            assert refused(check_cwd, f"/{char}") == unstorable, hex(code)
    assert refused(check_argv, ["a", "\ud83d", "\ude00"])  # no pair forms across items


def test_run_ids_name_their_goal_exactly() -> None:
    assert goal_id_of_run("build.r1") == "build"
    assert goal_id_of_run("a.r1.r2") == "a.r1"
    for bad in ("x.r0", "x.r01", "x.r\u00b2", ".r1", "a:b.r1", "build", 7):
        assert goal_id_of_run(bad) is None


def test_bad_reports_are_refused_before_anything_is_touched(journal: Journal) -> None:
    goals = Goals(journal)
    add(goals)
    start(goals)
    for bad in (
        {"evidence": "exit:0"},
        {"evidence": ["a", "a"]},
        {"outcome": "done"},
        {"run_id": "other.r1"},
        {"epoch": 0},
        {"reason": "completed has none"},
        {"outcome": "failed"},  # a failure needs its reason
        {"outcome": "cancelled", "evidence": ["exit:1"]},
    ):
        args = {"goal_id": "build", "run_id": "build.r1", "epoch": 1, "outcome": "completed", **bad}
        refused_without_writing(journal, InvalidInputError, lambda a=args: goals.settle(**a))
    assert goals.read("build").status == "running"
