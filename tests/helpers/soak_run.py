"""The soak: two real nodes on one journal, random recipes, random operator actions and crashes.

``run_soak(root, seconds=..., seed=...)`` drives it and returns the figures; ``test_soak.py``
runs a bounded version in CI and ``scripts/soak.py`` a longer one. Everything is real: two
``python -m store.node.scheduler`` processes, their workers, recipes that hang, ignore SIGTERM
or fork grandchildren, ``store.ops.operator`` Stop / Cancel / Confirm cleanup / Release,
SIGKILL of nodes and workers, restarts. Decoy processes outside our records log every signal
they receive.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import psutil

from store.errors import RefineError
from store.host.processes import same_process
from store.journal.sqlite import Journal
from store.model.goals import Goal, Goals
from store.ops import operator
from store.ops.check import check_journal
from tests.helpers.registry import node_registry
from tests.helpers.soak_recipes import ROOT, Decoys, ours, recipe_argv

NODES = ("n1", "n2")
KINDS = {"succeed": 35, "fail": 20, "hang": 15, "ignore-term": 15, "grandchildren": 15}
HANGING = ("hang", "ignore-term", "grandchildren")
GRACE_S = 0.5
CAPACITY = 3
# Goals the soak's campaign must have created, whatever the machine's load (Soak.campaign_done).
MIN_GOALS = 40
MAX_S = 180.0  # an unfinished campaign gives up here (the test then fails on its figures)
SCHEDULER = (sys.executable, "-m", "store.node.scheduler")
CLI = (sys.executable, "-m", "refine_tui.cli")


@dataclass
class Figures:
    seconds: float = 0.0
    seed: int = 0
    goals: int = 0
    commands: int = 0
    events: int = 0
    actions: Counter[str] = field(default_factory=Counter)  # stop, cancel, cleanup, release
    refusals: Counter[str] = field(default_factory=Counter)  # by error code
    kills: Counter[str] = field(default_factory=Counter)  # node, worker
    restarts: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)
    still_running: list[str] = field(default_factory=list)  # our processes left at the end
    unsettled: list[str] = field(default_factory=list)  # runs still running at the end
    decoy_signals: dict[int, str] = field(default_factory=dict)
    decoys_alive: bool = True

    @property
    def ok(self) -> bool:
        return not (
            self.violations
            or self.still_running
            or self.unsettled
            or any(self.decoy_signals.values())
            or not self.decoys_alive
        )

    def text(self) -> str:
        kills = sum(self.kills.values())
        return "\n".join(
            [
                f"soak: {self.seconds:.0f} s, seed {self.seed}: {self.goals} goals,"
                f" {self.commands} commands, {self.events} events,"
                f" {kills} kills ({dict(self.kills)}), {self.restarts} node restarts,"
                f" {len(self.violations)} violations",
                f"  operator actions: {dict(self.actions)}; refusals: {dict(self.refusals)}",
                f"  final goal statuses: {dict(self.statuses)}",
                f"  left running: {self.still_running or 'none'};"
                f" unsettled runs: {self.unsettled or 'none'}",
                f"  decoys alive: {self.decoys_alive}; signals they received:"
                f" {({p: s for p, s in self.decoy_signals.items() if s}) or 'none'}",
                *(f"  violation: {v}" for v in self.violations),
            ]
        )


class Soak:
    def __init__(self, root: Path, seed: int, log: TextIO | None = None) -> None:
        self.dir = root / "soak"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / "journal.db"
        self.marker = str(self.dir)
        self.rng = random.Random(seed)
        self.figures = Figures(seed=seed)
        self.journal = Journal.open(self.path)
        self.goals = Goals(self.journal)
        self.nodes: dict[str, subprocess.Popen[bytes] | None] = dict.fromkeys(NODES)
        self.down_until: dict[str, float] = {}
        self.created = 0
        self.log = log
        self.decoys = Decoys(root / "decoys")

    # --- processes -----------------------------------------------------------------------------

    def start_node(self, node: str) -> None:
        argv = [*SCHEDULER, "--journal", str(self.path), "--node", node]
        out = open(self.dir / f"{node}.out", "ab")  # noqa: SIM115 (the child keeps it)
        with out:
            self.nodes[node] = subprocess.Popen(
                [*argv, "--capacity", str(CAPACITY)],
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                start_new_session=True,
            )

    def kill_node(self) -> None:
        node = self.rng.choice(NODES)
        proc = self.nodes[node]
        if proc is None:
            return
        proc.kill()  # a crash: its workers run on in their own sessions
        proc.wait()
        self.nodes[node] = None
        self.down_until[node] = time.monotonic() + self.rng.uniform(0.5, 4.0)
        self.figures.kills["node"] += 1
        self.say(f"killed node {node}")

    def restart_nodes(self, force: bool = False) -> None:
        for node, proc in self.nodes.items():
            if proc is None and (force or time.monotonic() >= self.down_until.get(node, 0)):
                self.start_node(node)
                self.figures.restarts += 1

    def workers(self) -> list[psutil.Process]:
        # argv as listed: a worker that ends meanwhile is a zombie, whose argv cannot be read
        return [p for p in ours(str(self.path)) if "store.worker" in (p.info["cmdline"] or ())]

    def kill_worker(self) -> None:
        with contextlib.suppress(IndexError, psutil.Error):
            proc = self.rng.choice(self.workers())
            proc.send_signal(signal.SIGKILL)  # the worker alone, as a crash would
            self.figures.kills["worker"] += 1
            self.say(f"killed worker {proc.pid}")

    # --- operator ------------------------------------------------------------------------------

    def create_goal(self) -> None:
        kind = self.rng.choices(list(KINDS), weights=list(KINDS.values()))[0]
        goal_id = f"g{self.created}-{kind}"
        self.created += 1
        timeout_ms = 3_600_000
        if kind in HANGING and self.rng.random() < 0.3:
            timeout_ms = self.rng.randint(1500, 4000)  # the worker's own timeout ends it
        self.goals.create(
            goal_id=goal_id,
            title=f"soak {kind}",
            node_id=self.rng.choice(NODES),
            argv=recipe_argv(kind, self.marker, self.dir / "pids" / goal_id),
            max_attempts=self.rng.randint(1, 3),
            attempt_timeout_ms=timeout_ms,
            redelivery=self.rng.choice(("safe", "operator")),
        )

    def pick(self, *statuses: str) -> Goal | None:
        found = self.goals.list(status=list(statuses))
        return self.rng.choice(found) if found else None

    def stop(self) -> None:
        goal = self.pick("running")
        if goal is not None:
            self.act(
                "stop",
                lambda: operator.stop_goal(
                    self.journal, goal.goal_id, node=goal.node_id, operator="soak", grace_s=GRACE_S
                ),
            )

    def cancel(self, goal: Goal | None = None) -> None:
        goal = goal or self.pick("queued", "held", "running")
        if goal is not None:
            node = self.rng.choice((goal.node_id, *NODES))  # from its node, or from any node
            self.act(
                "cancel",
                lambda: operator.cancel_goal(
                    self.journal,
                    goal.goal_id,
                    reason="soak: not wanted",
                    node=node,
                    operator="soak",
                    grace_s=GRACE_S,
                ),
            )

    def release(self) -> None:
        goal = self.pick("held")
        if goal is not None:
            self.act(
                "release",
                lambda: operator.release_goal(self.journal, goal.goal_id, operator="soak"),
            )

    def cleanup(self, min_age_s: float = 2.0) -> None:
        """Confirm cleanup where the evidence says the attempt's process is gone (as an
        operator reading the modal would): a record whose process is gone, or none for a while."""
        for goal in self.goals.list(status=["running", "cancelled"]):
            run = self.goals.current_run(goal)
            attempt = run.running_attempt if run else None
            if run is None or attempt is None:
                continue
            registry = node_registry(self.path, goal.node_id)
            record = registry.get(run.run_id, attempt.epoch)
            if record is not None and same_process(record):
                continue
            with contextlib.suppress(RefineError):
                evidence = operator.cleanup_evidence(
                    self.journal, run.run_id, epoch=attempt.epoch, node=goal.node_id
                )
                started = evidence.attempt_started_at
                age = time.time() - started if started is not None else 0.0
                if evidence.same_process_alive or age < min_age_s:
                    continue
                if record is None and self._worker_alive(run.run_id):
                    continue  # claimed but not yet recorded: its worker is alive
            self.act(
                "cleanup",
                lambda run=run, attempt=attempt, goal=goal: operator.confirm_cleanup(
                    self.journal,
                    run.run_id,
                    epoch=attempt.epoch,
                    node=goal.node_id,
                    operator="soak",
                ),
            )
            return

    def _worker_alive(self, run_id: str) -> bool:
        goal_id = run_id.rpartition(".r")[0]
        return any(goal_id in (p.info["cmdline"] or ()) for p in self.workers())

    def cli_action_killed(self) -> None:
        """`refine stop|cancel` from another process, SIGKILLed at a random moment (maybe
        between its signals and its record): what it did or did not commit must converge."""
        goal = self.pick("running")
        if goal is None:
            return
        what = ["stop", goal.goal_id, "--grace", "0.5"]
        if self.rng.random() < 0.4:
            what = ["cancel", goal.goal_id, "--reason", "soak: cli", "--grace", "0.5"]
        proc = subprocess.Popen(
            [*CLI, "--journal", str(self.path), "--node", goal.node_id, *what],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "REFINE_OPERATOR": "soakcli"},
        )
        try:
            proc.wait(timeout=self.rng.uniform(0.1, 1.5))
            self.figures.actions[f"cli-{what[0]}"] += 1
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            self.figures.kills["operator"] += 1
            self.say(f"killed `refine {what[0]} {goal.goal_id}`")

    def act(self, action: str, call: Callable[[], Any]) -> None:
        try:
            report = call()
        except RefineError as exc:
            self.figures.refusals[exc.code] += 1
            return
        self.figures.actions[action] += 1
        self.say(f"{action} {report.goal_id}: {report.outcome} ({report.process})")

    def say(self, text: str) -> None:
        if self.log is not None:
            print(text, file=self.log, flush=True)

    # --- the run -------------------------------------------------------------------------------

    def step(self, goals_target: int) -> None:
        r = self.rng.random()
        if r < 0.35 and self.created < goals_target:
            self.create_goal()
        elif r < 0.50:
            self.stop()
        elif r < 0.58:
            self.cancel()
        elif r < 0.66:
            self.release()
        elif r < 0.72:
            self.cleanup()
        elif r < 0.80:
            self.kill_worker()
        elif r < 0.84:
            self.kill_node()
        elif r < 0.90:
            self.cli_action_killed()
        self.restart_nodes()

    def campaign_done(self) -> bool:
        """The campaign the soak must have run (test_soak.py checks it): MIN_GOALS goals,
        both kinds of crash and a node restart, a Stop, a Cancel, a Release and a `refine`
        action from another process. It is counted in steps, not seconds: on a loaded machine
        the steps are slower, so the soak runs until it is done."""
        f = self.figures
        return (
            self.created >= MIN_GOALS
            and f.kills["node"] >= 1
            and f.kills["worker"] >= 1
            and f.restarts >= 1
            and {"stop", "cancel", "release"} <= set(f.actions)
            and cli_actions(f) >= 1
        )

    def drain(self, timeout_s: float) -> None:
        """Cancel what is left (held Goals stay held), restart every node, let cleanup finish."""
        self.restart_nodes(force=True)
        for goal in self.goals.list(status=["queued", "running"]):
            self.cancel(goal)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.unsettled() and not self.workers():
                return
            self.cleanup(min_age_s=4.0)
            time.sleep(0.5)

    def unsettled(self) -> list[str]:
        return [
            f"{g.goal_id} ({g.status})"
            for g in self.goals.list()
            if (run := self.goals.current_run(g)) is not None and run.status == "running"
        ]

    def finish(self) -> Figures:
        f = self.figures
        for proc in self.nodes.values():
            if proc is not None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=30)
        f.unsettled = self.unsettled()
        deadline = time.monotonic() + 10
        while ours(self.marker) and time.monotonic() < deadline:
            time.sleep(0.1)
        f.still_running = [_label(p) for p in ours(self.marker)]
        for proc in ours(self.marker):  # leave nothing behind, even when the check failed
            with contextlib.suppress(psutil.Error):
                proc.kill()
        report = check_journal(self.journal)
        f.violations = [
            f"{v.aggregate_id} at {list(v.sequences)}: {v.message}" for v in report.violations
        ]
        f.goals = report.goals
        f.events = report.events
        f.statuses = Counter(g.status for g in self.goals.list())
        with sqlite3.connect(self.path) as raw:
            f.commands = raw.execute("SELECT count(*) FROM receipts").fetchone()[0]
        f.decoy_signals = self.decoys.signals_received()
        f.decoys_alive = self.decoys.all_alive()
        return f

    def close(self) -> None:
        for proc in self.nodes.values():
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
        for proc in ours(self.marker):
            with contextlib.suppress(psutil.Error):
                proc.kill()
        self.decoys.close()
        self.journal.close()


def run_soak(
    root: Path,
    *,
    seconds: float = 0.0,
    seed: int,
    goals_target: int | None = None,
    drain_s: float = 40.0,
    step_s: float = 0.15,
    log: TextIO | None = None,
) -> Figures:
    """Run the soak until its campaign is done and at least ``seconds`` have passed (then the
    drain) and return its figures."""
    soak = Soak(root, seed, log)
    started = time.monotonic()
    try:
        for node in NODES:
            soak.start_node(node)
        target = goals_target if goals_target is not None else max(MIN_GOALS, int(seconds * 2))
        while (elapsed := time.monotonic() - started) < seconds or (
            not soak.campaign_done() and elapsed < max(MAX_S, 3 * seconds)
        ):
            soak.step(target)
            time.sleep(step_s)
        soak.drain(drain_s)
        figures = soak.finish()
    finally:
        soak.close()
    figures.seconds = time.monotonic() - started
    return figures


def cli_actions(figures: Figures) -> int:
    """`refine stop|cancel` processes run: finished, or SIGKILLed mid-action."""
    done = sum(n for action, n in figures.actions.items() if action.startswith("cli-"))
    return done + figures.kills["operator"]


def _label(proc: psutil.Process) -> str:
    """Which of our processes it is: node, worker or recipe, and of which goal."""
    try:
        argv = proc.cmdline()
    except psutil.Error:
        return f"pid {proc.pid} (gone)"
    if "store.node.scheduler" in argv:
        return f"node {argv[argv.index('--node') + 1]} pid {proc.pid}"
    if "store.worker" in argv:
        return f"worker of {argv[argv.index('--goal') + 1]} pid {proc.pid}"
    with contextlib.suppress(OSError):
        return f"recipe of {Path(argv[-1]).name} pid {proc.pid} pgid {os.getpgid(proc.pid)}"
    return f"recipe of {Path(argv[-1]).name} pid {proc.pid}"
