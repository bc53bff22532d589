"""CLI start-up (DESIGN §9): `refine goals`, `show`, `stop`, `cancel` on a small journal against
a bare `python -c pass`.

    python -m bench.cli [--runs 30] [--trees OLD NEW]

Like hyperfine: each command runs ``--runs`` times after a warm-up, interleaved (bare, goals,
show, stop, cancel, bare …) so all see the same machine; the figure is the median wall time of
each and its ratio to bare, with the ratio of median CPU times (user + system of the process,
steadier than wall time on a busy machine) beside it. ``--trees A B``: the CPU medians of the
same commands run from each source tree (its ``PYTHONPATH``) in one interleaved loop, side by
side (e.g. a ``git archive`` of the commit before beside this checkout). `stop` is refused
(the goal is queued: exit 1) after its decision; `cancel` cancels a fresh queued goal each
time (a real write, fsync included). Also reports whether `goals` imported Textual (it must
not). Bytecode is cached as in an installed package (``PYTHONPYCACHEPREFIX`` in a temporary
folder, even where ``PYTHONDONTWRITEBYTECODE`` is set), so the figure is start-up, not
compilation.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET = 2.0
_ROOT = str(Path(__file__).resolve().parent.parent)


def _env(pycache: Path) -> dict[str, str]:
    path = os.pathsep.join(filter(None, [_ROOT, os.environ.get("PYTHONPATH", "")]))
    env = {**os.environ, "PYTHONPATH": path, "PYTHONPYCACHEPREFIX": str(pycache)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _small_journal(folder: Path, name: str, goals: int) -> Path:
    from store.journal.sqlite import Journal
    from store.model.goals import Goals

    path = folder / name
    with Journal.open(path) as journal:
        for n in range(goals):
            Goals(journal).create(goal_id=f"g{n}", title=f"goal {n}", node_id="n1", argv=["true"])
    return path


def _wall(
    command: list[str], expect: int, *, env: dict[str, str], tree: str = _ROOT
) -> tuple[float, float]:
    """Wall and CPU seconds of one run (the CPU of the child just waited for), run in ``tree``:
    ``python -m`` puts the working directory first on sys.path, before ``PYTHONPATH``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    done = subprocess.run(
        command, env=env, cwd=tree, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    elapsed = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != expect:
        raise RuntimeError(f"{command} exited {done.returncode}, expected {expect}")
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return elapsed, cpu


COMMANDS = ("goals", "show", "stop", "cancel")
# `refine goals` through the console script a user runs (pip's wrapper beside the interpreter,
# as the README's `pip install -e` makes it), when there is one.
SCRIPT = Path(sys.executable).with_name("refine")


def measure(runs: int = 30) -> dict[str, float]:
    """Median ms of a bare interpreter and of each command, their ratios, Textual imported."""
    with tempfile.TemporaryDirectory(prefix="refine-cli-") as scratch:
        env = _env(Path(scratch) / "pycache")
        journal = _small_journal(Path(scratch), "journal.db", 10)
        to_cancel = _small_journal(Path(scratch), "cancel.db", runs + 1)

        def argv(name: str, n: int) -> tuple[list[str], int]:
            if name == "script":
                return [str(SCRIPT), "--node", "n1", "--journal", str(journal), "goals"], 0
            return _argv(name, n, journal, to_cancel)

        names = ("bare", *COMMANDS, *(["script"] if SCRIPT.exists() else []))
        for name in names:  # warm: .pyc files and the page cache
            _wall(*argv(name, runs), env=env)
        times: dict[str, list[float]] = {name: [] for name in names}
        cpus: dict[str, list[float]] = {name: [] for name in names}
        for n in range(runs):
            for name in names:
                wall, cpu = _wall(*argv(name, n), env=env)
                times[name].append(wall)
                cpus[name].append(cpu)
        probe = subprocess.run(
            [sys.executable, "-c", _PROBE, str(journal)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
    bare_ms = statistics.median(times["bare"]) * 1000
    bare_cpu = statistics.median(cpus["bare"]) * 1000
    m = {"bare_ms": bare_ms, "bare_cpu_ms": bare_cpu}
    m["textual"] = float(probe.stdout.strip() == "True")
    for name in COMMANDS:
        m[f"{name}_ms"] = statistics.median(times[name]) * 1000
        m[f"{name}_ratio"] = m[f"{name}_ms"] / bare_ms
        m[f"{name}_cpu_ratio"] = statistics.median(cpus[name]) * 1000 / max(bare_cpu, 1e-3)
    m["ratio"] = m["goals_ratio"]
    if times.get("script"):
        m["script_ms"] = statistics.median(times["script"]) * 1000
        m["script_ratio"] = m["script_ms"] / bare_ms
        m["script_cpu_ratio"] = statistics.median(cpus["script"]) * 1000 / max(bare_cpu, 1e-3)
    return m


# `refine goals` in-process, then: did anything import Textual?
_PROBE = """
import contextlib, io, sys
from refine_tui.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    main(["--journal", sys.argv[1], "goals"])
print(any(m == "textual" or m.startswith("textual.") for m in sys.modules))
"""


def rows(m: dict[str, float]) -> list[tuple[str, str, str]]:
    textual = "imports Textual!" if m["textual"] else "no Textual import"
    others = " · ".join(
        f"{name} {m[f'{name}_ms']:.0f} ms {m[f'{name}_ratio']:.2f}×"
        f" (CPU {m[f'{name}_cpu_ratio']:.2f}×)"
        for name in COMMANDS[1:]
    )
    return [
        (
            "CLI start-up, `refine goals` (10 goals)",
            f"{m['goals_ms']:.0f} ms vs bare python {m['bare_ms']:.0f} ms:"
            f" {m['ratio']:.2f}× (CPU {m['goals_cpu_ratio']:.2f}×; {textual})",
            f"≤ {TARGET:.0f}× bare python",
        ),
        ("CLI start-up, `show`, `stop`, `cancel`", others, f"≤ {TARGET:.0f}× bare python each"),
        *(
            [
                (
                    "CLI start-up, `refine goals` through the console script",
                    f"{m['script_ms']:.0f} ms: {m['script_ratio']:.2f}×"
                    f" (CPU {m['script_cpu_ratio']:.2f}×)",
                    f"≤ {TARGET:.0f}× bare python",
                )
            ]
            if "script_ms" in m
            else []
        ),
    ]


def compare(trees: list[str], runs: int) -> dict[str, dict[str, float]]:
    """CPU ms (median) of bare Python and each command per tree, all in one interleaved loop."""
    cpus: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="refine-cli-") as scratch:
        base = _env(Path(scratch) / "pycache")
        journal = _small_journal(Path(scratch), "journal.db", 10)
        to_cancel = {t: _small_journal(Path(scratch), f"cancel{i}.db", runs + 1)
                     for i, t in enumerate(trees)}  # fmt: skip
        for n in (runs, *range(runs)):  # first the warm-up round (its own goal to cancel)
            for tree in trees:
                where = os.path.abspath(tree)
                env = {**base, "PYTHONPATH": where}
                for name in ("bare", *COMMANDS):
                    command = _argv(name, n, journal, to_cancel[tree], where)
                    _, cpu = _wall(*command, env=env, tree=where)
                    if n < runs:
                        cpus.setdefault((tree, name), []).append(cpu)
    return {
        tree: {name: statistics.median(cpus[(tree, name)]) * 1000 for name in ("bare", *COMMANDS)}
        for tree in trees
    }


def _entry(tree: str | None = None) -> str:
    """The module the console scripts run (``refine_tui.launch``), or in a tree from before it
    the command line's own package."""
    root = Path(tree) if tree else Path(_ROOT)
    return "refine_tui.launch" if (root / "refine_tui" / "launch.py").exists() else "refine_tui.cli"


def _argv(
    name: str, n: int, journal: Path, to_cancel: Path, tree: str | None = None
) -> tuple[list[str], int]:
    """Run ``n``'s command line for ``name`` and the exit code it must end with (``cancel``
    cancels goal ``g<n>`` of ``to_cancel``: a fresh queued one each run)."""
    refine = [sys.executable, "-m", _entry(tree), "--node", "n1", "--journal"]
    if name == "bare":
        return [sys.executable, "-c", "pass"], 0
    if name == "cancel":
        return [*refine, str(to_cancel), "cancel", f"g{n}", "--reason", "bench"], 0
    rest = {"goals": ["goals"], "show": ["show", "g1"], "stop": ["stop", "g1"]}[name]
    return [*refine, str(journal), *rest], 1 if name == "stop" else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--trees", nargs="+", help="source trees to compare side by side")
    args = parser.parse_args(argv)
    if args.trees:
        for tree, ms in compare(args.trees, args.runs).items():
            ratios = " · ".join(f"{c} {ms[c]:.1f} ms {ms[c] / ms['bare']:.2f}×" for c in COMMANDS)
            print(f"{tree}: CPU, bare python {ms['bare']:.1f} ms · {ratios}")
        return 0
    m = measure(args.runs)
    for row in rows(m):
        print(f"{row[0]}: {row[1]}")
    met = all(m[f"{name}_ratio"] <= TARGET for name in COMMANDS)
    return 0 if met and not m["textual"] else 1


if __name__ == "__main__":
    sys.exit(main())
