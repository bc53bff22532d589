"""A node's state dir (DESIGN §11): ``--state-dir`` / ``$REFINE_STATE_DIR``, else
``nodes/<node>/<journal id>/`` beside a SQLite journal, else
``$XDG_STATE_HOME/refine/<journal id>/<node>/`` for PostgreSQL. One method
(``JournalLocation.state_dir``) decides it for the node, its workers, the operator commands and
the dashboard.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from store.errors import StateDirInUseError
from store.goals import Goals
from store.host.processes import ProcessRecord, ProcessRegistry, same_process
from store.journal.api import Journal
from store.journal.locations import STATE_DIR_ENV, JournalLocation
from store.node.scheduler import FORKSERVER_ENV
from tests.helpers.node_env import QUICK, WAIT_FOR_GO, Env
from tests.helpers.waits import wait_until

URL = "postgresql://refine@db.example:5432/refine"


@pytest.fixture(autouse=True)
def no_state_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(STATE_DIR_ENV, raising=False)


def test_a_sqlite_journal_keeps_node_files_beside_its_real_path(tmp_path: Path) -> None:
    real = tmp_path / "real" / "journal.db"
    real.parent.mkdir()
    (tmp_path / "link.db").symlink_to(real)

    assert (
        JournalLocation(tmp_path / "link.db").state_dir("team/a")
        == real.parent / "nodes" / "team%2Fa"
    )
    assert ProcessRegistry(real, "n1").root == real.parent / "nodes" / "n1"
    # One folder per journal: two journals beside each other never share a record file.
    registry = ProcessRegistry(tmp_path / "link.db", "n1", "j-1")
    assert registry.root == real.parent / "nodes" / "n1" / "j-1"
    assert registry.legacy_root == real.parent / "nodes" / "n1"  # records of older versions


def test_a_server_journal_keeps_node_files_per_journal_id_in_the_state_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert JournalLocation(URL).state_dir("a", "j-1") == tmp_path / "xdg" / "refine" / "j-1" / "a"

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for unset in ("", "relative/state"):  # the XDG spec ignores a relative value
        monkeypatch.setenv("XDG_STATE_HOME", unset)
        expected = tmp_path / "home" / ".local" / "state" / "refine" / "j-1" / "a"
        assert JournalLocation(URL).state_dir("a", "j-1") == expected

    with pytest.raises(ValueError, match="journal id"):
        JournalLocation(URL).state_dir("a", None)


def test_the_override_then_the_environment_beat_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = tmp_path / "journal.db"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(STATE_DIR_ENV, "from-env")

    assert JournalLocation(journal).state_dir("n1") == tmp_path / "from-env"  # made absolute
    assert (
        JournalLocation(URL).state_dir("n1", None) == tmp_path / "from-env"
    )  # no journal id needed
    assert JournalLocation(journal).state_dir("n1", override="given") == tmp_path / "given"
    assert ProcessRegistry(journal, "n1", state_dir=tmp_path / "s").logs_dir == tmp_path / "s/logs"
    assert ProcessRegistry(journal, "n1", "j-1").root == tmp_path / "from-env"  # chosen: as is
    assert ProcessRegistry(journal, "n1", "j-1").legacy_root is None


def refine(journal: Path | str, *args: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "refine_tui.cli", "--journal", str(journal), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "REFINE_NODE": "n1", **(env or {})},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def wait_until_done(journal: Path | str, goal: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        goals = json.loads(refine(journal, "goals", "--json"))
        if [g["status"] for g in goals if g["goal_id"] == goal] == ["completed"]:
            return
        time.sleep(0.1)
    raise AssertionError(f"{goal} did not complete")


@pytest.mark.parametrize("how", ["option", "environment"])
def test_the_node_and_its_workers_keep_records_and_logs_in_the_state_dir(
    tmp_path: Path, how: str
) -> None:
    journal, state = tmp_path / "journal.db", tmp_path / "state"
    refine(journal, "init")
    refine(journal, "goal", "add", "--title", "hi", "--id", "hi", "--", "sh", "-c", "echo hello")
    args, env = (
        (["--state-dir", str(state)], {}) if how == "option" else ([], {STATE_DIR_ENV: str(state)})
    )
    node = subprocess.Popen(
        [sys.executable, "-m", "refine_tui.cli", "--journal", str(journal), *args, "node"],
        env={**os.environ, "REFINE_NODE": "n1", **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until_done(journal, "hi")
    finally:
        node.send_signal(signal.SIGTERM)
        node.wait(60)

    assert (state / "logs" / "hi.r1.1.log").read_text().strip() == "hello"
    assert not (tmp_path / "nodes").exists()  # nothing beside the journal


def test_a_node_on_a_postgresql_journal_keeps_its_files_in_the_state_home(
    tmp_path: Path, postgres_url: str
) -> None:
    env = {"XDG_STATE_HOME": str(tmp_path / "xdg")}
    refine(postgres_url, "init")
    refine(
        postgres_url, "goal", "add", "--title", "hi", "--id", "hi", "--", "sh", "-c", "echo hello"
    )
    node = subprocess.Popen(
        [sys.executable, "-m", "refine_tui.cli", "--journal", postgres_url, "node"],
        env={**os.environ, "REFINE_NODE": "n1", **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until_done(postgres_url, "hi")
    finally:
        node.send_signal(signal.SIGTERM)
        node.wait(60)

    (journal_dir,) = (tmp_path / "xdg" / "refine").iterdir()  # one folder: the journal id
    assert (journal_dir / "n1" / "logs" / "hi.r1.1.log").read_text().strip() == "hello"


def test_a_state_dir_that_cannot_be_made_is_one_line_exit_3(tmp_path: Path) -> None:
    """`refine node --state-dir` under a file: STORAGE in one line, not a crash while serving."""
    journal = tmp_path / "journal.db"
    (tmp_path / "a-file").write_text("")
    init = [sys.executable, "-m", "refine_tui.cli", "--journal", str(journal)]
    subprocess.run([*init, "init"], check=True, capture_output=True, timeout=60)
    for state_dir in (tmp_path / "a-file", tmp_path / "a-file" / "\x1b[2Jbelow"):
        proc = subprocess.run(
            [*init, "--state-dir", str(state_dir), "node", "--capacity", "1"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 3, proc.stderr
        assert "STORAGE: cannot create this node's folder" in proc.stderr
        assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1
        assert proc.stderr.startswith("refine: ") and "\x1b" not in proc.stderr  # shown: \\x1b


def test_the_forkserver_rehearsal_never_touches_the_nodes_state_dir(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 21.12: the forkserver rehearses goals r0…r7 on a scratch journal. It did so in
    `$REFINE_STATE_DIR`, and removed `processes/r3.r1.1.json` there: a real goal r3 (what
    `--title R3` derives) lost its record at the node's restart, and Stop refused forever."""
    state = env.dir / "state"
    monkeypatch.setenv(STATE_DIR_ENV, str(state))
    monkeypatch.setenv(FORKSERVER_ENV, "1")
    env.goal("r3", WAIT_FOR_GO)
    first = env.node()
    rec = wait_until(lambda: env.running_record("r3"), what="r3 running with its record")
    first.send_signal(signal.SIGTERM)  # the node ends; its worker runs on
    assert first.wait(timeout=30) == 0

    env.node()  # its forkserver rehearses before it forks anything
    env.goal("after", QUICK)
    wait_until(lambda: env.status("after") == "completed", what="a goal launched by the new node")

    assert env.running_record("r3") == rec, "the restarted node's rehearsal removed r3's record"
    rehearsed = [p.name for p in state.rglob("*") if p.name.startswith(("r0.", "r7.", "rehearsal"))]
    assert rehearsed == [], "the rehearsal wrote into the node's state dir"
    cli = [sys.executable, "-m", "refine_tui.cli", "--journal", str(env.path), "--node", "n1"]
    done = subprocess.run(
        [*cli, "stop", "r3", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["process"] == "exited"
    assert not same_process(rec)


def cli(journal: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`refine --journal J --node n1 ARGS` as it is, whatever its exit code."""
    argv = [sys.executable, "-m", "refine_tui.cli", "--journal", str(journal), "--node", "n1"]
    return subprocess.run([*argv, *args], capture_output=True, text=True, timeout=60)


def test_stop_with_another_state_dir_says_where_it_looked_not_starting(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 21.13: Stop with the wrong `--state-dir` said "starting; try again in a moment" for
    an attempt running for minutes. "Starting" is for a young claim; after that, it says that no
    record is in the folder it names, and where the live worker keeps its records."""
    from store import operator
    from store.errors import NoProcessRecordError
    from store.ops import reads

    right, wrong = env.dir / "right", env.dir / "wrong"
    monkeypatch.setenv(STATE_DIR_ENV, str(right))
    env.goal("g", WAIT_FOR_GO)
    env.node()
    rec = wait_until(lambda: env.running_record("g"), what="g running with its record")

    young = cli(env.path, "--state-dir", str(wrong), "stop", "g")
    assert young.returncode == 1 and "NO_PROCESS_RECORD" in young.stderr
    assert "starting" in young.stderr and str(wrong / "processes") in young.stderr

    monkeypatch.setenv(STATE_DIR_ENV, str(wrong))
    monkeypatch.setattr(reads, "LAUNCH_WINDOW_S", 0.0)  # the claim is now minutes old
    with pytest.raises(NoProcessRecordError) as refused:
        operator.stop_goal(env.journal, "g", node="n1", operator="dana")
    said = refused.value.message
    assert "starting" not in said and "try again" not in said
    assert f"no process record for attempt 1 of run g.r1 in {wrong / 'processes'}" in said
    assert f"its worker (pid {rec.pid}) runs on this machine" in said
    assert f"give this command --state-dir {right}" in said
    assert same_process(rec)  # nothing was signalled

    done = cli(env.path, "--state-dir", str(right), "stop", "g", "--json")
    assert done.returncode == 0, done.stderr


def node_in(journal: Path, state: Path) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "refine_tui.cli", "--journal", str(journal), "--node", "n1"]
    return subprocess.Popen(
        [*argv, "--state-dir", str(state), "node"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def test_one_state_dir_serves_one_journal_a_node_of_another_is_refused(tmp_path: Path) -> None:
    """The decision of issue 21: a state dir (`--state-dir`, `$REFINE_STATE_DIR`) shared by two
    journals is refused at node start. Records and logs are named by run id and epoch, which two
    journals share: the node of one would overwrite, remove and show the other's."""
    state = tmp_path / "state"
    first, second = tmp_path / "one.db", tmp_path / "two.db"
    for journal in (first, second):
        refine(journal, "init")
    node = node_in(first, state)
    try:
        registry = ProcessRegistry(first, "n1", state_dir=state)
        first_id = wait_until(registry.state_dir_journal, what="the state dir reserved")
        # The first node serving: its own files (node.log, node.pid, node.lock) are made.
        # All three: the node opens node.log (warming its forkserver) just after node.pid.
        own = ("node.log", "node.pid", "node.lock")
        wait_until(lambda: all(any(state.rglob(f)) for f in own), what="the first node serving")
        before = sorted(p.relative_to(state) for p in state.rglob("*"))
        refused = cli(second, "--state-dir", str(state), "node")
        assert refused.returncode == 2, refused.stderr
        assert refused.stderr.startswith("refine: STATE_DIR_IN_USE: the state dir")
        assert f"journal {first_id}, not of this journal" in refused.stderr
        assert refused.stderr.count("\n") == 1
        assert sorted(p.relative_to(state) for p in state.rglob("*")) == before  # nothing written

        # Stop on the other journal, pointed at that state dir, says whose it is.
        refine(second, "goal", "add", "--title", "g", "--id", "g", "--", "true")
        with Journal.open(second) as journal:  # claimed, its worker not recorded anywhere
            Goals(journal).start(goal_id="g", node_id="n1", worker="n1/nobody", token="nobody")
        stop = cli(second, "--state-dir", str(state), "stop", "g")
        assert stop.returncode == 1 and f"a state dir of journal {first_id}" in stop.stderr
    finally:
        node.send_signal(signal.SIGTERM)
        node.wait(60)
    again = node_in(first, state)  # the same journal's node is welcome back
    try:
        refine(first, "goal", "add", "--title", "hi", "--id", "hi", "--", "true")
        wait_until_done(first, "hi")
    finally:
        again.send_signal(signal.SIGTERM)
        again.wait(60)


def test_a_state_dir_is_reserved_by_one_journal_and_never_loses_anothers_records(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    theirs = ProcessRegistry(tmp_path / "j.db", "n1", "journal-a", state_dir=state)
    ours = ProcessRegistry(tmp_path / "j.db", "n1", "journal-b", state_dir=state)
    rec = ProcessRecord.for_current_process(
        node_id="n1", run_id="r3.r1", epoch=1, worker="n1/t", log_path="x", journal_id="journal-a"
    )
    theirs.record(rec)  # as a version before reservations left it
    assert ours.get("r3.r1", 1) is None
    assert not ours.remove("r3.r1", 1) and theirs.get("r3.r1", 1) == rec  # not ours to forget
    with pytest.raises(StateDirInUseError, match="journal journal-a, not of this journal"):
        ours.reserve()  # its record says whose the state dir is
    assert ours.state_dir_journal() is None  # a refusal writes nothing

    theirs.reserve()
    theirs.reserve()  # again, as at every start of its node
    assert theirs.state_dir_journal() == "journal-a"
    assert theirs.remove("r3.r1", 1) and theirs.get("r3.r1", 1) is None
    with pytest.raises(StateDirInUseError):
        ours.reserve()  # no record left, the reservation says it


def test_a_node_whose_journal_file_becomes_another_journal_launches_nothing_in_its_state_dir(
    tmp_path: Path,
) -> None:
    """The node follows a journal file replaced under it (a restore). Replaced by another
    journal (another id), its state dir is the first journal's: the node launches nothing there
    and says why, on every look, until it is started with a state dir of that journal's."""
    journal, other, state = tmp_path / "journal.db", tmp_path / "other.db", tmp_path / "state"
    refine(journal, "init")
    refine(other, "init")
    refine(other, "goal", "add", "--title", "g", "--id", "g", "--", "true")
    err = tmp_path / "node.err"
    with open(err, "wb") as out:
        node = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "store.node.scheduler",
                "--journal",
                str(journal),
                "--node",
                "n1",
            ],
            env={**os.environ, STATE_DIR_ENV: str(state)},
            stdout=subprocess.DEVNULL,
            stderr=out,
        )
    try:
        wait_until(
            ProcessRegistry(journal, "n1", state_dir=state).state_dir_journal, what="reserved"
        )
        os.replace(other, journal)
        wait_until(lambda: "STATE_DIR_IN_USE" in err.read_text(), what="the refusal", timeout=30)
        with Journal.open(journal, read_only=True) as replaced:
            assert Goals(replaced).read("g").status == "queued"  # type: ignore[union-attr]
        assert not (state / "processes").exists() or not list((state / "processes").iterdir())
    finally:
        node.send_signal(signal.SIGTERM)
        node.wait(60)
