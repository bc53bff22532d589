"""`refine demo`: its orphan is honest and quitting leaves the journal truthful (real node)."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path

from refine_tui.demo import DEMO_NODE, finish, populate, start_node, stop_node
from store.host.processes import node_workers, same_process
from store.journal.locations import resolve_location
from store.journal.sqlite import Journal
from store.model.goals import Goals
from store.ops.operator import cleanup_evidence
from tests.helpers.registry import node_registry
from tests.helpers.terminal import on_a_terminal
from tests.helpers.waits import wait_until


def test_the_orphan_really_ran_and_its_log_is_not_backdated(tmp_path: Path) -> None:
    """Issue 13.6: "last output 43 min ago" above "started 2m07s ago"."""
    path = populate(tmp_path / "journal.db", live=False)
    log = node_registry(path, DEMO_NODE).log_path("nightly-report.r1", 1)
    assert log.read_text() == "loading sales for 2026-11-28\nquerying warehouse…\n"
    with Journal.open(path) as journal:
        evidence = cleanup_evidence(journal, "nightly-report.r1", epoch=1, node=DEMO_NODE)
    assert evidence.attempt_started_at is not None
    assert os.stat(log).st_mtime >= evidence.attempt_started_at - 1  # written after the claim
    assert str(evidence.sentence).startswith(f"no process record on node {DEMO_NODE}")
    assert evidence.last_output_age_s is not None and evidence.last_output_age_s < 60


def test_quitting_the_demo_stops_and_records_what_it_started(tmp_path: Path) -> None:
    """Issue 13.7: after quitting, `refine goals` still said soak-test running."""
    path = populate(tmp_path / "journal.db")
    registry = node_registry(path, DEMO_NODE)
    node = start_node(path, DEMO_NODE)
    try:
        wait_until(lambda: any(r.run_id == "soak-test.r1" for r in registry.all()), 30.0)
        records = registry.all()
    finally:
        stop_node(node)
    lines = finish(path, DEMO_NODE, "dana")
    assert any(line.startswith("stopped soak-test: requeued") for line in lines), lines
    assert not any(same_process(r) for r in records)  # every worker it started is gone
    with Journal.open(path, read_only=True) as journal:
        goals = Goals(journal)
        running = {g.goal_id for g in goals.list(status="running")}
        assert goals.read("soak-test").status == "queued"
    assert running == {"nightly-report", "gpu-train"}  # the orphan and another node's goal
    assert any(
        "nightly-report is still running" in line and "cleanup nightly-report.r1 --epoch 1" in line
        for line in lines
    ), lines


def test_the_goodbye_says_cancel_ends_work_and_cleanup_confirms_a_silent_attempt(
    tmp_path: Path,
) -> None:
    """Issue 24.6: it offered `cleanup gpu-train.r1 --epoch 1` "to end it", which requeues the
    goal for node n2 (that never runs here). The commands it gives are run as given."""
    import shlex
    import subprocess

    path = populate(tmp_path / "journal.db", live=False)
    lines = {line.split()[0]: line for line in finish(path, DEMO_NODE, "dana")}
    assert set(lines) == {"nightly-report", "gpu-train"}

    def given(line: str, verb: str) -> list[str]:
        command = next(c for c in line.split("`")[1::2] if f" {verb} " in c)
        return shlex.split(command.replace("TEXT", "'not needed'"))

    def run(argv: list[str]) -> None:
        env = {**os.environ, "REFINE_NODE": DEMO_NODE, "REFINE_OPERATOR": "dana"}
        argv = [sys.executable, "-m", "refine_tui.cli", *argv[1:]]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
        assert done.returncode == 0, done.stderr

    other = lines["gpu-train"]
    assert "to end it" not in other and "on node n2" in other
    assert "cancel gpu-train --reason TEXT` ends the goal" in other
    assert "cleanup gpu-train.r1 --epoch 1` confirms its attempt ended once you know" in other
    run(given(other, "cancel"))
    orphan = lines["nightly-report"]
    assert "cleanup nightly-report.r1 --epoch 1` confirms its attempt ended" in orphan
    assert "cancel nightly-report --reason TEXT` ends the goal" in orphan
    run(given(orphan, "cleanup"))
    with Journal.open(path, read_only=True) as journal:
        goals = Goals(journal)
        assert goals.read("gpu-train").status == "cancelled"  # type: ignore[union-attr]
        assert goals.read("nightly-report").status == "queued"  # type: ignore[union-attr]


def test_quitting_while_its_workers_are_still_starting_stops_them_too(tmp_path: Path) -> None:
    """Quit at once: workers launched before the node stopped record themselves only later (on
    a busy machine); the demo Stopped only the recorded ones and left the rest running."""
    path = populate(tmp_path / "journal.db")
    journal = str(resolve_location(path))
    node = start_node(path, DEMO_NODE)
    try:
        wait_until(lambda: node_workers(journal, DEMO_NODE), 30.0, what="a launched worker")
    finally:
        stop_node(node)
    try:
        lines = finish(path, DEMO_NODE, "dana")
        assert node_workers(journal, DEMO_NODE) == [], lines
    finally:  # a failure must not leave them running
        for proc in node_workers(journal, DEMO_NODE):
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
    with Journal.open(path, read_only=True) as j:
        running = {g.goal_id for g in Goals(j).list(status="running")}
    assert running == {"nightly-report", "gpu-train"}, lines


async def test_the_demo_marks_only_its_orphan_while_the_node_starts_goals(tmp_path: Path) -> None:
    """A goal the node has just claimed has no process record for a moment: the dashboard
    showed it `needs cleanup` until its next look (up to 5 s; 3 rows at once in the demo).
    Room for every live goal: all 7 are claimed in one burst (the demo's 4 slots start the last
    one only after ≈ 16 s of recipes)."""
    from refine_tui.app import RefineApp

    path = populate(tmp_path / "journal.db")
    node = start_node(path, DEMO_NODE, capacity=8)
    app = RefineApp(journal=path, node=DEMO_NODE)
    marked: set[str] = set()
    try:
        async with app.run_test(size=(80, 24)) as pilot:

            def look() -> int:
                marked.update(g for g, r in app.goal_rows.items() if r.needs_cleanup)
                return sum(r.status in ("running", "completed") for r in app.goal_rows.values())

            deadline = time.monotonic() + 60
            while look() < 11:  # the demo's 4 running or done, and its 7 live goals started
                assert time.monotonic() < deadline, "the node did not start the demo's goals"
                await pilot.pause(0.02)
            for _ in range(50):  # and a while after
                look()
                await pilot.pause(0.02)
            # Still marked once the node is live: it holds its lock in the dashboard's state
            # dir (run without it, the node's records counted as kept elsewhere: none marked).
            await pilot.pause(2.2)  # HERE_FOR_S: read again at the next read
            await pilot.press("r")
            await pilot.pause(0.5)
            assert app.goal_rows["nightly-report"].needs_cleanup
    finally:
        stop_node(node)
        finish(path, DEMO_NODE, "dana")
    assert marked == {"nightly-report"}


def test_closing_the_demos_terminal_ends_it_and_its_node(tmp_path: Path) -> None:
    """The demo's window closed: the dashboard, the node and its workers end, and the demo
    exits (its goodbye lines had no terminal to go to: an I/O error, and a process left
    spinning on the hung-up terminal)."""
    folder = tmp_path / "demo"
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", os.getcwd())}
    argv = [sys.executable, "-m", "refine_tui.cli", "demo", "--dir", str(folder)]
    journal = str(resolve_location(folder / "journal.db"))
    with on_a_terminal(argv, env) as terminal:
        wait_until(lambda: terminal.shows("soak-test"), 60.0, what="the dashboard")
        wait_until(lambda: node_workers(journal, DEMO_NODE), 30.0, what="a launched worker")
        terminal.close_window()
        wait_until(lambda: terminal.proc.poll() is not None, 30.0, what="the demo to end")
    assert terminal.proc.returncode == 0
    assert node_workers(journal, DEMO_NODE) == []
    with Journal.open(folder / "journal.db", read_only=True) as j:
        assert Goals(j).read("soak-test").status != "running"


def test_quitting_after_the_journal_was_deleted_still_ends_its_workers(tmp_path: Path) -> None:
    """The demo's journal deleted while it ran: quitting raised STORAGE at the first Stop and
    left every worker (soak-test's endless recipe among them) running for ever."""
    import subprocess

    path = populate(tmp_path / "journal.db", live=False)
    journal = str(resolve_location(path))
    argv = ["-c", "import time; time.sleep(120)", "store.worker", "--journal", journal]
    worker = subprocess.Popen([sys.executable, *argv, "--node", DEMO_NODE], start_new_session=True)
    try:
        wait_until(lambda: any(p.pid == worker.pid for p in node_workers(journal, DEMO_NODE)))
        for name in os.listdir(tmp_path):
            if name.startswith("journal.db"):
                os.remove(tmp_path / name)
        lines = finish(path, DEMO_NODE, "dana")
        assert worker.wait(timeout=30) is not None  # ended by finish, not by this test
        assert any("nothing recorded" in line for line in lines), lines
    finally:
        with contextlib.suppress(ProcessLookupError):
            worker.kill()
        worker.wait()


def test_quitting_after_the_journal_was_deleted_does_not_say_it_was_kept(tmp_path: Path) -> None:
    """The demo's journal deleted while it ran: quitting still said "demo journal kept at …"."""
    folder = tmp_path / "demo"
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", os.getcwd())}
    argv = [sys.executable, "-m", "refine_tui.cli", "demo", "--dir", str(folder)]
    with on_a_terminal(argv, env) as terminal:
        wait_until(lambda: terminal.shows("soak-test"), 60.0, what="the dashboard")
        for name in os.listdir(folder):
            if name.startswith("journal.db"):
                os.remove(folder / name)
        wait_until(lambda: terminal.shows("journal missing"), 60.0, what="the missing journal")
        os.write(terminal.controller, b"q")
        wait_until(lambda: terminal.proc.poll() is not None, 60.0, what="the demo to end")
        gone = f"demo journal {folder / 'journal.db'} is gone"
        wait_until(lambda: terminal.shows(gone), 10.0, what="its goodbye")
        assert not terminal.shows("kept at")
    assert terminal.proc.returncode == 0
