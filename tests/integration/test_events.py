"""`refine events` (DESIGN §16): the journal's events in commit order, for scripts.

Real processes: a `refine events --follow` piped into this test while another process commits,
on SQLite and on PostgreSQL; every sequence must arrive exactly once and in order, also when
the reader is SIGKILLed and a new one resumes with ``--after``, across a server restart and
when the SQLite file is replaced at its path. Hostile journal text stays exact in ``--json``
and is shown with escapes in the readable lines.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from store.goals import Goals
from store.journal.api import Journal
from store.ops.event_stream import EVENT_TYPES
from tests.helpers.cli import refine
from tests.helpers.postgres_server import PostgresServer
from tests.helpers.waits import wait_until

REFINE = [sys.executable, "-m", "refine_tui.cli"]
WAIT_S = 120.0
ESCAPES = "\x1b]0;pwned\x07\x1b[2J\x1b[31m"
REASON = ESCAPES + "[b]x[/b] \u202eevil\u2028 \x00nul \x85 日本語🎉 " + "長" * 20


# --- the backends' reads -------------------------------------------------------------------------


def test_event_records_are_the_events_with_their_command_ids(journal: Journal) -> None:
    goals = Goals(journal)
    goals.create(goal_id="g", title="t", node_id="n1", argv=["true"])
    goals.cancel(goal_id="g", reason="r", command_id="op:cancel:x")
    records = journal.event_records(0)
    events = journal.events_after(0)
    assert [r[:4] for r in records] == [
        (e.sequence, e.aggregate_id, e.version, e.type) for e in events
    ]
    assert [json.loads(r[4]) for r in records] == [dict(e.data) for e in events]
    assert [r[6] for r in records] == ["goal:g:create"] * 2 + ["op:cancel:x"] * 2
    assert [r[0] for r in journal.event_records(1, 2)] == [2, 3]
    only = journal.event_records(0, types=["goal.cancelled", "run.submitted"])
    assert [(r[0], r[3]) for r in only] == [(2, "run.submitted"), (3, "goal.cancelled")]


def test_count_by_status_and_node(journal: Journal) -> None:
    goals = Goals(journal)
    for gid, node in (("a", "n1"), ("b", "n1"), ("c", "n2"), ("d", "n2")):
        goals.create(goal_id=gid, title=gid, node_id=node, argv=["true"])
    goals.start(goal_id="c", node_id="n2", worker="n2/w", token="t")
    goals.cancel(goal_id="d", reason="r", command_id="op:cancel:d")
    assert journal.count_by_status_and_node("goal") == {
        ("queued", "n1"): 2,
        ("running", "n2"): 1,
        ("cancelled", "n2"): 1,
    }
    moving = journal.count_by_status_and_node("goal", ["queued", "held", "running"])
    assert moving == {("queued", "n1"): 2, ("running", "n2"): 1}


# --- the command, in process ----------------------------------------------------------------


@pytest.fixture
def hostile(tmp_path: Path) -> Path:
    path = tmp_path / "journal.db"
    with Journal.open(path) as journal:
        goals = Goals(journal)
        goals.create(goal_id="h", title="[b]x[/b] \u202eevil", node_id="n1", argv=["sh", ESCAPES])
        goals.cancel(goal_id="h", reason=REASON, command_id="op:cancel:h")
        goals.create(goal_id="other", title="other", node_id="n1", argv=["true"])
    return path


def test_json_lines_are_exact(hostile: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = refine(capsys, hostile, "events", "--json")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert len(lines) == 6 and all(line.isascii() for line in lines)  # one line per event
    events = [json.loads(line) for line in lines]
    assert [e["sequence"] for e in events] == [1, 2, 3, 4, 5, 6]
    assert set(events[0]) == {"sequence", "committed_at", "aggregate_id", "type", "data",
                              "command_id"}  # fmt: skip
    cancelled = events[2]
    assert cancelled["type"] == "goal.cancelled" and cancelled["command_id"] == "op:cancel:h"
    assert cancelled["data"]["reason"] == REASON  # every character back, NUL and all
    assert events[0]["data"]["recipe"]["argv"] == ["sh", ESCAPES]
    with Journal.open(hostile, read_only=True) as journal:
        stored = journal.events_after(0)
    assert [(e["aggregate_id"], e["type"], e["data"], e["committed_at"]) for e in events] == [
        (s.aggregate_id, s.type, dict(s.data), s.committed_at) for s in stored
    ]


def test_readable_lines_show_controls_as_escapes(
    hostile: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = refine(capsys, hostile, "events")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert len(lines) == 6
    assert not any(c in out for c in "\x1b\x07\x00\u202e\u2028\x85")
    cancelled = lines[2]
    assert "goal.cancelled  goal:h  by op:cancel:h" in cancelled
    assert "reason=\\x1b]0;pwned\\x07\\x1b[2J\\x1b[31m[b]x[/b] \\u202eevil\\u2028" in cancelled
    assert "\\x00nul \\x85 日本語🎉" in cancelled


def test_filters_and_resume(hostile: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def sequences(*args: str) -> list[int]:
        code, out, err = refine(capsys, hostile, "events", "--json", *args)
        assert (code, err) == (0, "")
        return [json.loads(line)["sequence"] for line in out.splitlines()]

    assert sequences("--after", "4") == [5, 6]
    assert sequences("--after", "6") == []
    assert sequences("--goal", "h") == [1, 2, 3, 4]
    assert sequences("--type", "goal.created") == [1, 5]
    assert sequences("--type", "run.cancelled, goal.created", "--goal", "h") == [1, 4]


@pytest.mark.parametrize(
    "args",
    [
        ("--type", "goal.exhuasted"),
        ("--type", ""),
        ("--type", "goal.created,"),
        ("--after", "-1"),
        ("--after", "x"),
    ],
)
def test_bad_usage_exits_2(hostile: Path, capsys, args: tuple[str, ...]) -> None:
    code, out, err = refine(capsys, hostile, "events", *args)
    assert (code, out) == (2, "") and err.startswith("refine: USAGE: ") and err.count("\n") == 1


def test_unknown_goal_and_missing_journal(hostile: Path, capsys) -> None:
    code, out, err = refine(capsys, hostile, "events", "--goal", "nope")
    assert (code, out) == (1, "") and err.startswith("refine: GOAL_NOT_FOUND:")
    missing = hostile.parent / "missing.db"
    code, _, err = refine(capsys, missing, "events", "--follow")
    assert code == 3 and err.startswith("refine: STORAGE:") and not missing.exists()


def test_every_type_a_lifecycle_writes_is_known(tmp_path: Path) -> None:
    """`--type` refuses names no model writes: each one written here must be among them."""
    path = tmp_path / "journal.db"
    env = {**os.environ, "REFINE_JOURNAL": str(path)}
    subprocess.run([*REFINE, "init"], env=env, check=True, capture_output=True)
    writer = [sys.executable, "-m", "tests.helpers.event_writer", "9", "g"]
    subprocess.run(writer, env=env, check=True, capture_output=True)
    with Journal.open(path) as journal:
        goals = Goals(journal)
        goals.create(goal_id="x", title="x", node_id="n1", argv=["true"], redelivery="operator")
        started = goals.start(goal_id="x", node_id="n1", worker="n1/t", token="t")
        goals.interrupt(
            goal_id="x", run_id="x.r1", epoch=1, goal_version=started.goal.version,
            run_version=started.run.version, confirmed_by="dana@n1", method="sigterm",
            command_id="op:stop:x",
        )  # fmt: skip
        goals.release(goal_id="x", command_id="op:release:x")
        goals.reassign(goal_id="x", node_id="n2", expected_version=goals.read("x").version)
        goals.create(goal_id="e", title="e", node_id="n1", argv=["true"], max_attempts=3)
        for epoch in (1, 2, 3):
            goals.start(goal_id="e", node_id="n1", worker="n1/e", token=f"e{epoch}")
            goals.settle(goal_id="e", run_id="e.r1", epoch=epoch, outcome="failed", reason="no")
        types = {e.type for e in journal.events_after(0)}
    assert types == EVENT_TYPES  # every type there is, in a few goals' lives


# --- real processes: a follower piped into a reader -------------------------------------------


class Follower:
    """`refine events --follow --json` with its stdout read line by line by a thread."""

    def __init__(self, location: str, *args: str) -> None:
        env = {**os.environ, "REFINE_JOURNAL": location}
        self.proc = subprocess.Popen(
            [*REFINE, "events", "--follow", "--json", *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    @property
    def sequences(self) -> list[int]:
        return [json.loads(line)["sequence"] for line in list(self.lines)]

    def wait_for(self, sequence: int) -> None:
        wait_until(
            lambda: self.sequences and self.sequences[-1] >= sequence,
            WAIT_S,
            f"the follower to print sequence {sequence}",
        )

    def kill(self) -> None:
        """SIGKILL; then everything it wrote to the pipe is read to the end."""
        self.proc.kill()
        self.proc.wait(timeout=WAIT_S)
        self._reader.join(WAIT_S)

    def interrupt(self) -> tuple[int, str]:
        self.proc.send_signal(signal.SIGINT)
        _, err = self.proc.communicate(timeout=WAIT_S)
        self._reader.join(WAIT_S)
        return self.proc.returncode, err


@pytest.fixture
def followers() -> Iterator[list[Follower]]:
    started: list[Follower] = []
    yield started
    for follower in started:
        if follower.proc.poll() is None:
            follower.kill()


def writer(location: str, commands: int, prefix: str) -> subprocess.Popen[str]:
    env = {**os.environ, "REFINE_JOURNAL": location}
    argv = [sys.executable, "-m", "tests.helpers.event_writer", str(commands), prefix]
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True)


def last_sequence(location: str) -> int:
    with Journal.open(location, read_only=True) as journal:
        return journal.last_sequence()


def init(location: str) -> None:
    env = {**os.environ, "REFINE_JOURNAL": location}
    subprocess.run([*REFINE, "init"], env=env, check=True, capture_output=True)


def test_500_commands_reach_a_follower_once_each_in_order_across_a_sigkill(
    journal_location: str, followers: list[Follower]
) -> None:
    init(journal_location)
    first = Follower(journal_location)
    followers.append(first)
    writing = writer(journal_location, 500, "g")
    first.wait_for(100)  # the writer is still going: the follower is killed mid-stream
    first.kill()
    seen = first.sequences
    assert seen == list(range(1, len(seen) + 1))
    resumed = Follower(journal_location, "--after", str(seen[-1]))
    followers.append(resumed)
    assert writing.wait(timeout=WAIT_S) == 0
    last = last_sequence(journal_location)
    assert last > 1000  # 500 commands of two or three events each
    resumed.wait_for(last)
    assert seen + resumed.sequences == list(range(1, last + 1))
    code, err = resumed.interrupt()  # Ctrl+C: quiet
    assert code in (0, 130) and err == ""


def test_a_postgresql_restart_is_followed_through(
    postgres_server: PostgresServer, postgres_url: str, followers: list[Follower]
) -> None:
    journal_location = postgres_url
    if not postgres_server.owned:
        pytest.skip("an external server ($REFINE_TEST_POSTGRES_URL) is not restarted by tests")
    init(journal_location)
    follower = Follower(journal_location)
    followers.append(follower)
    assert writer(journal_location, 50, "a").wait(timeout=WAIT_S) == 0
    before = last_sequence(journal_location)
    follower.wait_for(before)
    postgres_server.stop("fast")
    try:
        writing = writer(journal_location, 50, "b")  # waits for the server, then commits
    finally:
        postgres_server.start_on_same_port()
    assert writing.wait(timeout=WAIT_S) == 0
    last = last_sequence(journal_location)
    assert last > before
    follower.wait_for(last)
    assert follower.sequences == list(range(1, last + 1))
    code, err = follower.interrupt()
    assert code in (0, 130) and "Traceback" not in err  # it may have noted the wait


def _remove(path: Path) -> None:
    for end in ("", "-wal", "-shm"):
        path.with_name(path.name + end).unlink(missing_ok=True)


def test_a_sqlite_journal_replaced_at_its_path_is_followed(
    tmp_path: Path, followers: list[Follower]
) -> None:
    path = tmp_path / "journal.db"
    init(str(path))
    assert writer(str(path), 10, "a").wait(timeout=WAIT_S) == 0
    follower = Follower(str(path))
    followers.append(follower)
    follower.wait_for(last_sequence(str(path)))
    shutil.copy(path, tmp_path / "restored.db")  # a backup, then more work in it
    assert writer(str(tmp_path / "restored.db"), 5, "b").wait(timeout=WAIT_S) == 0
    _remove(path)
    (tmp_path / "restored.db").rename(path)  # the restore: another file at the same path
    assert writer(str(path), 5, "c").wait(timeout=WAIT_S) == 0
    last = last_sequence(str(path))
    follower.wait_for(last)
    assert follower.sequences == list(range(1, last + 1))


def test_head_ends_the_stream_quietly(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    init(str(path))
    assert writer(str(path), 30, "g").wait(timeout=WAIT_S) == 0
    env = {**os.environ, "REFINE_JOURNAL": str(path)}
    for json_flag in ("", "--json"):
        shell = f"{sys.executable} -m refine_tui.cli events --follow {json_flag} | head -3"
        done = subprocess.run(
            ["bash", "-c", shell + "; echo ${PIPESTATUS[0]} >&2"],
            env=env,
            capture_output=True,
            text=True,
            timeout=WAIT_S,
        )
        assert len(done.stdout.splitlines()) == 3
        assert done.stderr in ("141\n", "0\n")  # EPIPE: no traceback, no message
