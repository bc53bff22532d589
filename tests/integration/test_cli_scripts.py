"""The command line as scripts use it (issue 24, items 9, 10, 11, 13): `refine` in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from store.journal.sqlite import Journal
from store.model.goals import Goals
from tests.helpers.cli import dump

REFINE = (sys.executable, "-m", "refine_tui.cli")
CLEAN_ENV = {
    k: v
    for k, v in os.environ.items()
    if k not in ("REFINE_JOURNAL", "REFINE_NODE", "REFINE_STATE_DIR")
}


def refine(
    journal: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    environ = {**CLEAN_ENV, "REFINE_OPERATOR": "dana", "REFINE_NODE": "n1", **(env or {})}
    return subprocess.run(
        [*REFINE, "--journal", str(journal), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=environ,
    )


@pytest.fixture
def journal(tmp_path: Path) -> Path:
    path = tmp_path / "journal.db"
    assert refine(path, "init").returncode == 0
    with Journal.open(path) as j:
        goals = Goals(j)
        goals.create(goal_id="silent", title="S", node_id="n1", argv=["true"])
        goals.start(goal_id="silent", node_id="n1", worker="n1/gone", token="t")  # no process
        goals.create(goal_id="queued", title="Q", node_id="n1", argv=["true"])
    return path


# --- 9. cleanup GOAL ---------------------------------------------------------------------------


def test_cleanup_of_a_goal_confirms_its_running_attempt(journal: Path) -> None:
    done = refine(journal, "cleanup", "silent", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["run_id"], report["epoch"], report["outcome"]) == ("silent.r1", 1, "requeued")
    with Journal.open(journal, read_only=True) as j:
        assert Goals(j).read("silent").status == "queued"  # type: ignore[union-attr]


def test_cleanup_of_a_goal_without_a_running_attempt_names_the_exact_form(journal: Path) -> None:
    before = dump(journal)
    done = refine(journal, "cleanup", "queued")
    assert done.returncode == 1 and done.stdout == "" and done.stderr.count("\n") == 1
    assert done.stderr.startswith("refine: NO_ACTIVE_ATTEMPT: goal queued has no running attempt")
    assert "refine cleanup queued.r1 --epoch E" in done.stderr
    assert refine(journal, "cleanup", "silent").returncode == 0  # attempt 1 ended: requeued
    done = refine(journal, "cleanup", "silent")
    assert done.returncode == 1 and "refine cleanup silent.r1 --epoch 1" in done.stderr
    assert dump(journal) != before  # only the one confirmation above was written
    done = refine(journal, "cleanup", "silent.r1")  # a run still needs its epoch
    assert done.returncode == 2 and done.stderr.startswith("refine: USAGE: cleanup silent.r1 needs")
    done = refine(journal, "cleanup", "nope")
    assert done.returncode == 1 and done.stderr.startswith("refine: GOAL_NOT_FOUND: no goal nope")


# --- 10. refusals as JSON; WAIT_TIMEOUT exits 4 --------------------------------------------------


@pytest.mark.parametrize(
    ("args", "code", "exit_code"),
    [
        (("stop", "queued"), "NO_ACTIVE_ATTEMPT", 1),
        (("show", "nope"), "GOAL_NOT_FOUND", 1),
        (("cancel", "queued"), "USAGE", 2),  # --reason missing
        (("wait", "queued", "--status", "running", "--timeout", "0.1"), "WAIT_TIMEOUT", 4),
    ],
)
def test_a_refusal_with_json_is_a_json_object_too(
    journal: Path, args: tuple[str, ...], code: str, exit_code: int
) -> None:
    done = refine(journal, *args, "--json")
    assert done.returncode == exit_code, done.stderr
    error = json.loads(done.stdout)["error"]
    assert error["code"] == code and done.stderr == f"refine: {code}: {error['message']}\n"
    assert refine(journal, *args).stdout == ""  # without --json: only the line on stderr


def test_a_missing_journal_with_json_is_a_json_object_exit_3(tmp_path: Path) -> None:
    done = refine(tmp_path / "missing.db", "goals", "--json")
    assert done.returncode == 3 and json.loads(done.stdout)["error"]["code"] == "STORAGE"


def test_wait_timeout_exits_4_and_a_goal_that_can_never_get_there_1(journal: Path) -> None:
    done = refine(journal, "wait", "queued", "--status", "running", "--timeout", "0.1")
    assert done.returncode == 4 and done.stderr.startswith("refine: WAIT_TIMEOUT: ")
    assert refine(journal, "cancel", "queued", "--reason", "r").returncode == 0
    done = refine(journal, "wait", "queued", "--status", "running", "--timeout", "0.1")
    assert done.returncode == 1 and done.stderr.startswith("refine: GOAL_TERMINAL: ")


# --- 11. help ----------------------------------------------------------------------------------


def test_goal_alone_names_its_subcommands(journal: Path) -> None:
    done = refine(journal, "goal")
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert done.stderr.startswith("refine: USAGE: goal needs a subcommand: add")
    assert "goal_command" not in done.stderr


@pytest.mark.parametrize(
    ("command", "wanted"),
    [
        (("goal", "add"), ["(default 3)", "safe = requeue", "operator = hold", "(default safe)"]),
        (("stop",), ["(default 5)", "postgresql://", "$REFINE_JOURNAL", "$REFINE_NODE"]),
        (("node",), ["(default 4)", "--force"]),
        (("cleanup",), ["--epoch", "a GOAL"]),
    ],
)
def test_help_says_each_options_default(
    journal: Path, command: tuple[str, ...], wanted: list[str]
) -> None:
    done = refine(journal, *command, "--help")
    assert done.returncode == 0
    text = " ".join(done.stdout.split())  # argparse wraps lines
    for words in wanted:
        assert words in text, (words, text)


@pytest.mark.parametrize("command", ["node", "tui", "serve", "demo", "metrics", "logs x"])
def test_json_only_where_a_command_prints_data(journal: Path, command: str) -> None:
    for args in ([*command.split(), "--json"], ["--json", *command.split()]):
        done = refine(journal, *args)
        assert done.returncode == 2 and done.stderr.startswith("refine: USAGE: "), args
    assert "--json" not in refine(journal, command.split()[0], "--help").stdout


# --- 13. an empty variable is bad usage --------------------------------------------------------


@pytest.mark.parametrize("variable", ["REFINE_NODE", "REFINE_JOURNAL", "REFINE_OPERATOR"])
@pytest.mark.parametrize(
    "args", [("goals",), ("stop", "silent"), ("goal", "add", "--title", "T", "--", "true")]
)
def test_an_empty_variable_is_bad_usage_like_an_empty_option(
    journal: Path, variable: str, args: tuple[str, ...]
) -> None:
    before = dump(journal)
    argv = [*REFINE, *args]  # the journal by $REFINE_JOURNAL here, so that its emptiness counts
    environ = {**CLEAN_ENV, "REFINE_JOURNAL": str(journal), "REFINE_NODE": "n1"}
    environ["REFINE_OPERATOR"] = "dana"
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=60, env={**environ, variable: ""}
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == f"refine: USAGE: ${variable} is empty: give it a value, or unset it\n"
    assert dump(journal) == before
