"""Shared by the benchmarks: big valid journals built fast, a writer process, small statistics.

A journal of N Goals is built from a template: one Goal per *shape* (completed, queued, running on
another node, failed and requeued, …) is played through the real Goals API into a fresh journal,
then its rows (state, events, receipts) are copied N times with the Goal id rewritten and
the sequences shifted, in one transaction. Every copy is therefore a state the validators accept,
and the result passes ``check_journal`` (checked once per build; builds are cached by size).

The writer (``python -m bench.common writer PATH``) is "another process" for the benchmarks: it
reads commands on stdin (``create G``, ``start G``, ``settle G``, ``cancel G``, or
``load RATE SECONDS OP:G ...`` for a steady stream) and prints ``time.monotonic()`` right after
each commit (CLOCK_MONOTONIC is system-wide on Linux).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from store.journal.sqlite import SCHEMA_VERSION, Journal
from store.model.goals import Goals
from store.ops.check import check_journal

NODE = "n1"  # the dashboard's node
OTHER_NODE = "n2"
PLACEHOLDER = "zqxplaceholderqz"
BUILDER_VERSION = 1
CACHE = Path(tempfile.gettempdir()) / "refine-bench-cache"
# The dashboard with its pulses (DESIGN §17) and without (``RefineApp(pulses=False)``, ``refine
# tui --no-pulses``): the benches' ``--pulses on|off|both``, both measured side by side.
PULSE_ARMS: dict[str, tuple[bool, ...]] = {"on": (True,), "off": (False,), "both": (True, False)}

# Per 100 Goals. At 100k "busy" makes 25k active Goals (the dashboard lists at most 1,000 of
# them), and the first 1,000 active ids hold ~600 queued Goals for the latency samples. "quiet"
# has nothing running: nothing ticks, nothing to observe (the event-driven floor).
MIXES: dict[str, tuple[tuple[str, int], ...]] = {
    "busy": (
        ("completed", 70),
        ("queued", 15),
        ("running-other", 4),
        ("orphan", 1),  # running on this node with no process record: "needs cleanup"
        ("retrying", 4),
        ("cancelled", 3),
        ("exhausted", 2),
        ("held", 1),
    ),
    "quiet": (("completed", 75), ("queued", 19), ("cancelled", 3), ("exhausted", 2), ("held", 1)),
    "settled": (("completed", 93), ("cancelled", 4), ("exhausted", 3)),
}
SHAPES = tuple(shape for shape, _ in MIXES["busy"])
_SLOTS = {name: [s for s, count in mix for _ in range(count)] for name, mix in MIXES.items()}
# "history" (the million-goal journal, issue 27): a fleet's months of work. Its first 1,000 ids
# are the busy mix (50 running, 150 queued, …: what a fleet has in flight), every later one has
# settled. The active Goals are those of the 1,000-goal journal whatever the size, so a status
# query's time at 1M against 1k measures the journal's size, not the answer's.
HISTORY_ACTIVE_SPAN = 1000


def goal_id(i: int) -> str:
    return f"g{i:06d}"


def shape_of(i: int, mix: str = "busy") -> str:
    if mix == "history":
        mix = "busy" if i < HISTORY_ACTIVE_SPAN else "settled"
    # A multiplicative stride spreads shapes evenly but not periodically along the ids.
    slots = _SLOTS[mix]
    return slots[(i * 37) % len(slots)]


# --- building ----------------------------------------------------------------------------------


def _play(goals: Goals, shape: str, gid: str) -> None:
    """Drive one Goal through the API into ``shape``, as a node and its workers would."""
    node = OTHER_NODE if shape == "running-other" else NODE
    goals.create(
        goal_id=gid,
        title=f"{shape} {gid}",
        node_id=node,
        argv=["sh", "-c", "make check"],
        max_attempts=3,
        redelivery="operator" if shape == "held" else "safe",
    )
    run_id = gid + ".r1"

    def start(n: int) -> None:
        goals.start(goal_id=gid, node_id=node, worker=f"w-{n}", token=f"t{n}")

    if shape == "completed":
        start(1)
        goals.settle(goal_id=gid, run_id=run_id, epoch=1, outcome="completed", evidence=["log:1"])
    elif shape in ("running-other", "orphan"):
        start(1)
    elif shape == "retrying":
        start(1)
        goals.settle(goal_id=gid, run_id=run_id, epoch=1, outcome="failed", reason="exit 1")
    elif shape == "cancelled":
        goals.cancel(goal_id=gid, reason="superseded", command_id=f"op:cancel:{gid}")
    elif shape == "exhausted":
        for n in (1, 2, 3):
            start(n)
            goals.settle(goal_id=gid, run_id=run_id, epoch=n, outcome="failed", reason="exit 1")
    elif shape == "held":
        start(1)
        goal, run = goals.read(gid), goals.current_run(goals.read(gid))  # type: ignore[arg-type]
        assert goal is not None and run is not None
        goals.interrupt(
            goal_id=gid,
            run_id=run_id,
            epoch=1,
            goal_version=goal.version,
            run_version=run.version,
            confirmed_by=f"dana@{NODE}",
            method="sigterm",
            command_id=f"op:stop:{gid}",
        )


@dataclass
class _Template:
    aggregates: list[tuple]
    events: list[tuple]  # sequence first, 1-based within the shape
    receipts: list[tuple]


def _templates(folder: Path) -> dict[str, _Template]:
    path = folder / "template.db"
    out: dict[str, _Template] = {}
    with Journal.open(path, synchronous="NORMAL") as journal:
        goals = Goals(journal)
        for shape in SHAPES:
            _play(goals, shape, PLACEHOLDER + shape.replace("-", ""))
    conn = sqlite3.connect(path)
    try:
        for shape in SHAPES:
            key = PLACEHOLDER + shape.replace("-", "")
            like = f"%{key}%"
            events = conn.execute(
                "SELECT sequence, aggregate_id, version, type, data, command_id FROM events"
                " WHERE aggregate_id LIKE ? ORDER BY sequence",
                (like,),
            ).fetchall()
            first = events[0][0]
            out[shape] = _Template(
                aggregates=conn.execute(
                    "SELECT aggregate_id, kind, version, status, node_id, last_sequence - ?,"
                    " state FROM aggregates WHERE aggregate_id LIKE ?",
                    (first - 1, like),
                ).fetchall(),
                events=[(seq - first + 1, *rest) for seq, *rest in events],
                receipts=conn.execute(
                    "SELECT command_id, payload, result FROM receipts WHERE command_id LIKE ?",
                    (like,),
                ).fetchall(),
            )
    finally:
        conn.close()
    return out


def _fingerprint(templates: dict[str, _Template]) -> str:
    h = hashlib.sha256(f"{BUILDER_VERSION}:{SCHEMA_VERSION}".encode())
    for shape, t in sorted(templates.items()):
        h.update(repr((shape, t.aggregates, t.events, t.receipts)).encode())
    return h.hexdigest()[:16]


def shift_history(path: Path, ends_ago: float) -> None:
    """Move every commit time so the journal's last commit was ``ends_ago`` seconds ago.

    The cached journal keeps the times it was built at: its running attempts would be as old as
    the cache. Times live only in ``committed_at`` (claims start elapsed times from there).
    """
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        (last,) = conn.execute("SELECT max(committed_at) FROM events").fetchone()
        delta = time.time() - ends_ago - last
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("UPDATE events SET committed_at = committed_at + ?", (delta,))
        conn.execute("UPDATE receipts SET committed_at = committed_at + ?", (delta,))
        conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


def arm_label(pulses: bool, arms: Sequence[bool]) -> str:
    """A figure's ", pulses on|off" (nothing for the default: pulses on alone)."""
    return "" if tuple(arms) == (True,) else f", pulses {'on' if pulses else 'off'}"


def tui_args(pulses: bool) -> tuple[str, ...]:
    """``refine tui``'s options for an arm."""
    return () if pulses else ("--no-pulses",)


def build_journal(path: Path, n: int, templates: dict[str, _Template], mix: str = "busy") -> None:
    """Write ``n`` Goals (and their Runs) into a new journal at ``path`` in one transaction,
    in chunks of ``CHUNK`` Goals (a million Goals' rows at once would take gigabytes)."""
    Journal.open(path).close()  # the schema, pragmas and application id of a real journal
    total = sum(len(templates[shape_of(i, mix)].events) for i in range(n))
    start_at = time.time() - total * 0.05  # history spread over the last total/20 seconds
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA synchronous = OFF")
        conn.execute("PRAGMA cache_size = -262144")  # 256 MB: the indexes' pages stay cached
        conn.execute("BEGIN IMMEDIATE")
        base = 0
        for first in range(0, n, CHUNK):
            rows = _rows(range(first, min(n, first + CHUNK)), templates, mix, base, start_at)
            aggregates, events, receipts, base = rows
            conn.executemany("INSERT INTO aggregates VALUES (?, ?, ?, ?, ?, ?, ?)", aggregates)
            conn.executemany("INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?)", events)
            conn.executemany("INSERT INTO receipts VALUES (?, ?, ?, ?)", receipts)
        conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


CHUNK = 20_000


def _rows(
    ids: range, templates: dict[str, _Template], mix: str, base: int, start_at: float
) -> tuple[list[tuple], list[tuple], list[tuple], int]:
    """The rows of Goals ``ids`` whose events follow sequence ``base``; and the last sequence."""
    aggregates: list[tuple] = []
    events: list[tuple] = []
    receipts: list[tuple] = []
    for i in ids:
        shape = shape_of(i, mix)
        t = templates[shape]
        key, gid = PLACEHOLDER + shape.replace("-", ""), goal_id(i)

        def sub(text: str, key: str = key, gid: str = gid) -> str:
            return text.replace(key, gid)

        for agg, kind, version, status, node, last, state in t.aggregates:
            aggregates.append((sub(agg), kind, version, status, node, last + base, sub(state)))
        stamps: dict[str, float] = {}
        heads: dict[str, int] = {}  # each aggregate's event before (the journal's ``prev``)
        for seq, agg, version, type_, data, command_id in t.events:
            at = start_at + (seq + base) * 0.05
            stamps.setdefault(command_id, at)
            prev = heads.get(agg)
            heads[agg] = seq + base
            events.append(
                (seq + base, sub(agg), version, type_, sub(data), at, sub(command_id), prev)
            )
        for command_id, payload, result in t.receipts:
            receipts.append((sub(command_id), sub(payload), sub(result), stamps[command_id]))
        base += len(t.events)
    return aggregates, events, receipts, base


def journal_with(
    n: int, folder: Path, *, mix: str = "busy", log: Callable[[str], None] = lambda _: None
) -> Path:
    """A fresh copy of the ``n``-Goal journal in ``folder`` (built and checked once, cached)."""
    target = folder / "journal.db"
    shutil.copyfile(cached_journal(n, mix=mix, log=log), target)
    return target


def cached_journal(
    n: int, *, mix: str = "busy", log: Callable[[str], None] = lambda _: None
) -> Path:
    """The cached ``n``-Goal journal itself (built and checked once): open it only to read."""
    with tempfile.TemporaryDirectory() as scratch:
        templates = _templates(Path(scratch))
    cached = CACHE / f"goals-{n}-{mix}-{_fingerprint(templates)}.db"
    if cached.exists():
        return cached
    partial = cached.with_suffix(".partial")
    built = Path(f"{partial}.built")  # the rows are all in: a build cut short at the check
    if not built.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        for leftover in CACHE.glob(partial.name + "*"):
            leftover.unlink()
        started = time.perf_counter()
        build_journal(partial, n, templates, mix)
        built.write_text(f"{time.perf_counter() - started:.1f}\n")
    took = float(built.read_text())
    with Journal.open(partial, read_only=True) as journal:
        report = check_journal(journal)
    if not report.clean:
        raise RuntimeError(f"built journal fails check_journal:\n{report.text()}")
    os.replace(partial, cached)
    for side in ("-wal", "-shm", ".built"):
        Path(f"{partial}{side}").unlink(missing_ok=True)
    log(f"built {n:,} {mix} goals in {took:.1f} s; check_journal: {report.text()}")
    return cached


def build_only(n: int, mix: str) -> Path:
    """Build the rows of the ``n``-Goal journal into the cache, leaving the check to
    ``cached_journal`` (``python -m bench.common build N MIX``, e.g. in the background)."""
    with tempfile.TemporaryDirectory() as scratch:
        templates = _templates(Path(scratch))
    partial = CACHE / f"goals-{n}-{mix}-{_fingerprint(templates)}.partial"
    CACHE.mkdir(parents=True, exist_ok=True)
    for leftover in CACHE.glob(partial.name + "*"):
        leftover.unlink()
    started = time.perf_counter()
    build_journal(partial, n, templates, mix)
    Path(f"{partial}.built").write_text(f"{time.perf_counter() - started:.1f}\n")
    return partial


# --- the writer: another process committing -----------------------------------------------------


def writer_command(path: str | Path) -> list[str]:
    return [sys.executable, "-m", "bench.common", "writer", str(path)]


def _writer(path: str) -> None:
    with Journal.open(path, create=False) as journal:
        goals = Goals(journal)
        tokens = 0

        def apply(op: str, gid: str) -> None:
            nonlocal tokens
            goal = goals.read(gid) if op in ("start", "settle") else None
            if op == "start":
                assert goal is not None, gid
                tokens += 1
                goals.start(goal_id=gid, node_id=goal.node_id, worker="bench", token=f"b{tokens}")
            elif op == "settle":
                assert goal is not None, gid
                run = goals.current_run(goal)
                assert run is not None and run.attempts, gid
                goals.settle(
                    goal_id=gid,
                    run_id=goal.run_id,
                    epoch=run.attempts[-1].epoch,
                    outcome="completed",
                    evidence=["log:bench"],
                )
            elif op == "create":
                goals.create(goal_id=gid, title=f"load {gid}", node_id=NODE, argv=["true"])
            elif op == "cancel":
                goals.cancel(goal_id=gid, reason="bench", command_id=f"op:cancel:bench:{gid}")
            else:
                raise ValueError(op)

        for line in sys.stdin:
            op, *args = line.split()
            if op == "load":  # load RATE SECONDS OP:G ...: a steady stream of commits
                rate, seconds, steps = float(args[0]), float(args[1]), args[2:]
                begin, count = time.monotonic(), 0
                while count < len(steps) and (now := time.monotonic()) - begin < seconds:
                    due = begin + count / rate
                    if now < due:
                        time.sleep(due - now)
                    step_op, gid = steps[count].split(":")
                    apply(step_op, gid)
                    count += 1
                print(f"{count} {time.monotonic() - begin:.3f}", flush=True)
                continue
            apply(op, args[0])
            print(f"{time.monotonic():.6f}", flush=True)


# --- a real terminal: the dashboard inside tmux ------------------------------------------------


class TmuxDashboard:
    """``refine tui`` in a detached tmux session: a real terminal, a real process to measure."""

    def __init__(
        self,
        path: str | Path,
        size: tuple[int, int] = (120, 40),
        args: Sequence[str] = (),
        *,
        command: Sequence[str] = (),
    ) -> None:
        """``args``: ``refine tui``'s options (``--no-pulses``); ``command``: another program
        to run there instead (``path`` unused)."""
        self.session = f"refine-bench-{os.getpid()}-{time.monotonic_ns() % 10**9}"
        # A tmux server of its own (-L): the shared one exits with its last session, and a new
        # session asked for meanwhile failed (a whole `python -m bench` run lost at its end).
        self.socket = self.session
        if not command:
            command = [sys.executable, "-m", "refine_tui.cli", "--journal", str(path)]
            command += ["--node", NODE, "tui", *args]
        # A tmux server started earlier (by anyone) gives a new session its own environment:
        # pass ours, so the pane runs this tree's code (PYTHONPATH), not the server's.
        env = f"PYTHONPATH={os.environ.get('PYTHONPATH', '')}"
        self.started = time.monotonic()
        pane_pid = self._tmux(
            "new-session", "-d", "-P", "-F", "#{pane_pid}", "-s", self.session, "-e", env,
            "-c", os.getcwd(), "-x", str(size[0]), "-y", str(size[1]), " ".join(command),
        )  # fmt: skip
        self.process = _python_in(int(pane_pid))

    @staticmethod
    def available() -> bool:
        return shutil.which("tmux") is not None

    def _tmux(self, *args: str) -> str:
        return subprocess.run(
            ["tmux", "-L", self.socket, *args], capture_output=True, text=True, check=True
        ).stdout.strip()

    def screen(self) -> str:
        return self._tmux("capture-pane", "-p", "-t", self.session)

    def wait_for(self, predicate: Callable[[str], bool], timeout: float = 120.0) -> float:
        """Poll the screen every few ms until ``predicate`` holds; the monotonic time it did."""
        deadline = time.monotonic() + timeout
        while not predicate(self.screen()):
            if time.monotonic() > deadline:
                raise RuntimeError("the dashboard in tmux never showed what was expected")
            time.sleep(0.003)
        return time.monotonic()

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True)
        # tmux leaves its socket file behind when its server is killed.
        folder = Path(os.environ.get("TMUX_TMPDIR", "/tmp")) / f"tmux-{os.getuid()}"
        (folder / self.socket).unlink(missing_ok=True)

    def __enter__(self) -> TmuxDashboard:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _python_in(pid: int):  # -> psutil.Process
    """The dashboard's python process: the pane's process itself, or its child under a shell."""
    import psutil

    proc = psutil.Process(pid)
    deadline = time.monotonic() + 10
    while "python" not in " ".join(proc.cmdline()[:1]).lower():
        children = proc.children()
        if children:
            proc = children[0]
            continue
        if time.monotonic() > deadline:
            raise RuntimeError("no python process in the tmux pane")
        time.sleep(0.05)
    return proc


def row_line(screen: str, gid: str) -> str:
    """The screen line of Goal ``gid`` ('' when not on screen)."""
    return next((line for line in screen.splitlines() if gid in line), "")


# --- statistics --------------------------------------------------------------------------------


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100) of a non-empty sample."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(p / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def summary(values: Sequence[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "p50": statistics.median(values),
        "p95": percentile(values, 95),
        "min": min(values),
        "max": max(values),
    }


def cores() -> int:
    return os.cpu_count() or 1


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "writer":
        _writer(sys.argv[2])  # a file path or a postgresql:// URL
    elif len(sys.argv) == 4 and sys.argv[1] == "build":
        print(build_only(int(sys.argv[2]), sys.argv[3]))
    else:
        sys.exit("usage: python -m bench.common writer PATH | build N MIX")
