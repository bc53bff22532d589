"""Cancelling many Goals by selection (DESIGN §15): the batch against one command at a time.

    python -m bench.bulk [--goals 1000] [--rounds 3] [--fsync]

Each round gives both contenders a fresh journal holding ``--goals`` queued Goals of node n1
(and as many of node n2, which the selection leaves out), on SQLite (a file, synchronous=FULL as
the CLI opens it) and on PostgreSQL (a server of the bench's own; ``fsync`` off by default as
in the tests, ``--fsync`` turns it on):

- batch: ``plan_bulk`` with the selection ``node=n1, status=queued``, then ``run_bulk`` —
  what `refine cancel --node n1 --status queued --reason R` does: one command (own command id,
  receipt and events) per Goal;
- one by one: ``cancel_goal`` per Goal, as a script calling `refine cancel G` in a loop would
  (without the process start-ups).

Target: the batch commits all 1,000 intents within 2 s on both backends. Prints medians.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
if str(_ROOT) not in sys.path:  # tests/helpers lives beside the package, not in it
    sys.path.insert(0, str(_ROOT))

from store.journal.api import Journal  # noqa: E402
from store.model.goals import Goals  # noqa: E402
from store.ops.bulk import Selection, plan_bulk, run_bulk  # noqa: E402
from store.ops.operator import cancel_goal  # noqa: E402
from tests.helpers.postgres_server import PostgresServer  # noqa: E402

NODE, OTHER = "n1", "n2"
Timing = tuple[float, float]  # (plan s, commands s): wall clock


def fill(location: str, goals: int) -> None:
    """``goals`` queued Goals on n1 and as many on n2 (not selected)."""
    with Journal.open(location, synchronous="NORMAL") as journal:
        made = Goals(journal)
        for i in range(goals):
            for node in (NODE, OTHER):
                made.create(goal_id=f"{node}-g{i}", title=f"job {i}", node_id=node, argv=["true"])


def batch(location: str) -> Timing:
    with Journal.open(location, create=False) as journal:
        started = time.perf_counter()
        plan = plan_bulk(
            journal,
            "cancel",
            node=NODE,
            selection=Selection(NODE, ("queued",)),
        )
        planned = time.perf_counter()
        report = run_bulk(journal, plan, reason="bench: retire n1", operator="bench")
        done = time.perf_counter()
    if not report.ok or not report.goals:
        raise RuntimeError(f"the batch did not cancel every goal: {report.summary()}")
    return planned - started, done - planned


def one_by_one(location: str) -> Timing:
    with Journal.open(location, create=False) as journal:
        started = time.perf_counter()
        ids = [g.goal_id for g in Goals(journal).list(status="queued", node_id=NODE)]
        planned = time.perf_counter()
        for goal_id in ids:
            cancel_goal(journal, goal_id, reason="bench: retire n1", node=NODE, operator="bench")
        done = time.perf_counter()
    return planned - started, done - planned


CONTENDERS: dict[str, Callable[[str], Timing]] = {"batch": batch, "one by one": one_by_one}


@contextlib.contextmanager
def sqlite_journals(goals: int) -> Iterator[Callable[[], Iterator[str]]]:
    """Fresh copies of one filled journal file."""
    with tempfile.TemporaryDirectory(prefix="refine-bench-bulk-") as folder:
        template = Path(folder) / "template.db"
        fill(str(template), goals)
        Journal.open(template).close()  # the last close checkpoints: one file to copy
        count = 0

        @contextlib.contextmanager
        def fresh() -> Iterator[str]:
            nonlocal count
            count += 1
            path = Path(folder) / f"round{count}.db"
            shutil.copyfile(template, path)
            yield str(path)

        yield fresh


@contextlib.contextmanager
def postgres_journals(goals: int, fsync: bool) -> Iterator[Callable[[], Iterator[str]]]:
    """Fresh databases on a server of the bench's own, each filled anew."""
    server = PostgresServer.start_new(fsync=fsync)
    try:

        @contextlib.contextmanager
        def fresh() -> Iterator[str]:
            url = server.create_database()
            try:
                fill(url, goals)
                yield url
            finally:
                server.drop_database(url)

        yield fresh
    finally:
        server.destroy()


def measure(
    goals: int, rounds: int, fsync: bool, log: Callable[[str], None] = lambda _: None
) -> dict[tuple[str, str], list[Timing]]:
    """(backend, contender) → timings, the contenders interleaved round by round."""
    out: dict[tuple[str, str], list[Timing]] = {}
    with sqlite_journals(goals) as sqlite, postgres_journals(goals, fsync) as postgres:
        backends = {"SQLite": sqlite, "PostgreSQL": postgres}
        names = list(CONTENDERS)
        for r in range(rounds):
            for backend, fresh in backends.items():
                for name in names[r % 2 :] + names[: r % 2]:
                    with fresh() as location:
                        out.setdefault((backend, name), []).append(CONTENDERS[name](location))
            log(f"bulk: round {r + 1}/{rounds}")
    return out


def rows(
    m: dict[tuple[str, str], list[Timing]], goals: int, fsync: bool
) -> list[tuple[str, str, str]]:
    out = []
    for backend in ("SQLite", "PostgreSQL"):
        setting = "synchronous=FULL" if backend == "SQLite" else f"fsync {'on' if fsync else 'off'}"
        plan = statistics.median(t[0] for t in m[(backend, "batch")])
        batch = statistics.median(t[1] for t in m[(backend, "batch")])
        single = statistics.median(t[1] for t in m[(backend, "one by one")])
        out.append((
            f"cancel {goals:,} goals by selection, {backend} ({setting})",
            f"plan {plan:.2f} s, intents {batch:.2f} s ({goals / batch:,.0f}/s)"
            f" · one by one {single:.2f} s",
            "intents ≤ 2 s",
        ))  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--goals", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--fsync", action="store_true", help="PostgreSQL with fsync on")
    args = parser.parse_args(argv)
    m = measure(args.goals, args.rounds, args.fsync, log=lambda s: print(f"  · {s}", flush=True))
    for figure, value, target in rows(m, args.goals, args.fsync):
        print(f"{figure}: {value}  [target {target}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
