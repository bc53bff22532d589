"""`refine demo`: a journal with a realistic mix of work, a live node running it, the dashboard.

``populate`` writes the history through the real Goals API, as workers would have: quick
successes, a failure that retried, one that exhausted its budget, a cancelled goal, a held
goal (operator redelivery, interrupted), another node's running goal, and one orphaned attempt
of this node whose worker really died without a process record (`needs cleanup`).
Then it queues live goals for ``refine node`` to run while the operator watches.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from store.errors import RefineError
from store.host.processes import ProcessRegistry, node_workers, stop_process
from store.journal.api import Journal
from store.journal.locations import resolve_location
from store.model.goals import Goals
from store.ops.operator import stop_goal

DEMO_NODE = "n1"
OTHER_NODE = "n2"
RECORD_WAIT_S = 20.0  # a launched worker records itself within this, however busy the box


def _sh(script: str) -> list[str]:
    return ["sh", "-c", script]


def _finish(
    goals: Goals, goal_id: str, worker: str, outcomes: list[tuple[str, str | None]]
) -> None:
    """Play attempts of a goal as its workers would: start, then settle with each outcome."""
    for n, (outcome, reason) in enumerate(outcomes, 1):
        goal = goals.read(goal_id)
        assert goal is not None
        result = goals.start(
            goal_id=goal_id, node_id=goal.node_id, worker=f"{worker}-{n}", token=f"demo{n}"
        )
        assert result.attempt is not None
        goals.settle(
            goal_id=goal_id,
            run_id=goal.run_id,
            epoch=result.attempt.epoch,
            outcome=outcome,
            reason=reason,
            evidence=[f"log:{goal_id}/{n}"],
        )


def populate(path: str | os.PathLike[str], *, node: str = DEMO_NODE, live: bool = True) -> Path:
    """Create the demo journal at ``path`` (``live``: also queue goals for a node to run)."""
    path = Path(path)
    with Journal.open(path) as journal:
        goals = Goals(journal)

        def add(goal_id: str, title: str, argv: list[str], **kw: object) -> None:
            kw.setdefault("node_id", node)
            goals.create(goal_id=goal_id, title=title, argv=argv, **kw)  # type: ignore[arg-type]

        add("build-docs", "Build the docs site", _sh("echo building; sleep 1; echo done"))
        _finish(goals, "build-docs", "w-a1", [("completed", None)])
        add("lint", "Lint the repository", _sh("echo ok"))
        _finish(goals, "lint", "w-b2", [("completed", None)])
        add("unit-tests", "Unit tests (flaky)", _sh("echo ok"), max_attempts=3)
        _finish(goals, "unit-tests", "w-c3", [("failed", "exit 1"), ("completed", None)])
        add("deploy-stage", "Deploy to staging", _sh("exit 1"), max_attempts=3)
        _finish(goals, "deploy-stage", "w-d4", [("failed", "exit 1")] * 3)
        add("old-backfill", "Backfill 2023 metrics", _sh("sleep 3600"))
        goals.cancel(
            goal_id="old-backfill", reason="superseded by backfill-v2", command_id="op:cancel:demo"
        )
        _held(goals, node)
        add("gpu-train", "Train the ranker", _sh("sleep 3600"), node_id=OTHER_NODE)
        goals.start(goal_id="gpu-train", node_id=OTHER_NODE, worker="w-n2-7", token="demo")
        _orphan(goals, journal, node)
        if live:
            _queue_live(add)
    return path


def _held(goals: Goals, node: str) -> None:
    """An operator-redelivery goal whose attempt was stopped: held until released."""
    goals.create(
        goal_id="migrate-db",
        title="Migrate orders table",
        node_id=node,
        argv=_sh("echo migrating; sleep 30; echo done"),
        redelivery="operator",
        max_attempts=3,
    )
    started = goals.start(goal_id="migrate-db", node_id=node, worker="w-e5", token="demo")
    goal = goals.read("migrate-db")
    assert goal is not None and started.run is not None
    goals.interrupt(
        goal_id="migrate-db",
        run_id=goal.run_id,
        epoch=1,
        goal_version=goal.version,
        run_version=started.run.version,
        confirmed_by="dana@" + node,
        method="sigterm",
        command_id="op:stop:demo",
    )


def _orphan(goals: Goals, journal: Journal, node: str) -> None:
    """A running attempt of this node whose worker really ran, really died, and left no record.

    The worker's process runs here for real: it writes its log and is killed (SIGKILL, as a
    crash or a reboot would), and its process record is gone with it. With a record proving
    the process gone the node would end the attempt by itself (``process-exited``, DESIGN §6);
    without one there is no proof, so it waits for an operator's Confirm cleanup. Nothing is
    backdated: the log's age and the attempt's age are both real.
    """
    goals.create(
        goal_id="nightly-report",
        title="Nightly sales report",
        node_id=node,
        argv=_sh("echo report"),
        max_attempts=3,
    )
    started = goals.start(goal_id="nightly-report", node_id=node, worker="w-f6", token="demo")
    assert started.attempt is not None
    log = ProcessRegistry.for_journal(journal, node).log_path("nightly-report.r1", 1)
    log.parent.mkdir(parents=True, exist_ok=True)
    script = "echo 'loading sales for 2026-11-28'; echo 'querying warehouse…'; kill -KILL $$"
    with open(log, "wb") as out:
        subprocess.run(["sh", "-c", script], stdout=out, stderr=subprocess.STDOUT, check=False)


def _queue_live(add: Callable[..., object]) -> None:
    """Goals the node will run while the operator watches."""
    loop = 'i=0; while true; do i=$((i+1)); echo "step $i"; sleep 1; done'
    add("soak-test", "Soak test (runs until stopped)", _sh(loop), max_attempts=5)
    add("index-rebuild", "Rebuild search index", _sh(loop.replace("true", "[ $i -lt 45 ]")))
    add(
        "sync-billing",
        "Sync billing (operator redelivery)",
        _sh(loop),
        redelivery="operator",
        max_attempts=3,
    )
    add("flaky-fetch", "Fetch vendor feed", _sh("echo fetching; sleep 3; exit 2"), max_attempts=3)
    for n in range(1, 4):
        add(f"thumbs-{n}", f"Thumbnails batch {n}", _sh(f"echo batch {n}; sleep {2 * n}; echo ok"))


def start_node(path: Path, node: str, capacity: int = 4) -> subprocess.Popen[bytes]:
    """``refine node`` in the background, its output in the journal's folder."""
    log = open(path.parent / f"node-{node}.log", "ab")  # noqa: SIM115 (lives with the process)
    code = (
        "import sys; from store.node.scheduler import run_node; "
        "sys.exit(run_node(sys.argv[1], sys.argv[2], capacity=int(sys.argv[3])))"
    )
    return subprocess.Popen(
        [sys.executable, "-c", code, str(path), node, str(capacity)],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def stop_node(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _await_records(path: Path, node: str, registry: ProcessRegistry) -> None:
    """Wait until each worker the stopped node launched has recorded itself (or ended): it
    claims and records a moment after its launch (seconds on a busy machine), and one that
    Stop missed would run on, its goal `running`, after the demo quit."""
    journal = str(resolve_location(path))
    deadline = time.monotonic() + RECORD_WAIT_S
    while time.monotonic() < deadline:
        recorded = {r.pid for r in registry.all()}
        if all(p.pid in recorded for p in node_workers(journal, node)):
            return
        time.sleep(0.05)


def finish(path: Path, node: str, operator: str) -> list[str]:
    """Leave the journal truthful on quit: Stop every attempt the demo's node started (recorded
    as an operator's Stop, so the goals are requeued or held), and say what is left."""
    lines = []
    try:
        opened = Journal.open(path, create=False)
    except RefineError as exc:  # deleted or broken while the demo ran: nothing can be recorded
        return _end_unrecorded(path, node, exc)
    with opened as journal:
        registry = ProcessRegistry.for_journal(journal, node)
        _await_records(path, node, registry)
        for record in registry.all():
            goal_id = record.run_id.rpartition(".r")[0]
            try:
                report = stop_goal(journal, goal_id, node=node, operator=operator, grace_s=2.0)
                lines.append(f"stopped {goal_id}: {report.outcome}")
            except RefineError as exc:
                lines.append(f"{goal_id}: not stopped ({exc.message})")
            with contextlib.suppress(Exception):  # whatever is left of it (identity-checked)
                stop_process(record, grace_s=1.0)
        goals = Goals(journal)
        for goal in goals.list(status="running"):
            run = goals.runs(goal.goal_id)[-1]
            epoch = run.running_attempt.epoch if run.running_attempt else "E"
            lines.append(_still_running(path, node, goal.goal_id, goal.node_id, run.run_id, epoch))
    return lines


def _still_running(
    path: Path, node: str, goal_id: str, goal_node: str, run_id: str, epoch: int | str
) -> str:
    """What is left running in the journal, and the two commands that end it, each for what it
    is: `cancel` ends the goal's work for good; `cleanup` only confirms that a silent attempt's
    work has ended, and the goal is then requeued (on its node: for another node's goal, one
    that never runs in the demo)."""
    refine = f"refine --journal {path}"
    cancel = f"`{refine} cancel {goal_id} --reason TEXT` ends the goal"
    cleanup = f"`{refine} cleanup {run_id} --epoch {epoch}`"
    if goal_node != node:
        return (
            f"{goal_id} is still running in the journal (on node {goal_node}, which the demo"
            f" does not run): {cancel}; {cleanup} confirms its attempt ended once you know"
            f" it has, and requeues it for {goal_node}"
        )
    return (
        f"{goal_id} is still running in the journal (needs cleanup: no process of it is left):"
        f" {cleanup} confirms its attempt ended and requeues it; {cancel}"
    )


def _end_unrecorded(path: Path, node: str, exc: RefineError) -> list[str]:
    """The journal went away under the demo (and its process records with its folder): its
    workers cannot be recorded as stopped, but must not run on, their recipes forever."""
    import psutil

    workers = node_workers(str(resolve_location(path)), node)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for proc in workers:  # each worker leads its own session: the group is its recipe too
            with contextlib.suppress(OSError):
                if os.getpgid(proc.pid) == proc.pid and proc.is_running():
                    os.killpg(proc.pid, sig)
        _, workers = psutil.wait_procs(workers, timeout=2.0)
    return [f"{exc.message}: nothing recorded; its node's workers were ended"]


def run_demo(directory: Path | None = None, *, quiet: bool = False) -> int:
    """Create the demo journal, start a node, open the dashboard; stop the node on exit."""
    from refine_tui.app import RefineApp

    folder = Path(directory) if directory else Path(tempfile.mkdtemp(prefix="refine-demo-"))
    path = folder / "journal.db"
    if path.exists():
        print(f"refine demo: {path} exists; using it as it is", file=sys.stderr)
    else:
        populate(path)
    node = start_node(path, DEMO_NODE)
    app = RefineApp(journal=path, node=DEMO_NODE, quiet=quiet)
    # A closed terminal (SIGHUP) must still stop the node and its workers.
    previous = signal.signal(signal.SIGHUP, lambda *_: app.exit())
    try:
        app.run()
    finally:
        signal.signal(signal.SIGHUP, previous)
        stop_node(node)  # first: a requeued goal must not be launched again
        for line in finish(path, DEMO_NODE, app.operator):
            _say(f"refine demo: {line}")
    _say(_goodbye(path))
    _flush_or_drop(sys.stdout, sys.stderr)
    return 0


def _goodbye(path: Path) -> str:
    """Where the demo journal is kept, unless it went away while the demo ran."""
    if not path.exists():
        return f"demo journal {path} is gone (deleted while the demo ran)"
    return f"demo journal kept at {path}  (refine --journal {path} goals)"


def _say(line: str) -> None:
    """A goodbye line, unless the terminal went away (its window closed): nobody reads it."""
    with contextlib.suppress(OSError):
        print(line, flush=True)


def _flush_or_drop(*streams: TextIO) -> None:
    """Flush what is buffered (Textual's last output is on stderr), or, where the terminal
    hung up (its window closed), point the stream at /dev/null: the interpreter's own last
    flush would meet the same I/O error and end the demo with status 120."""
    for stream in streams:
        try:
            stream.flush()
        except OSError:
            with contextlib.suppress(OSError, ValueError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())
