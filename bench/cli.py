"""CLI start-up (DESIGN §9): `refine goals` on a small journal against a bare `python -c pass`.

    python -m bench.cli [--runs 30]

Like hyperfine: each command runs ``--runs`` times after a warm-up, interleaved (bare, goals,
bare, goals …) so both see the same machine; the figure is the median wall time of each and
their ratio. Also reports whether the command imported Textual (it must not). Bytecode is
cached as in an installed package (``PYTHONPYCACHEPREFIX`` in a temporary folder, even where
``PYTHONDONTWRITEBYTECODE`` is set), so the figure is start-up, not compilation.
"""

from __future__ import annotations

import argparse
import os
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


def _small_journal(folder: Path) -> Path:
    from store.goals import Goals
    from store.journal import Journal

    path = folder / "journal.db"
    with Journal.open(path) as journal:
        goals = Goals(journal)
        for n in range(10):
            goals.create(goal_id=f"g{n}", title=f"goal {n}", node_id="n1", argv=["true"])
    return path


def _wall(command: list[str], env: dict[str, str]) -> float:
    began = time.perf_counter()
    subprocess.run(command, env=env, stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - began


def measure(runs: int = 30) -> dict[str, float]:
    """Median ms of a bare interpreter and of `refine goals`, their ratio, Textual imported."""
    with tempfile.TemporaryDirectory(prefix="refine-cli-") as scratch:
        env = _env(Path(scratch) / "pycache")
        journal = _small_journal(Path(scratch))
        bare = [sys.executable, "-c", "pass"]
        goals = [sys.executable, "-m", "refine_tui.cli", "--journal", str(journal), "goals"]
        for command in (bare, goals):  # warm: .pyc files and the page cache
            _wall(command, env)
        times: dict[str, list[float]] = {"bare": [], "goals": []}
        for _ in range(runs):
            times["bare"].append(_wall(bare, env))
            times["goals"].append(_wall(goals, env))
        probe = subprocess.run(
            [sys.executable, "-c", _PROBE, str(journal)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
    bare_ms = statistics.median(times["bare"]) * 1000
    goals_ms = statistics.median(times["goals"]) * 1000
    return {
        "bare_ms": bare_ms,
        "goals_ms": goals_ms,
        "ratio": goals_ms / bare_ms,
        "textual": float(probe.stdout.strip() == "True"),
    }


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
    return [
        (
            "CLI start-up, `refine goals` (10 goals)",
            f"{m['goals_ms']:.0f} ms vs bare python {m['bare_ms']:.0f} ms:"
            f" {m['ratio']:.2f}× ({textual})",
            f"≤ {TARGET:.0f}× bare python",
        )
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args(argv)
    m = measure(args.runs)
    print(rows(m)[0][1])
    return 0 if m["ratio"] <= TARGET and not m["textual"] else 1


if __name__ == "__main__":
    sys.exit(main())
