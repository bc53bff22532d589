"""Connection slots shared by processes (store.journal.slots) and a node's wake-ups
(store.node.wakeups), with real processes, real locks, real sockets and real signals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from store.errors import InvalidInputError
from store.journal.slots import ConnectionSlots, max_connections
from store.node.wakeups import NODE_FILE, Inbox, Relay, write_node_file
from tests.helpers.waits import wait_until

HOLDER = textwrap.dedent(
    """
    import sys, time
    from store.journal.slots import ConnectionSlots
    slot = ConnectionSlots(sys.argv[1], int(sys.argv[2])).acquire()
    print("held", flush=True)
    time.sleep(600)
    """
)


def _holder(folder: Path, limit: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(folder), str(limit)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _held(proc: subprocess.Popen[str], timeout: float = 20.0) -> bool:
    """True once ``proc`` says it holds its slot (False: it is still waiting)."""
    import select

    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    return bool(ready) and proc.stdout.readline().strip() == "held"


def _kill(procs: list[subprocess.Popen[str]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


def test_at_most_limit_holders_and_a_killed_holder_frees_its_slot(tmp_path: Path) -> None:
    folder = tmp_path / "connections"
    holders = [_holder(folder, 2) for _ in range(2)]
    try:
        assert all(_held(p) for p in holders)
        waiter = _holder(folder, 2)
        holders.append(waiter)
        assert not _held(waiter, timeout=1.0)  # both slots are held: it waits
        os.killpg(holders[0].pid, signal.SIGKILL)  # the kernel drops a dead holder's lock
        assert _held(waiter)
    finally:
        _kill(holders)


def test_a_slot_given_back_is_taken_again_in_this_process(tmp_path: Path) -> None:
    slots = ConnectionSlots(tmp_path / "connections", 1)
    with slots.acquire():
        pass
    slot = slots.acquire()  # would wait forever had the first not been given back
    slot.release()
    slot.release()  # idempotent


def test_two_holders_in_one_process_exclude_each_other(tmp_path: Path) -> None:
    """flock belongs to the open file: a second acquire in the same process waits too (two
    threads of one dashboard count as two connections)."""
    slots = ConnectionSlots(tmp_path / "connections", 1)
    held = slots.acquire()
    waiter = _holder(tmp_path / "connections", 1)
    try:
        assert not _held(waiter, timeout=1.0)
        held.release()
        assert _held(waiter)
    finally:
        held.release()
        _kill([waiter])


def _queued(queue: Path) -> list[int]:
    """The pids blocked in the kernel on ``queue``'s lock (``/proc/locks``: "-> FLOCK ...")."""
    if not queue.exists():
        return []
    inode = os.stat(queue).st_ino
    pids = []
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if "->" in fields and fields[-3].rsplit(":", 1)[-1] == str(inode):
            pids.append(int(fields[fields.index("->") + 4]))
    return pids


def test_waiters_queue_in_the_kernel_and_one_at_a_time_looks(tmp_path: Path) -> None:
    """All slots held: one waiter looks for a free one, the others sleep in a blocking lock
    (they cost nothing, however many), and each gets the slot in turn as its holder goes."""
    import select

    folder = tmp_path / "connections"
    holder = _holder(folder, 1)
    procs = [holder]
    try:
        assert _held(holder)
        waiters = [_holder(folder, 1) for _ in range(4)]
        procs += waiters
        queue = folder / "queue"
        asleep = wait_until(lambda: len(q := _queued(queue)) == 3 and q, what="3 asleep")
        assert set(asleep) < {w.pid for w in waiters}  # the fourth is the one that looks
        while waiters:
            os.killpg(holder.pid, signal.SIGKILL)  # the kernel drops its slot: one goes on
            pipes = {w.stdout: w for w in waiters if w.stdout is not None}
            ready, _, _ = select.select(list(pipes), [], [], 20.0)
            assert len(ready) == 1, "exactly one waiter takes the slot given back"
            holder = pipes[ready[0]]
            assert _held(holder)
            waiters.remove(holder)
    finally:
        _kill(procs)


def test_slots_travel_by_environment_text(tmp_path: Path) -> None:
    slots = ConnectionSlots(tmp_path, 3)
    again = ConnectionSlots.from_env(slots.to_env())
    assert again is not None and (again.folder, again.limit) == (tmp_path, 3)
    for bad in (None, "", "3", "x:/tmp", "3:relative", "0:/tmp", "99999:/tmp"):
        assert ConnectionSlots.from_env(bad) is None


def test_max_connections_from_flag_or_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REFINE_MAX_CONNECTIONS", raising=False)
    assert max_connections() == 5
    assert max_connections(7) == 7
    monkeypatch.setenv("REFINE_MAX_CONNECTIONS", "9")
    assert max_connections() == 9
    for bad in ("2", "x", "-4"):
        monkeypatch.setenv("REFINE_MAX_CONNECTIONS", bad)
        with pytest.raises(InvalidInputError):
            max_connections()
    with pytest.raises(InvalidInputError, match="a node or serve keeps 2"):
        max_connections(2)


# --- wake-ups ---------------------------------------------------------------------------------


def test_a_relayed_wake_up_reaches_the_worker_of_that_token(tmp_path: Path) -> None:
    token = f"t-{os.getpid()}-{time.monotonic_ns()}"
    relay = Relay()
    write_node_file(tmp_path)  # this process plays the node
    with Inbox(token, poll_s=3600.0) as inbox:
        inbox.follow(tmp_path)
        assert inbox.relayed
        assert inbox.wait([], 0.05) == "timeout"
        assert relay.wake(token)
        assert inbox.wait([], 5.0) == "wake"
        assert inbox.wait([], 0.05) == "timeout"  # drained: one wake-up per batch
    assert not relay.wake(token)  # nobody listens there any more
    relay.close()


def test_without_a_live_node_the_worker_polls_and_finds_a_new_node(tmp_path: Path) -> None:
    token = f"t-{os.getpid()}-{time.monotonic_ns()}"
    (tmp_path / NODE_FILE).write_text("999999999 1.0\n")  # a node that is gone
    with Inbox(token, poll_s=0.05) as inbox:
        inbox.follow(tmp_path)
        assert not inbox.relayed
        assert inbox.wait([], 5.0) == "poll"
        write_node_file(tmp_path)  # a node starts: the worker looks once, then follows it
        assert wait_until(lambda: inbox.wait([], 1.0) == "wake", what="the new node")
        assert inbox.relayed


def test_the_worker_looks_when_its_node_dies(tmp_path: Path) -> None:
    node = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path;"
         " from store.node.wakeups import write_node_file;"
         " write_node_file(Path(sys.argv[1])); print('up', flush=True); time.sleep(600)",
         str(tmp_path)],
        stdout=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        assert node.stdout is not None and node.stdout.readline().strip() == "up"
        with Inbox(f"t-{os.getpid()}-{time.monotonic_ns()}", poll_s=3600.0) as inbox:
            inbox.follow(tmp_path)
            assert inbox.relayed
            os.killpg(node.pid, signal.SIGKILL)
            assert inbox.wait([], 20.0) == "wake"  # its pidfd: at once, no polling
            assert not inbox.relayed
    finally:
        _kill([node])


def test_the_relay_wakes_only_the_workers_whose_goal_changed(tmp_path: Path) -> None:
    from store.journal.api import Journal
    from store.model.goals import Goals

    tokens = {g: f"{g}-{os.getpid()}-{time.monotonic_ns()}" for g in ("a", "b")}
    with Journal.open(tmp_path / "journal.db") as journal:
        goals = Goals(journal)
        for g in tokens:
            goals.create(goal_id=g, title=g, node_id="n1", argv=["true"])
        relay = Relay()
        with Inbox(tokens["a"], poll_s=3600.0) as a, Inbox(tokens["b"], poll_s=3600.0) as b:
            write_node_file(tmp_path)
            a.follow(tmp_path)
            b.follow(tmp_path)
            assert relay.relay(journal, tokens) == 2  # a node's first round wakes them all
            assert a.wait([], 5.0) == b.wait([], 5.0) == "wake"
            goals.start(goal_id="a", node_id="n1", worker="n1/x", token="x")  # a claim: quiet
            assert relay.relay(journal, tokens) == 0
            goals.cancel(goal_id="a", reason="no longer needed", command_id="op:cancel:1")
            assert relay.relay(journal, tokens) == 1
            assert a.wait([], 5.0) == "wake"
            assert b.wait([], 0.05) == "timeout"
        relay.close()


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["node", "--max-connections", "2"], "refine: INVALID_INPUT: max connections must be 3"),
        (["node", "--max-connections", "0"], "--max-connections"),
        (["serve", "--max-connections", "2"], "refine: INVALID_INPUT: max connections must be 3"),
    ],
)
def test_a_limit_that_leaves_workers_or_tabs_nothing_is_refused(
    tmp_path: Path, args: list[str], words: str
) -> None:
    refine = [sys.executable, "-m", "refine_tui.cli", "--journal", str(tmp_path / "j.db")]
    subprocess.run([*refine, "init"], check=True, capture_output=True, timeout=60)
    done = subprocess.run(
        [*refine, "--node", "n1", *args], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert words in done.stderr
    assert done.stderr.count("\n") <= 3 and "Traceback" not in done.stderr


def test_a_slot_folder_that_cannot_be_made_is_a_storage_error(tmp_path: Path) -> None:
    from store.errors import StorageError
    from store.journal.postgres import PostgresJournal
    from store.journal.slots import Sharing

    (tmp_path / "file").write_text("not a folder")
    how = Sharing(slots=ConnectionSlots(tmp_path / "file" / "connections", 1), transient=True)
    journal = PostgresJournal("", "postgresql://nowhere/db", "refine", False, "", how)
    with pytest.raises(StorageError, match="cannot take a connection slot"):
        journal._take_slot()


def test_a_node_run_inside_a_process_gives_its_connection_name_back(tmp_path: Path) -> None:
    """``run_node`` names this process's connections ``refine node N`` while it runs; after,
    the process's later journals connect as before (a test or script that ran a node in-process
    went on counting as that node in pg_stat_activity)."""
    from store.journal.slots import sharing
    from store.node.scheduler import run_node

    before = sharing()
    assert run_node(tmp_path / "journal.db", "not a node name") == 2  # refused at once
    assert sharing() == before
