"""`refine logs RUN|GOAL [--epoch E] [--follow]` (issue 24.8): an attempt's log from the CLI.

Attempts are claimed through the real Goals API (as a worker claims) and their logs written
where a worker writes them; `refine` runs as a subprocess.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from store.journal.sqlite import Journal
from store.model.goals import Goals
from tests.helpers.postgres_server import PostgresServer
from tests.helpers.registry import node_registry

REFINE = (sys.executable, "-m", "refine_tui.cli")
# The recipe's own bytes: an escape sequence, markup-like text, a lone byte that is not UTF-8.
OUTPUT = b"step 1\n\x1b[31mred\x1b[0m [bold]not markup[/bold] {braces}\n\xff raw\n"


def refine(journal: Path, *args: str, node: str = "n1") -> subprocess.CompletedProcess[bytes]:
    argv = [*REFINE, "--journal", str(journal), "--node", node, *args]
    return subprocess.run(argv, capture_output=True, timeout=60)


def claim(journal: Path | str, goal_id: str, node: str = "n1") -> None:
    """Add a goal on ``node`` and claim its first attempt, as a worker would."""
    with Journal.open(journal) as j:
        goals = Goals(j)
        goals.create(goal_id=goal_id, title=goal_id, node_id=node, argv=["true"])
        goals.start(goal_id=goal_id, node_id=node, worker=f"{node}/w", token="t")


def settle(journal: Path | str, goal_id: str, outcome: str = "completed") -> None:
    with Journal.open(journal) as j:
        goals = Goals(j)
        goal = goals.read(goal_id)
        assert goal is not None
        reason = None if outcome == "completed" else "exit 1"
        goals.settle(goal_id=goal_id, run_id=goal.run_id, epoch=1, outcome=outcome, reason=reason)


def log_file(journal: Path | str, run_id: str, epoch: int = 1, node: str = "n1") -> Path:
    path = node_registry(journal, node).log_path(run_id, epoch)
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture
def journal(tmp_path: Path) -> Path:
    path = tmp_path / "journal.db"
    assert refine(path, "init").returncode == 0
    return path


def test_an_ended_attempts_log_is_printed_byte_for_byte(journal: Path) -> None:
    claim(journal, "build")
    log_file(journal, "build.r1").write_bytes(OUTPUT)
    settle(journal, "build")
    for target in (["build"], ["build.r1"], ["build.r1", "--epoch", "1"]):
        done = refine(journal, "logs", *target)
        assert (done.returncode, done.stdout, done.stderr) == (0, OUTPUT, b""), target
    assert refine(journal, "log", "build").stdout == OUTPUT  # `refine log` too


def test_follow_prints_what_comes_and_ends_with_the_attempt(journal: Path) -> None:
    claim(journal, "build")
    log = log_file(journal, "build.r1")
    log.write_bytes(b"first\n")
    follow = subprocess.Popen(
        [*REFINE, "--journal", str(journal), "--node", "n1", "logs", "build", "--follow"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert follow.stdout is not None
        assert follow.stdout.readline() == b"first\n"
        with open(log, "ab") as f:
            f.write(b"second\n")
        assert follow.stdout.readline() == b"second\n"  # woken by the write, not a timer
        with open(log, "ab") as f:
            f.write(b"last words\n")
        settle(journal, "build")
        out, err = follow.communicate(timeout=60)  # the attempt ended: so does the follow
    finally:
        follow.kill()
    assert (follow.returncode, out, err) == (0, b"last words\n", b"")


def test_another_nodes_attempt_is_refused_naming_its_node(journal: Path) -> None:
    claim(journal, "train", node="b")
    done = refine(journal, "logs", "train")
    assert (done.returncode, done.stdout) == (1, b"")
    assert done.stderr.decode().startswith(
        "refine: LOG_ELSEWHERE: the log of train.r1/1 is on node b"
    )
    assert done.stderr.count(b"\n") == 1
    done = refine(journal, "logs", "train.r1", "--epoch", "1", node="b")  # node b asks
    assert (done.returncode, done.stdout) == (0, b"")
    assert done.stderr == b"refine: logs: train.r1/1 runs and has no output yet\n"


def test_no_log_yet_says_so(journal: Path) -> None:
    with Journal.open(journal) as j:
        Goals(j).create(goal_id="queued", title="q", node_id="n1", argv=["true"])
    done = refine(journal, "logs", "queued")
    assert done.returncode == 1
    assert done.stderr == b"refine: NO_LOG: queued.r1 has no attempt yet: no log\n"
    claim(journal, "starting")  # claimed, its worker has not opened the log yet
    done = refine(journal, "logs", "starting")
    assert (done.returncode, done.stdout) == (0, b"")
    assert b"starting.r1/1 runs and has no output yet" in done.stderr
    settle(journal, "starting", "failed")
    done = refine(journal, "logs", "starting")
    assert done.returncode == 1 and done.stderr.startswith(
        b"refine: NO_LOG: starting.r1/1 left no log"
    )
    for bad in (["nope"], ["nope.r1"], ["starting.r1", "--epoch", "2"]):
        done = refine(journal, "logs", *bad)
        assert done.returncode == 1 and done.stderr.count(b"\n") == 1, bad
    done = refine(journal, "logs", "starting", "--epoch", "0")
    assert done.returncode == 2 and done.stderr.startswith(b"refine: USAGE: ")


def test_follow_ends_quietly_on_a_closed_pipe_and_on_sigint(journal: Path) -> None:
    claim(journal, "build")
    log_file(journal, "build.r1").write_bytes(b"x" * 1_000_000 + b"\n")  # more than a pipe holds
    argv = [*REFINE, "--journal", str(journal), "--node", "n1", "logs", "build", "-f"]
    reader_gone = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert reader_gone.stdout is not None and reader_gone.stderr is not None
    assert reader_gone.stdout.read(10) == b"x" * 10
    reader_gone.stdout.close()  # `| head -c 10`
    assert reader_gone.wait(timeout=60) == 128 + signal.SIGPIPE
    assert reader_gone.stderr.read() == b""  # no traceback, no "Exception ignored"
    follow = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert follow.stdout is not None
        assert len(follow.stdout.read(1_000_001)) == 1_000_001
        time.sleep(0.3)  # it waits for more
        assert follow.poll() is None
        follow.send_signal(signal.SIGINT)
        _, err = follow.communicate(timeout=60)
    finally:
        follow.kill()
    assert (follow.returncode, err) == (130, b"")


def test_a_log_in_the_state_dir_given_is_found(journal: Path, tmp_path: Path) -> None:
    claim(journal, "build")
    state = tmp_path / "state"
    log = state / "logs" / "build.r1.1.log"
    log.parent.mkdir(parents=True)
    log.write_bytes(b"elsewhere\n")
    done = refine(journal, "--state-dir", str(state), "logs", "build")
    assert (done.returncode, done.stdout) == (0, b"elsewhere\n")


async def test_follow_is_woken_by_the_write_and_the_commit_not_a_timer(
    journal: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the safety look an hour away, only inotify and the change source can wake it."""
    import asyncio

    from store.ops import attempt_log

    monkeypatch.setattr(attempt_log, "SAFETY_CHECK_S", 3600.0)
    claim(journal, "build")
    log = log_file(journal, "build.r1")
    got: list[bytes] = []
    with Journal.open(journal, read_only=True) as reader:
        found = attempt_log.locate_log(reader, "build", None, "n1")
        following = asyncio.create_task(
            attempt_log.follow(reader, journal, found, attempt_log.LogReader(log), got.append)
        )
        await asyncio.sleep(0.3)  # it has looked and sleeps
        log.write_bytes(b"one\n")
        for _ in range(300):
            if got:
                break
            await asyncio.sleep(0.1)
        assert got == [b"one\n"]
        await asyncio.to_thread(settle, journal, "build")
        await asyncio.wait_for(following, 30)
    assert not following.exception()


@pytest.mark.postgres
async def test_follow_reads_again_a_change_whose_read_was_refused(
    postgres_server: PostgresServer, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The change gate reported the attempt's end but reading the run failed (here: the role
    lost its right to read for a while): the change was taken as seen and `refine logs
    --follow` never ended. A change whose read failed is read again at the next look."""
    import asyncio

    from store.ops import attempt_log

    monkeypatch.setattr(attempt_log, "SAFETY_CHECK_S", 0.2)
    claim(postgres_url, "build")
    log = log_file(postgres_url, "build.r1")
    dbname = postgres_url.rsplit("/", 1)[1]
    role = f"viewer_{dbname}"

    def admin(sql: str) -> None:
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(sql)

    admin(f"CREATE ROLE {role} LOGIN PASSWORD 'view-pw'")
    try:
        admin(f'GRANT CONNECT ON DATABASE "{dbname}" TO {role}')
        admin(f"GRANT USAGE ON SCHEMA refine TO {role}")
        admin(f"GRANT SELECT ON ALL TABLES IN SCHEMA refine TO {role}")
        viewer = postgres_server.url(dbname, user=role, password="view-pw")
        with Journal.open(viewer, read_only=True) as reader:
            found = attempt_log.locate_log(reader, "build", None, "n1")
            following = asyncio.create_task(
                attempt_log.follow(
                    reader, viewer, found, attempt_log.LogReader(log), lambda b: None
                )
            )
            await asyncio.sleep(0.5)  # it has read the run: running
            admin(f"REVOKE SELECT ON refine.aggregates FROM {role}")
            await asyncio.to_thread(settle, postgres_url, "build")
            await asyncio.sleep(1.0)  # woken, the head moved, the run unreadable
            assert not following.done()
            admin(f"GRANT SELECT ON refine.aggregates TO {role}")
            await asyncio.wait_for(following, 10)
        assert not following.exception()
    finally:
        admin(f"DROP OWNED BY {role}")
        admin(f"DROP ROLE {role}")
