"""A longer soak than CI's: ``python scripts/soak.py [--seconds 600] [--seed 7] [--dir DIR]``.

Prints the figures (goals, commands, kills, violations); exit 0 only when the soak was clean.
Two real nodes on one journal, random recipes, random Stop / Cancel / Confirm cleanup / Release,
SIGKILL of nodes and workers; see tests/helpers/soak_run.py.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.helpers.soak_run import run_soak  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--goals", type=int, default=None, help="goals to create (default 2/s)")
    parser.add_argument("--dir", type=Path, default=None, help="keep the journal here")
    parser.add_argument("--verbose", action="store_true", help="print every action")
    args = parser.parse_args()
    os.chdir(ROOT)
    with tempfile.TemporaryDirectory(prefix="refine-soak-") as tmp:
        root = args.dir or Path(tmp)
        figures = run_soak(
            root,
            seconds=args.seconds,
            seed=args.seed,
            goals_target=args.goals,
            log=sys.stdout if args.verbose else None,
        )
    print(figures.text())
    return 0 if figures.ok else 1


if __name__ == "__main__":
    sys.exit(main())
