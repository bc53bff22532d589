"""What a user who is not the node's sees: a journal in a folder it may not write, and a node
that runs as another user.

Found as `nobody` beside a node run by root (session 25): `refine wait` answered "goal g is still
queued after 25 s" twenty seconds after g completed, and the dashboard never showed a new goal:
with no writer running when it opened, SQLite's side files could not be made, the journal was
read as an immutable snapshot, and that snapshot was taken to be frozen for good, though root
could write there. And the same dashboard alerted "needs cleanup: its process is gone" about
every live attempt: the node wrote its process records 0600 (``mkstemp``), and a record it could
not read was taken for none. Stop and Cancel of those attempts ended `INTERNAL`
(PermissionError) before anything was written: now Stop is refused `NOT_PERMITTED` and Cancel
writes its intent and leaves the process to its node.

Another writer is made here with a read-only bind mount (a container's `:ro` volume, say): this
process reads through it and writes through the folder itself. Another user is `nobody`, in a
forked child that drops root after the imports.
"""

from __future__ import annotations

import io
import json
import os
import signal
import stat
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from refine_tui.actions import evidence_text
from refine_tui.app import RefineApp
from refine_tui.cli import main
from refine_tui.demo import populate
from refine_tui.rows import Reader
from store.errors import NoProcessRecordError
from store.journal.sqlite import Journal
from store.model.goals import Goals
from store.ops.bulk import plan_bulk
from store.ops.evidence import cleanup_evidence, needs_cleanup
from store.ops.operator import cancel_goal, stop_goal
from tests.helpers.registry import node_registry, record_worker
from tests.helpers.waits import until, wait_until

NOBODY = 65534


@pytest.fixture
def mounted(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """(the folder, the same folder mounted read-only elsewhere)."""
    folder, view = tmp_path / "journals", tmp_path / "view"
    folder.mkdir()
    view.mkdir()
    subprocess.run(["mount", "--bind", str(folder), str(view)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(view)], check=True)
        yield folder, view
    finally:
        subprocess.run(["umount", str(view)], check=True)


def add(path: Path, goal_id: str) -> None:
    with Journal.open(path) as journal:
        Goals(journal).create(goal_id=goal_id, title=goal_id, node_id="n1", argv=["true"])


def test_a_snapshot_read_is_followed_once_another_writer_changes_the_journal(
    mounted: tuple[Path, Path],
) -> None:
    folder, view = mounted
    add(folder / "j.db", "first")
    with Journal.open(view / "j.db", read_only=True) as seen:
        assert seen.immutable and not seen.replaced()  # no writer: the file is all there is
        assert not seen.replaced()
        add(folder / "j.db", "second")  # committed, checkpointed, its -wal gone again
        assert not Path(folder / "j.db-wal").exists()
        assert seen.replaced()  # outdated: a reopen reads the second goal
    with Journal.open(view / "j.db", read_only=True) as again:
        assert Goals(again).read("second") is not None


def test_refine_wait_through_a_read_only_mount_answers_once_the_goal_moves(
    mounted: tuple[Path, Path],
) -> None:
    folder, view = mounted
    add(folder / "j.db", "g")
    argv = ["wait", "g", "--status", "cancelled", "--timeout", "60"]
    wait = subprocess.Popen(
        [sys.executable, "-m", "refine_tui.cli", "--journal", str(view / "j.db"), *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until(lambda: _reads(wait.pid, view / "j.db"), 30, "the wait's first read")
        with Journal.open(folder / "j.db") as journal:
            Goals(journal).cancel(goal_id="g", reason="moved on", command_id="op:cancel:g")
        out, err = wait.communicate(timeout=30)
    finally:
        wait.kill()
    assert (wait.returncode, out, err) == (0, "g cancelled\n", "")  # was WAIT_TIMEOUT, exit 4


async def test_the_dashboard_on_a_read_only_mount_goes_live_when_a_writer_starts(
    mounted: tuple[Path, Path],
) -> None:
    folder, view = mounted
    populate(folder / "j.db", node="n1", live=False)
    app = RefineApp(journal=view / "j.db", node="n1")
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: bool(app.goal_rows))
        assert app.header_state.state == "snapshot"
        add(folder / "j.db", "added-later")
        await until(pilot, lambda: "added-later" in app.goal_rows, timeout=15)
        with Journal.open(folder / "j.db") as writer:  # a writer running: read live through it
            add(folder / "j.db", "added-while-open")
            await until(pilot, lambda: "added-while-open" in app.goal_rows, timeout=15)
            assert app.header_state.state == "live" and writer.journal_id


# --- a node that runs as another user ----------------------------------------------------------


@pytest.fixture
def shared(tmp_path: Path) -> Iterator[Path]:
    """The demo's journal in a folder every user may reach and write (an operators' group's),
    its node n1's state dir root's: nightly-report's attempt recorded for a live process."""
    base = Path(tempfile.mkdtemp(prefix="refine-shared-", dir="/tmp"))
    os.chmod(base, 0o777)
    try:
        path = populate(base / "journal.db", node="n1", live=False)
        for side in base.glob("journal.db*"):
            os.chmod(side, 0o666)
        yield path
    finally:
        subprocess.run(["rm", "-rf", str(base)], check=True)


@pytest.fixture
def recorded(shared: Path) -> Iterator[Path]:
    """nightly-report's worker, alive, with its record as the node writes it."""
    with Journal.open(shared, read_only=True) as journal:
        run = Goals(journal).current_run(Goals(journal).read("nightly-report"))  # type: ignore[arg-type]
    assert run is not None and run.running_attempt is not None
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        record_worker(shared, "n1", run.run_id, proc, worker=run.running_attempt.worker)
        yield node_registry(shared, "n1").processes_dir / "nightly-report.r1.1.json"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_a_record_is_written_with_the_modes_the_umask_gives(recorded: Path) -> None:
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(recorded.stat().st_mode) == 0o666 & ~umask  # 0600 before


def test_another_user_reads_a_record_it_may_read_and_sees_the_process_alive(
    shared: Path, recorded: Path
) -> None:
    as_nobody(lambda: _sees(shared, gone=False, words="process record: pid"))


def test_a_record_another_user_cannot_read_is_no_answer_never_a_process_gone(
    shared: Path, recorded: Path
) -> None:
    os.chmod(recorded, 0o600)  # a node of an older version, or a umask of 077
    as_nobody(lambda: _sees(shared, gone=False, words="cannot be read by this user"))


def test_a_record_that_is_not_there_is_still_a_process_gone(shared: Path) -> None:
    as_nobody(lambda: _sees(shared, gone=True, words="no process record on node n1"))


def test_another_users_process_is_never_signalled_stop_refused_cancel_left_to_its_node(
    shared: Path, recorded: Path
) -> None:
    """Stop and Cancel as nobody of an attempt whose process is root's: they ended INTERNAL
    (the stop marker's PermissionError), before the Cancel's intent was written."""
    as_nobody(lambda: _acts(shared))
    assert _alive(recorded)  # nothing was signalled


def _acts(path: Path) -> None:
    foreign = (
        "the process of attempt 1 of run nightly-report.r1 (pid {pid}) runs as another user"
        " (node n1's), whom this user may not signal"
    )
    with Journal.open(path) as journal:
        pid = node_registry(path, "n1").get("nightly-report.r1", 1).pid  # type: ignore[union-attr]
        foreign = foreign.format(pid=pid)
        (stop,) = plan_bulk(journal, "stop", node="n1", goal_ids=["nightly-report"]).goals
        assert (stop.expect, stop.code, stop.why) == (
            "refused", "NOT_PERMITTED", f"{foreign}: stop it as that user"
        )  # fmt: skip
        (cancel,) = plan_bulk(journal, "cancel", node="n1", goal_ids=["nightly-report"]).goals
        assert cancel.why == f"running attempt 1: cancelled; {foreign}: its node stops it"
    sys.stderr = io.StringIO()
    code = main(["--journal", str(path), "--node", "n1", "stop", "nightly-report"])
    assert (code, sys.stderr.getvalue()) == (
        1, f"refine: NOT_PERMITTED: {foreign}: stop it as that user\n"
    )  # fmt: skip
    with Journal.open(path) as journal:
        assert Goals(journal).read("nightly-report").status == "running"  # type: ignore[union-attr]
        evidence = cleanup_evidence(journal, "nightly-report.r1", epoch=1, node="n1")
        said = evidence_text(evidence, "nobody", "n1", time.time()).plain  # the x dialog
        assert "still alive: it runs as another user, whom you may not signal: cancel" in said
        report = cancel_goal(journal, "nightly-report", reason="bad deploy", node="n1")
        assert (report.outcome, report.process, report.signals) == (
            "cancel-requested", "other-user", ()
        )  # fmt: skip
        assert report.why == f"the goal is cancelled; {foreign}: its node stops the process"
        assert Goals(journal).read("nightly-report").status == "cancelled"  # type: ignore[union-attr]


def _alive(record: Path) -> bool:
    pid = json.loads(record.read_text())["pid"]
    return Path(f"/proc/{pid}").exists()


def _sees(path: Path, *, gone: bool, words: str) -> None:
    """Asserted as nobody: what the dashboard, the cleanup's evidence, Stop and Cancel say."""
    with Journal.open(path) as journal:
        run = Goals(journal).current_run(Goals(journal).read("nightly-report"))  # type: ignore[arg-type]
        assert run is not None
        assert needs_cleanup(journal, run, node="n1") is gone
        assert Reader(journal, "n1").proof(run.run_id, 1, None) == (gone, False)
        evidence = cleanup_evidence(journal, run.run_id, epoch=1, node="n1")
        assert words in evidence.sentence, evidence.sentence
        if "cannot be read" not in words:
            return
        with pytest.raises(NoProcessRecordError) as refused:
            stop_goal(journal, "nightly-report", node="n1", grace_s=0)
        assert refused.value.message.endswith(
            "cannot be read by this user (node n1 runs as another user): stop it as that user"
        )
        (planned,) = plan_bulk(journal, "cancel", node="n1", goal_ids=["nightly-report"]).goals
        assert planned.why.endswith("cannot be read by this user (node n1 runs as another user):"
                                    " its node stops it"), planned.why  # fmt: skip
        assert "confirm cleanup" not in planned.why


def as_nobody(check: Callable[[], None]) -> None:
    """Run ``check`` in a forked child that is `nobody`; its failure fails the test."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read_end)
        code = 0
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            check()
        except BaseException:
            os.write(write_end, traceback.format_exc().encode())
            code = 1
        os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as told:
        said = told.read().decode()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, said


def _reads(pid: int, path: Path) -> bool:
    """Whether process ``pid`` has the journal open (its first read is done)."""
    fds = Path(f"/proc/{pid}/fd")
    try:
        return any(os.readlink(fd) == str(path) for fd in fds.iterdir())
    except OSError:
        return False
