"""Shared pieces of the fault, soak and load tests: recipes, decoys, a lock holder, workers.

Every recipe is ``python -c CODE MARKER ...``: the marker (a path unique to one test) is in the
command line of every process a recipe starts, so the test can find any process of ours that is
still running at the end, grandchildren included (they inherit the command line).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil

from tests.helpers.waits import wait_until

JOURNAL_ENV = "REFINE_JOURNAL"  # how a node hands a worker its journal (store.node.worker)

ROOT = Path(__file__).resolve().parents[2]

# argv[1] is the marker; argv[2] a directory where each process writes its pid.
_PRELUDE = """
import os, signal, sys, time
marker, pids = sys.argv[1], sys.argv[2]
def note():
    open(os.path.join(pids, str(os.getpid())), "w").close()
note()
"""

RECIPE_CODE = {
    "succeed": "time.sleep(0.3)",
    "fail": "time.sleep(0.3); sys.exit(3)",
    "hang": "time.sleep(3600)",
    "ignore-term": "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(3600)",
    # Two grandchildren that ignore SIGTERM; only the process group's SIGKILL ends them.
    "grandchildren": """
for _ in range(2):
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        note()
        time.sleep(3600)
        os._exit(0)
time.sleep(3600)
""",
}


def recipe_argv(kind: str, marker: str, pids_dir: Path) -> list[str]:
    """The argv of a recipe of ``kind`` (see RECIPE_CODE)."""
    pids_dir.mkdir(parents=True, exist_ok=True)
    return [sys.executable, "-c", _PRELUDE + RECIPE_CODE[kind], marker, str(pids_dir)]


def ours(marker: str) -> list[psutil.Process]:
    """Every live (non-zombie) process whose command line holds ``marker``, or whose journal
    (``$REFINE_JOURNAL``: how a node hands a worker its journal, never argv) does."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        with contextlib.suppress(psutil.Error):
            if proc.info["status"] == psutil.STATUS_ZOMBIE or proc.pid == os.getpid():
                continue
            if holds(proc, proc.info["cmdline"], marker):
                found.append(proc)
    return found


def holds(proc: psutil.Process, cmdline: list[str] | None, marker: str) -> bool:
    if any(marker in arg for arg in cmdline or ()):
        return True
    with contextlib.suppress(psutil.Error):
        return marker in proc.environ().get(JOURNAL_ENV, "")
    return False


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_for(predicate: Callable[[], object], timeout: float = 10.0, what: str = "") -> object:
    """Poll until ``predicate()`` is truthy; AssertionError after ``timeout`` seconds."""
    return wait_until(predicate, timeout, what or str(predicate), step=0.02)


# --- a journal locked by a long writer ---------------------------------------------------------

_LOCK_HOLDER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.read()
conn.execute("ROLLBACK")
"""


@contextlib.contextmanager
def write_locked(path: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process holds the journal's write lock (BEGIN IMMEDIATE) inside the block."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _LOCK_HOLDER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdin is not None
    try:
        assert proc.stdout.readline().strip() == "locked"
        yield proc
    finally:
        proc.stdin.close()
        proc.wait(timeout=10)
        proc.stdout.close()


# --- decoys: processes outside our records that must never be signalled ------------------------

_DECOY = """
import os, signal, sys, time
log = sys.argv[1]
def seen(signum, frame):
    with open(log, "a") as f:
        f.write(signal.Signals(signum).name + "\\n")
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2,
          signal.SIGQUIT, signal.SIGCONT):
    signal.signal(s, seen)
open(log, "a").close()
print("ready", flush=True)
while True:
    time.sleep(3600)
"""


class Decoys:
    """A few processes in their own sessions that log every catchable signal they receive."""

    def __init__(self, directory: Path, count: int = 3) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.logs = [directory / f"decoy-{i}.log" for i in range(count)]
        self.procs = [
            subprocess.Popen(
                [sys.executable, "-c", _DECOY, str(log)],
                stdout=subprocess.PIPE,
                text=True,
                start_new_session=True,
            )
            for log in self.logs
        ]
        for proc in self.procs:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"

    def signals_received(self) -> dict[int, str]:
        return {p.pid: log.read_text() for p, log in zip(self.procs, self.logs, strict=True)}

    def all_alive(self) -> bool:
        return all(p.poll() is None for p in self.procs)

    def close(self) -> None:
        for proc in self.procs:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait(timeout=5)
            if proc.stdout:
                proc.stdout.close()


# --- workers, started as the node starts them ---------------------------------------------------


def unique_token(label: str = "t") -> str:
    """A claim token no other worker on this machine carries, as the node's uuid4 tokens are:
    Confirm cleanup looks for a live ``store.worker`` by its node and token on the whole machine,
    so a fixed token ("t1") matched another test's live worker (PROCESS_ALIVE under load)."""
    return f"{label}-{uuid.uuid4().hex[:12]}"


def start_worker(
    journal: Path, node: str, goal: str, token: str | None = None
) -> subprocess.Popen[bytes]:
    """``python -m store.worker`` in its own session (process group), as ``refine node`` does;
    its token is unique unless given."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "store.worker",
            "--journal",
            str(journal),
            "--node",
            node,
            "--goal",
            goal,
            "--token",
            token or unique_token(),
        ],
        cwd=ROOT,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def pids_in(directory: Path) -> list[int]:
    return sorted(int(p.name) for p in directory.iterdir()) if directory.is_dir() else []


def refine_json(journal: Path | str, *args: str) -> object:
    """Run the real ``refine`` CLI with --json and parse what it prints."""
    out = subprocess.run(
        [sys.executable, "-m", "refine_tui.cli", "--journal", str(journal), *args, "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(out.stdout)


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)
