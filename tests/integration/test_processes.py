"""The node-local process registry with real processes, real signals and real files."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from store.host.observe import live_workers
from store.host.processes import (
    ProcessRecord,
    ProcessRegistry,
    create_time,
    live_worker,
    log_tail,
    observe,
    same_process,
    stop_process,
)

Spawn = Callable[[str], tuple[subprocess.Popen[str], list[str]]]


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.fixture
def spawn() -> Iterator[Spawn]:
    """Start ``python -c code`` as a session leader; it prints one line when ready."""
    started: list[subprocess.Popen[str]] = []

    def start(code: str) -> tuple[subprocess.Popen[str], list[str]]:
        proc = subprocess.Popen(
            [sys.executable, "-c", code], start_new_session=True, stdout=subprocess.PIPE, text=True
        )
        started.append(proc)
        assert proc.stdout is not None
        return proc, proc.stdout.readline().split()

    yield start
    for proc in started:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=5)
        if proc.stdout:
            proc.stdout.close()


def _record(pid: int, *, pgid: int | None = None, create_time: float | None = None, **kw: object):
    fields = {
        "node_id": "n1",
        "pid": pid,
        "create_time": psutil.Process(pid).create_time() if create_time is None else create_time,
        "pgid": pid if pgid is None else pgid,
        "run_id": "g1.r1",
        "epoch": 1,
        "worker": "n1-w1",
        "argv": ("python", "-c", "..."),
        "log_path": "/dev/null",
        "started_at": time.time(),
    }
    fields.update(kw)
    return ProcessRecord(**fields)  # type: ignore[arg-type]


FAMILY = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", '''
import subprocess, time
g = subprocess.Popen(["sleep", "30"])
print(g.pid, flush=True)
time.sleep(30)
'''], stdout=subprocess.PIPE, text=True)
print(child.pid, child.stdout.readline().strip(), flush=True)
time.sleep(30)
"""

STUBBORN = """
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ready", flush=True)
time.sleep(30)
"""

SLEEPER = "import time; print('ready', flush=True); time.sleep(30)"


def test_a_group_with_grandchildren_dies_as_a_whole(spawn: Spawn) -> None:
    proc, (child, grandchild) = spawn(FAMILY)
    family = [proc.pid, int(child), int(grandchild)]
    rec = _record(proc.pid)
    assert all(os.getpgid(pid) == proc.pid for pid in family)

    out = stop_process(rec, grace_s=5.0)

    assert out.signals == ("SIGTERM",)
    assert out.outcome == "exited"
    assert all(_gone(pid) for pid in family)
    assert not same_process(rec)


def test_a_process_ignoring_sigterm_is_killed_after_the_grace(spawn: Spawn) -> None:
    proc, _ = spawn(STUBBORN)
    rec = _record(proc.pid)

    out = stop_process(rec, grace_s=0.3)

    assert out.signals == ("SIGTERM", "SIGKILL")
    assert out.outcome == "killed"
    assert _gone(proc.pid)


def test_a_live_pid_with_another_create_time_is_never_signalled(spawn: Spawn) -> None:
    proc, _ = spawn(SLEEPER)
    real = psutil.Process(proc.pid).create_time()
    rec = _record(proc.pid, create_time=real - 1.0)  # the pid was "reused" by this process

    assert not same_process(rec)
    out = stop_process(rec, grace_s=0.1)

    assert out.signals == ()
    assert out.outcome == "mismatch"
    assert psutil.Process(proc.pid).is_running()
    assert psutil.Process(proc.pid).status() != psutil.STATUS_ZOMBIE
    assert proc.poll() is None


def test_a_dead_pid_is_not_running(spawn: Spawn) -> None:
    proc, _ = spawn(SLEEPER)
    rec = _record(proc.pid)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=5)

    out = stop_process(rec, grace_s=0.1)

    assert (out.signals, out.outcome) == ((), "not-running")
    assert not observe(rec).alive


def test_our_zombie_child_is_not_the_process_and_gets_reaped() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    rec = _record(proc.pid)
    deadline = time.monotonic() + 10
    while psutil.Process(proc.pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline
        time.sleep(0.01)

    assert not same_process(rec)
    out = stop_process(rec, grace_s=0.1)

    assert (out.signals, out.outcome) == ((), "not-running")
    assert not psutil.pid_exists(proc.pid)
    proc.wait(timeout=5)  # Popen copes with a child someone else reaped


def test_a_live_worker_is_found_by_its_node_and_token_only() -> None:
    """Confirm cleanup's machine-wide look-up: any live ``store.worker`` with the attempt's node
    and token is its worker, so claim tokens must be unique (tests used a fixed "t1" and one
    test's live worker refused another test's cleanup with PROCESS_ALIVE under load)."""
    from tests.helpers.soak_recipes import unique_token

    token = unique_token()
    code = "import sys, time; print(flush=True); time.sleep(60)"
    argv = [sys.executable, "-c", code, "store.worker", "--node", "n1", "--token", token]
    proc = subprocess.Popen(argv, start_new_session=True, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "\n"
        found = live_worker(f"n1/{token}")
        assert found is not None and found.pid == proc.pid
        assert live_workers()[f"n1/{token}"] == proc.pid  # all of them in one pass, the same
        assert live_worker(f"n2/{token}") is None
        assert live_worker(f"n1/{unique_token()}") is None
        proc.kill()
        deadline = time.monotonic() + 10
        while not _gone(proc.pid):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert live_worker(f"n1/{token}") is None  # a zombie is no live worker
        assert f"n1/{token}" not in live_workers()
    finally:
        proc.kill()
        proc.wait(timeout=5)
        proc.stdout.close()  # type: ignore[union-attr]


def test_a_changed_process_group_is_not_signalled_as_a_group(spawn: Spawn) -> None:
    proc, (_child, grandchild) = spawn(FAMILY)
    rec = _record(proc.pid, pgid=os.getpgid(0))  # not its group any more: never killpg ours

    out = stop_process(rec, grace_s=2.0)

    assert out.outcome == "exited"
    assert "pid" in out.detail
    assert _gone(proc.pid)
    assert psutil.Process(int(grandchild)).is_running()  # only the verified pid was signalled


def test_observe_a_live_process(spawn: Spawn) -> None:
    proc, _ = spawn(SLEEPER)
    rec = _record(proc.pid)

    first, second = observe(rec), observe(rec)

    for obs in (first, second):
        assert obs.alive
        assert obs.cpu_percent is not None and obs.cpu_percent >= 0.0
        assert obs.rss_bytes is not None and obs.rss_bytes > 0
        assert obs.age_s is not None and obs.age_s >= 0.0


def test_registry_records_atomically_and_reads_back(tmp_path: Path) -> None:
    reg = ProcessRegistry(tmp_path / "journal.db", "node/1")
    rec = _record(os.getpid(), pgid=os.getpgid(0), run_id="team/build.r2", epoch=3)

    path = reg.record(rec)

    assert path.parent == tmp_path / "nodes" / "node%2F1" / "processes"
    assert reg.logs_dir.is_dir()
    assert reg.get("team/build.r2", 3) == rec
    assert reg.all() == [rec]
    assert [p.name for p in reg.processes_dir.iterdir()] == [path.name]  # no temp left behind
    assert reg.log_path("team/build.r2", 3).parent == reg.logs_dir
    assert json.loads(path.read_text())["argv"] == list(rec.argv)

    newer = _record(os.getpid(), pgid=os.getpgid(0), run_id="team/build.r2", epoch=3, worker="w2")
    reg.record(newer)
    assert reg.get("team/build.r2", 3) == newer

    assert reg.remove("team/build.r2", 3)
    assert not reg.remove("team/build.r2", 3)
    assert reg.get("team/build.r2", 3) is None
    assert reg.all() == []


def test_a_record_written_unsynced_reads_the_same_and_is_synced_later(tmp_path: Path) -> None:
    reg = ProcessRegistry(tmp_path / "journal.db", "n1")
    rec = _record(os.getpid(), pgid=os.getpgid(0), run_id="build.r1", epoch=1)

    reg.record(rec, sync=False)
    assert reg.get("build.r1", 1) == rec and reg.all() == [rec]
    reg.sync("build.r1", 1)
    assert reg.get("build.r1", 1) == rec
    assert reg.remove("build.r1", 1)
    reg.sync("build.r1", 1)  # gone meanwhile (the attempt ended): nothing to do


def test_registry_skips_unreadable_records(tmp_path: Path) -> None:
    reg = ProcessRegistry(tmp_path / "journal.db", "n1")
    good = _record(os.getpid(), pgid=os.getpgid(0))
    reg.record(good)
    (reg.processes_dir / "broken.1.json").write_text("{not json")
    (reg.processes_dir / "partial.1.json").write_text('{"pid": 3}')

    assert reg.all() == [good]
    assert ProcessRegistry(tmp_path / "elsewhere" / "j.db", "n1").all() == []


def test_two_journals_in_one_folder_keep_records_of_the_same_attempt_apart(tmp_path: Path) -> None:
    a = ProcessRegistry(tmp_path / "a.db", "n1", "journal-a")
    b = ProcessRegistry(tmp_path / "b.db", "n1", "journal-b")
    assert a.root == tmp_path / "nodes" / "n1" / "journal-a" and a.root != b.root
    mine = _record(os.getpid(), run_id="g.r1", epoch=1, journal_id="journal-a")
    theirs = _record(os.getpid(), run_id="g.r1", epoch=1, journal_id="journal-b", worker="w2")
    a.record(mine)
    b.record(theirs)
    assert (a.get("g.r1", 1), b.get("g.r1", 1)) == (mine, theirs)
    assert (a.all(), b.all()) == ([mine], [theirs])
    assert a.log_path("g.r1", 1) != b.log_path("g.r1", 1)
    assert a.remove("g.r1", 1) and b.get("g.r1", 1) == theirs


def test_records_from_before_the_journal_id_named_the_folder_are_read_where_they_are(
    tmp_path: Path,
) -> None:
    """No migration: a worker started by an older version writes and removes its record in the
    shared nodes/<node>/, so it is read there (this journal's only) and never moved."""
    shared = ProcessRegistry(tmp_path / "a.db", "n1")  # no journal id: where older versions wrote
    a = ProcessRegistry(tmp_path / "a.db", "n1", "journal-a")
    b = ProcessRegistry(tmp_path / "b.db", "n1", "journal-b")
    assert a.legacy_root == shared.root == tmp_path / "nodes" / "n1"
    old = _record(os.getpid(), run_id="g.r1", epoch=1, journal_id="journal-a")
    shared.record(old)
    shared.log_path("g.r1", 1).write_text("old output\n")
    older_stop = {"by": "dana@n1", "until": time.time() + 60}  # the one name older versions used
    (shared.processes_dir / "g.r1.1.stopping").write_text(json.dumps(older_stop))

    assert a.get("g.r1", 1) == old and a.all() == [old] and a.stopping("g.r1", 1) == "dana@n1"
    assert a.find_log("g.r1", 1) == shared.log_path("g.r1", 1)
    assert b.get("g.r1", 1) is None and b.all() == []
    assert not b.remove("g.r1", 1) and shared.get("g.r1", 1) == old  # not b's to tidy

    newer = _record(os.getpid(), run_id="g.r1", epoch=1, journal_id="journal-a", worker="w2")
    a.record(newer)
    assert a.get("g.r1", 1) == newer and a.all() == [newer]  # the folder of now comes first
    assert a.remove("g.r1", 1) and a.get("g.r1", 1) is None and shared.get("g.r1", 1) is None


def test_the_current_process_records_itself(tmp_path: Path) -> None:
    rec = ProcessRecord.for_current_process(
        node_id="n1", run_id="g.r1", epoch=1, worker="w", log_path=tmp_path / "l.log"
    )
    assert same_process(rec)
    assert ProcessRecord.from_json(json.loads(json.dumps(rec.to_json()))) == rec


def test_log_tail(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_bytes(b"".join(f"line {i}\n".encode() for i in range(5000)) + b"last \xff")

    assert log_tail(log, lines=3) == ["line 4998", "line 4999", "last \ufffd"]
    assert log_tail(log, lines=0) == []
    assert log_tail(tmp_path / "missing.log") == []
    assert len(log_tail(log)) == 20
    log.write_bytes(b"starting\n\rprogress 1%\rprogress 100%\r\ndone\n")  # a progress bar
    assert log_tail(log) == ["starting", "\rprogress 1%\rprogress 100%\r", "done"]


def test_the_create_time_read_from_proc_is_psutils_to_the_bit(spawn: Spawn) -> None:
    from store.host.processes import _stat

    proc, _ = spawn(SLEEPER)
    zombie = subprocess.Popen(["true"])
    while psutil.Process(zombie.pid).status() != psutil.STATUS_ZOMBIE:
        time.sleep(0.01)
    try:
        for pid in (os.getpid(), proc.pid, zombie.pid, 1):
            seen = _stat(pid)
            assert seen is not None
            theirs = psutil.Process(pid)
            assert seen[3] == theirs.create_time()  # equal floats, not close ones
            assert seen[1:3] == (theirs.ppid(), os.getpgid(pid))
            assert (seen[0] == "Z") == (theirs.status() == psutil.STATUS_ZOMBIE)
        assert _stat(zombie.pid)[0] == "Z"  # type: ignore[index]
        for pid in (os.getpid(), proc.pid, zombie.pid):  # the public one: what records hold
            assert create_time(pid) == psutil.Process(pid).create_time()
    finally:
        zombie.wait()
    assert _stat(zombie.pid) is None
    assert create_time(zombie.pid) is None


# A stop in a fresh interpreter: then, was psutil imported?
STOP_PROBE = """
import json, sys
from store.host.processes import ProcessRecord, stop_process
rec = ProcessRecord.from_json(json.loads(sys.argv[1]))
print(stop_process(rec, 0.5).outcome, "psutil" in sys.modules)
"""


def test_a_stop_checks_identity_and_signals_without_psutil(spawn: Spawn) -> None:
    stubborn, _ = spawn(STUBBORN)
    other, _ = spawn(SLEEPER)
    reused = _record(other.pid, create_time=psutil.Process(other.pid).create_time() - 1)
    for rec, outcome in [(reused, "mismatch"), (_record(stubborn.pid), "killed")]:
        done = subprocess.run(
            [sys.executable, "-c", STOP_PROBE, json.dumps(rec.to_json())],
            capture_output=True,
            text=True,
            check=True,
        )
        assert done.stdout.split() == [outcome, "False"], done.stdout + done.stderr
    assert same_process(_record(other.pid)) and not _gone(other.pid)  # never signalled
    stubborn.wait(timeout=5)


def test_a_second_stopper_never_removes_the_first_ones_marker(tmp_path: Path) -> None:
    """A Cancel that loses to a Stop in progress marked and cleared the same file: the node
    then saw nobody stopping and could record the ending itself. Each stopper has its own."""
    registry = ProcessRegistry(tmp_path / "a.db", "n1", "journal-a")
    first = registry.mark_stopping("g.r1", 1, by="dana@n1", until=time.time() + 60)
    second = registry.mark_stopping("g.r1", 1, by="erin@n1", until=time.time() + 60)
    registry.clear_stopping(second)  # the loser is done first
    assert registry.stopping("g.r1", 1) == "dana@n1"
    registry.clear_stopping(first)
    assert registry.stopping("g.r1", 1) is None


def test_a_stop_marker_is_its_own_attempts_only(tmp_path: Path) -> None:
    registry = ProcessRegistry(tmp_path / "a.db", "n1", "journal-a")
    registry.mark_stopping("g.1.7-7", 2, by="dana@n1", until=time.time() + 60)  # name goes on
    registry.mark_stopping("g", 2, by="erin@n1", until=time.time() + 60)
    assert registry.stopping("g", 1) is None and registry.stopping("g.1.7-7", 1) is None
    assert registry.stopping("g", 2) == "erin@n1"
    assert registry.stopping("g.1.7-7", 2) == "dana@n1"
    expired = registry.mark_stopping("h", 1, by="dana@n1", until=time.time() - 1)
    assert expired.exists() and registry.stopping("h", 1) is None
