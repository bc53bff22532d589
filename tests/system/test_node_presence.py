"""Node presence with real `refine node` processes, and `refine cleanup --node` (DESIGN §14).

Each test runs on both backends (a SQLite file, the session's real PostgreSQL server). Nodes
are real `refine node` processes; a machine that dies is a PID namespace killed whole
(``unshare --pid --fork --mount-proc --kill-child``: SIGKILL the ``unshare`` and the kernel ends
its node, workers and recipes at once, nobody reporting). Every command is the real `refine` in
a subprocess; every exit code and refusal line is checked as an operator would see it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil
import pytest

from store.journal.api import Journal
from store.journal.presence import refine_version
from tests.helpers.hosts import required
from tests.helpers.node_env import HANG, ours, ours_running
from tests.helpers.waits import wait_until

PY = sys.executable
REFINE = [PY, "-m", "refine_tui.cli"]
MACHINE = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", "--"]


class Nodes:
    """One journal, the `refine` CLI on it, and the nodes a test starts (killed at the end)."""

    def __init__(self, location: str, tmp_path: Path) -> None:
        self.location, self.dir = location, tmp_path
        self.started: list[subprocess.Popen[bytes]] = []
        Journal.open(location).close()

    def refine(
        self, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*REFINE, "--journal", self.location, *args],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "REFINE_OPERATOR": "dana", **(env or {})},
        )

    def ok(self, *args: str) -> str:
        done = self.refine(*args)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def nodes(self) -> dict[str, dict[str, Any]]:
        return {n["node_id"]: n for n in json.loads(self.ok("nodes", "--json"))}

    def state(self, node_id: str) -> str | None:
        node = self.nodes().get(node_id)
        return node["state"] if node else None

    def goals(self) -> dict[str, str]:
        return {g["goal_id"]: g["status"] for g in json.loads(self.ok("goals", "--json"))}

    def add(self, goal_id: str, node_id: str, *options: str) -> None:
        self.ok(
            "--node", node_id, "goal", "add", "--title", goal_id, "--id", goal_id, *options,
            "--", PY, "-c", HANG, str(self.dir),
        )  # fmt: skip

    def start_node(
        self, node_id: str, heartbeat_s: float, *, machine: bool = False
    ) -> subprocess.Popen[bytes]:
        """`refine node` (``machine``: as the only node of a PID namespace of its own)."""
        argv = [*REFINE, "--journal", self.location, "--node", node_id, "node"]
        argv += ["--heartbeat", str(heartbeat_s)]
        log = open(self.dir / f"node-{node_id}.log", "ab")  # noqa: SIM115
        with log:
            proc = subprocess.Popen(
                [*MACHINE, *argv] if machine else argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        self.started.append(proc)
        return proc

    def sequence(self) -> tuple[int, list[Any]]:
        """What the journal holds: its last sequence and every Goal (no command may change it)."""
        with Journal.open(self.location, read_only=True) as journal:
            return journal.last_sequence(), journal.aggregates("goal")

    def close(self) -> None:
        for proc in self.started:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        for marker in (str(self.dir), self.location):
            for proc in ours(marker):
                with contextlib.suppress(ProcessLookupError, psutil.Error):
                    os.killpg(os.getpgid(proc.pid), signal.SIGKILL)
        wait_until(lambda: not ours(str(self.dir)), timeout=30, what="no leftover processes")


@pytest.fixture
def fleet(journal_location: str, tmp_path: Path) -> Iterator[Nodes]:
    nodes = Nodes(journal_location, tmp_path)
    try:
        yield nodes
    finally:
        nodes.close()


def one_line(text: str) -> str:
    assert text.count("\n") == 1 and text.endswith("\n"), text
    return text.strip()


def machines_available() -> None:
    """A PID namespace needs root and unshare: fail where required (CI), else skip."""
    if os.geteuid() == 0 and shutil.which("unshare"):
        return
    why = "killing a machine whole needs root and unshare (a PID namespace)"
    pytest.fail(why) if required() else pytest.skip(why)


# --- presence ----------------------------------------------------------------------------------


def test_a_running_node_is_live_and_after_a_clean_exit_stopped_with_nothing_to_clean(
    fleet: Nodes,
) -> None:
    node = fleet.start_node("n1", 0.5)
    wait_until(lambda: fleet.state("n1") == "live", 60, "n1 live")
    shown = fleet.nodes()["n1"]
    assert shown["host"] == os.uname().nodename and shown["version"] == refine_version()
    assert (shown["running"], shown["capacity"], shown["heartbeat_s"]) == (0, 4, 0.5)
    seen = datetime.fromisoformat(shown["last_seen"].replace("Z", "+00:00"))
    assert shown["last_seen"].endswith("Z") and seen.utcoffset() is not None
    assert shown["stopped_at"] is None
    header, line = fleet.ok("nodes").splitlines()
    assert header.split()[:3] == ["NODE", "STATE", "LAST"] and line.split()[:2] == ["n1", "live"]

    node.send_signal(signal.SIGTERM)
    assert node.wait(timeout=60) == 0
    stopped = fleet.nodes()["n1"]
    assert stopped["state"] == "stopped" and stopped["stopped_at"] == stopped["last_seen"]

    before = fleet.sequence()
    for _ in range(2):  # running it again is harmless
        done = fleet.refine("cleanup", "--node", "n1")
        assert done.returncode == 0, done.stderr
        assert "nothing left to confirm" in one_line(done.stdout)
    assert json.loads(fleet.ok("cleanup", "--node", "n1", "--json")) == []
    assert fleet.sequence() == before


def test_cleanup_of_a_live_node_is_refused_in_one_line_and_writes_nothing(fleet: Nodes) -> None:
    fleet.add("g1", "n1")
    fleet.start_node("n1", 1.0)
    wait_until(lambda: fleet.goals()["g1"] == "running", 60, "g1 running")
    wait_until(lambda: fleet.state("n1") == "live", 60, "n1 live")
    before = fleet.sequence()
    done = fleet.refine("--node", "op", "cleanup", "--node", "n1")
    assert done.returncode == 1 and done.stdout == ""
    assert one_line(done.stderr).startswith("refine: NODE_LIVE: node n1 is live")
    done = fleet.refine("cleanup", "--node", "n1", "--json")
    assert done.returncode == 1 and "NODE_LIVE" in one_line(done.stderr)
    assert json.loads(done.stdout)["error"]["code"] == "NODE_LIVE"  # issue 24.10
    assert fleet.sequence() == before and fleet.goals()["g1"] == "running"


def test_cleanup_of_an_unknown_node_is_bad_input_naming_it(fleet: Nodes) -> None:
    fleet.add("g1", "n1")  # n1 has a goal: known, though it never beat
    before = fleet.sequence()
    done = fleet.refine("cleanup", "--node", "ghost")
    assert done.returncode == 2 and done.stdout == ""
    assert one_line(done.stderr).startswith("refine: NODE_NOT_FOUND: no node ghost")
    for usage in (["cleanup"], ["cleanup", "--node", "n1", "--epoch", "1"], ["cleanup", "g1.r1"]):
        done = fleet.refine(*usage)
        assert done.returncode == 2 and one_line(done.stderr).startswith("refine: USAGE: ")
    done = fleet.refine("cleanup", "--node", "n1")  # known, nothing runs there
    assert done.returncode == 0 and "nothing left" in done.stdout
    assert fleet.sequence() == before
    assert fleet.nodes()["n1"]["state"] == "unknown"


def test_a_bad_heartbeat_interval_is_refused_before_the_node_starts(fleet: Nodes) -> None:
    done = fleet.refine("node", "--heartbeat", "0")
    assert done.returncode == 2 and one_line(done.stderr).startswith("refine: USAGE: ")
    done = fleet.refine("--node", "n1", "node", env={"REFINE_HEARTBEAT_S": "soon"})
    assert done.returncode == 2 and "REFINE_HEARTBEAT_S" in one_line(done.stderr)
    assert "n1" not in fleet.nodes()


# --- a machine dies --------------------------------------------------------------------------


def test_a_machine_killed_whole_turns_silent_its_goals_wait_for_cleanup_by_node(
    fleet: Nodes,
) -> None:
    """The dead-machine story: its node silent while the other stays live; its goals still
    running (time ends nothing) until the operator confirms the node's cleanup; then each
    follows its redelivery rule and the journal checks clean."""
    machines_available()
    fleet.add("safe", "dead")
    fleet.add("careful", "dead", "--redelivery", "operator")
    fleet.add("other", "alive")
    machine = fleet.start_node("dead", 0.3, machine=True)
    fleet.start_node("alive", 2.0)
    wait_until(lambda: set(fleet.goals().values()) == {"running"}, 90, "every goal running")
    wait_until(lambda: fleet.state("dead") == fleet.state("alive") == "live", 60, "both live")

    machine.kill()  # the machine loses power: its node, workers and recipes end at once
    machine.wait(timeout=30)
    wait_until(lambda: fleet.state("dead") == "silent", 60, "the dead node silent")
    nodes = fleet.nodes()
    assert nodes["alive"]["state"] == "live"
    assert (nodes["dead"]["running"], nodes["alive"]["running"]) == (2, 1)
    assert fleet.goals() == {"safe": "running", "careful": "running", "other": "running"}

    done = fleet.refine("--node", "op", "cleanup", "--node", "dead", "--json")
    assert done.returncode == 0, done.stderr
    reports = {r["goal_id"]: r for r in json.loads(done.stdout)}
    assert {g: (r["outcome"], r["epoch"]) for g, r in reports.items()} == {
        "safe": ("requeued", 1),
        "careful": ("held", 1),
    }
    last_beat = fleet.nodes()["dead"]["last_seen"]
    for goal_id in reports:
        (run,) = json.loads(fleet.ok("runs", goal_id, "--json"))
        cleanup = run["attempts"][0]["cleanup"]
        assert cleanup["confirmed_by"] == "dana@op"
        assert cleanup["method"] == f"operator-confirmed: node dead silent, last beat {last_beat}"
    assert fleet.goals() == {"safe": "queued", "careful": "held", "other": "running"}
    assert fleet.state("alive") == "live"  # presence never touched the other node's work
    check = fleet.refine("check")
    assert check.returncode == 0 and "clean" in check.stdout

    done = fleet.refine("cleanup", "--node", "dead")  # again: harmless
    assert done.returncode == 0 and "nothing left to confirm" in one_line(done.stdout)

    # The other machine picks the work up once it is moved there; the held goal stays held.
    moved = fleet.refine("reassign", "--node", "dead", "--status", "queued,held", "--to", "alive")
    assert moved.returncode == 0, moved.stderr
    assert moved.stdout.splitlines()[0] == (
        "Reassign 2 goals to node alive: 1 queued, 1 held (it stays held until released)"
    )
    wait_until(lambda: fleet.goals()["safe"] == "running", 60, "safe running on node alive")
    assert fleet.goals()["careful"] == "held"
    assert fleet.nodes()["alive"]["running"] == 2
    assert fleet.refine("check").returncode == 0


def test_a_stopped_nodes_live_worker_refuses_its_attempt_until_it_is_gone(fleet: Nodes) -> None:
    """A node that exits cleanly leaves its workers running: on their machine, cleanup --node
    refuses each attempt whose worker is alive (exit 1, one line, nothing written); once the
    work has ended, the same command confirms it."""
    fleet.add("g1", "n1")
    node = fleet.start_node("n1", 0.5)
    wait_until(lambda: fleet.goals()["g1"] == "running", 60, "g1 running")
    node.send_signal(signal.SIGTERM)
    assert node.wait(timeout=60) == 0
    assert fleet.state("n1") == "stopped" and fleet.nodes()["n1"]["running"] == 1

    before = fleet.sequence()
    done = fleet.refine("cleanup", "--node", "n1", "--json")
    assert done.returncode == 1
    (report,) = json.loads(done.stdout)
    assert (report["goal_id"], report["outcome"]) == ("g1", "refused")
    assert one_line(done.stderr).startswith(
        "refine: PROCESS_ALIVE: 1 of 1 attempts of node n1 not confirmed; first: the worker"
    )
    assert fleet.sequence() == before

    workers = ours_running(fleet.location, "store.worker")
    assert workers
    for worker in workers:  # the work ends (its group: the worker and its recipe)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(os.getpgid(worker.pid), signal.SIGKILL)
    wait_until(
        lambda: not ours_running(fleet.location, "store.worker"),
        30,
        "the worker gone",
    )
    done = fleet.refine("cleanup", "--node", "n1")
    assert done.returncode == 0, done.stderr
    assert "the goal is requeued" in done.stdout
    assert fleet.goals()["g1"] == "queued"


def test_after_run_the_node_option_is_still_this_nodes_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`refine cleanup RUN --epoch E --node X`: X is the operator's node, as it always was."""
    from refine_tui.cli import main
    from store.goals import Goals

    monkeypatch.setenv("REFINE_OPERATOR", "dana")
    path = tmp_path / "journal.db"
    with Journal.open(path) as journal:
        goals = Goals(journal)
        goals.create(goal_id="g", title="G", node_id="n1", argv=["true"])
        goals.start(goal_id="g", node_id="n1", worker="n1/t1", token="t1")
    code = main(["--journal", str(path), "cleanup", "g.r1", "--epoch", "1", "--node", "n1"])
    assert code == 0, capsys.readouterr().err
    with Journal.open(path, read_only=True) as journal:
        goals = Goals(journal)
        run = goals.current_run(goals.read("g"))  # type: ignore[arg-type]
        assert run is not None and run.attempts[0].cleanup["confirmed_by"] == "dana@n1"


# --- one node of a name (issue 24.12) ----------------------------------------------------------


def node_log(fleet: Nodes, node_id: str) -> str:
    path = fleet.dir / f"node-{node_id}.log"
    return path.read_text(errors="replace") if path.exists() else ""


def test_a_node_says_where_it_runs_in_one_line_when_it_starts(fleet: Nodes) -> None:
    fleet.start_node("n1", 0.5)
    wait_until(lambda: "refine node: " in node_log(fleet, "n1"), 60, "the start line")
    line = next(ln for ln in node_log(fleet, "n1").splitlines() if ln.startswith("refine node:"))
    with Journal.open(fleet.location, read_only=True) as journal:
        shown, journal_id = journal.location, journal.journal_id
    assert line.startswith(f"refine node: node n1 on journal {shown}, state dir ")
    assert str(journal_id) in line and line.endswith(", capacity 4, heartbeat 0.5 s")
    password = urllib.parse.urlsplit(fleet.location).password  # the server's: scram
    assert password is None or password not in line


def test_a_second_node_of_the_same_name_is_refused_unless_forced(fleet: Nodes) -> None:
    first = fleet.start_node("n1", 0.5)
    wait_until(lambda: fleet.state("n1") == "live", 60, "n1 live")
    done = fleet.refine("--node", "n1", "node", "--heartbeat", "0.5")
    assert done.returncode == 1 and done.stdout == ""
    assert one_line(done.stderr).startswith(
        "refine: NODE_LIVE: node n1 already runs on this machine for this journal"
        f" (pid {first.pid})"
    )
    assert first.poll() is None  # the first one serves on
    forced = subprocess.Popen(
        [*REFINE, "--journal", fleet.location, "--node", "n1", "node", "--force"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    fleet.started.append(forced)
    assert forced.stderr is not None
    assert forced.stderr.readline().startswith(b"refine node: node n1 on journal ")


def test_a_live_node_of_the_name_on_another_machine_is_refused_unless_forced(
    fleet: Nodes,
) -> None:
    from store.journal.presence import Beat

    with Journal.open(fleet.location) as journal:  # node n2 beats from machine "far" (an hour)
        journal.write_presence(Beat("n2", "start", "far", 4, refine_version(), 3600.0))
    before = fleet.sequence()
    done = fleet.refine("--node", "n2", "node")
    assert done.returncode == 1 and done.stdout == ""
    assert one_line(done.stderr).startswith(
        "refine: NODE_LIVE: node n2 is live on this journal from host far (last beat "
    )
    assert "--force" in done.stderr and fleet.sequence() == before
    argv = [*REFINE, "--journal", fleet.location, "--node", "n2", "node", "--force"]
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, start_new_session=True)
    fleet.started.append(proc)
    assert proc.stderr is not None
    assert proc.stderr.readline().startswith(b"refine node: node n2 on journal ")


def test_a_node_killed_here_starts_again_at_once_though_its_beat_looks_live(
    fleet: Nodes,
) -> None:
    """Its last beat is fresh (live for three intervals) but its lock went with it."""
    first = fleet.start_node("n1", 60.0)
    wait_until(lambda: fleet.state("n1") == "live", 60, "n1 live")
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(timeout=30)
    assert fleet.state("n1") == "live"
    again = fleet.start_node("n1", 60.0)
    wait_until(lambda: node_log(fleet, "n1").count("refine node: node n1") == 2, 60, "restart")
    assert again.poll() is None and "NODE_LIVE" not in node_log(fleet, "n1")
