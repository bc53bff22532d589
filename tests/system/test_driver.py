"""The dashboard's terminal driver (refine_tui/driver.py): a real `refine tui` under tmux.

Its input thread sleeps until there is input (Textual's own wakes every 100 ms): counted in the
thread's voluntary context switches, never timed. Keys still work, a lone escape included (it
is recognised after the parser's timeout), and q still quits.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from store.journal.sqlite import Journal
from store.model.goals import Goals
from tests.helpers.terminal import on_a_terminal
from tests.helpers.waits import wait_until

NODE = "n1"
needs_tmux = pytest.mark.skipif(
    shutil.which("tmux") is None and not os.environ.get("CI"), reason="no tmux"
)


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], check=True, capture_output=True, text=True).stdout


def screen(session: str) -> str:
    return tmux("capture-pane", "-p", "-t", session)


def background_wakeups(pid: int) -> int:
    """Voluntary context switches of the dashboard's threads but the main one (each wake-up
    is one). Python does not name its threads for the OS: the input thread is among them."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        if task.name == str(pid):
            continue  # the event loop: its timers (the 1 s tick) wake it
        status = (task / "status").read_text().splitlines()
        line = next(s for s in status if s.startswith("voluntary_ctxt_switches"))
        total += int(line.split()[1])
    return total


def dashboard_pid(pane_pid: int) -> int:
    proc = psutil.Process(pane_pid)
    found = wait_until(
        lambda: [p for p in (proc, *proc.children(True)) if "refine_tui.cli" in p.cmdline()],
        what="the dashboard process",
    )
    return found[0].pid


def exited(pid: int) -> bool:
    """Gone, or a zombie: it has ended, and reaping it is its parent's (tmux's) business (a
    tmux server once left a quit dashboard unreaped for over 20 s, in CI and here)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@needs_tmux
def test_input_thread_sleeps_until_a_key_and_keys_still_work(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    with Journal.open(path) as j:
        for gid in ("alpha", "beta"):
            Goals(j).create(goal_id=gid, title=gid, node_id=NODE, argv=["true"])
    session = f"driver{os.getpid()}"
    env = f"PYTHONPATH={os.environ.get('PYTHONPATH', os.getcwd())}"
    command = f"{env} {sys.executable} -m refine_tui.cli --journal {path} --node {NODE} tui"
    here = os.getcwd()  # python -m imports from the working directory first
    pane = tmux("new-session", "-d", "-P", "-F", "#{pane_pid}", "-s", session, "-c", here, command)
    try:
        wait_until(lambda: "alpha" in screen(session) and "live" in screen(session))
        pid = dashboard_pid(int(pane))
        time.sleep(2.0)  # after the first paint: the index build, the first process look
        before = background_wakeups(pid)
        time.sleep(2.0)  # Textual's input thread, polling every 100 ms, wakes ≈ 20 times
        assert background_wakeups(pid) - before <= 5
        tmux("send-keys", "-t", session, "/")
        wait_until(lambda: "filter goals:" in screen(session), what="the filter box")
        tmux("send-keys", "-t", session, "-l", "beta")
        tmux("send-keys", "-t", session, "Enter")
        wait_until(
            lambda: "filter “beta”" in (shown := screen(session)) and "alpha" not in shown,
            what="the filter applied",
        )
        tmux("send-keys", "-t", session, "/")
        wait_until(lambda: "▔▔▔" in screen(session), what="the filter box again")
        tmux("send-keys", "-t", session, "Escape")  # a lone escape: clears the filter
        wait_until(lambda: "alpha" in screen(session), what="the filter cleared by escape")
        tmux("send-keys", "-t", session, "q")
        wait_until(lambda: exited(pid), what="q to quit")
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


def test_the_dashboard_ends_when_its_terminal_goes_away(tmp_path: Path) -> None:
    """A closed terminal window (the pty's other end gone, no SIGHUP: not its controlling
    terminal) ends the dashboard: it had kept running, its input thread spinning on the hung-up
    terminal at ≈ 40 % of a core, found by closing a tmux session."""
    path = tmp_path / "journal.db"
    with Journal.open(path) as j:
        Goals(j).create(goal_id="alpha", title="alpha", node_id=NODE, argv=["true"])
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", os.getcwd())}
    command = [sys.executable, "-m", "refine_tui.cli", "--journal", str(path), "--node", NODE]
    with on_a_terminal([*command, "tui"], env) as terminal:
        wait_until(lambda: terminal.shows("alpha"), what="the first paint")
        terminal.close_window()
        wait_until(lambda: terminal.proc.poll() is not None, what="the dashboard to end")
