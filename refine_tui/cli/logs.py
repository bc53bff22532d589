"""`refine logs RUN|GOAL [--epoch E] [--follow]`: an attempt's log, from this node's state dir.

The log is the recipe's own output: its bytes go to stdout exactly as written (no escaping, no
formatting of ours; a terminal shows them as the recipe meant). Where it is and how it is
followed are the store's (``store.ops.attempt_log``); this module parses and prints.
"""

from __future__ import annotations

import argparse
import sys

from refine_tui.cli.common import (
    EXIT_OK,
    OutputError,
    journal_path,
    node_name,
    open_journal,
    printable,
)
from refine_tui.cli.values import positive_int
from store.errors import NoLogError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "target", metavar="RUN|GOAL", help="a run (GOAL.rN), or a goal: its current run"
    )
    parser.add_argument(
        "--epoch", type=positive_int, metavar="E", help="the attempt (default: the latest)"
    )
    parser.add_argument(
        "--follow", "-f", action="store_true",
        help="keep printing what the log gains until the attempt ends (default: print and exit)",
    )  # fmt: skip


def cmd_logs(args: argparse.Namespace) -> int:
    from store.ops.attempt_log import LogReader, locate_log

    with open_journal(args, write=False) as journal:
        log = locate_log(journal, args.target, args.epoch, node_name(args))
        reader = LogReader(log.path)
        if not reader.exists():
            if not log.running:
                raise NoLogError(
                    f"{log.name} left no log on node {log.node_id} (none at {log.path})",
                    run_id=log.run_id,
                )
            waiting = ": waiting for it" if args.follow else ""
            note(f"{log.name} runs and has no output yet{waiting}")
        reader.read(write)
        if args.follow and log.running:
            import asyncio

            from store.ops.attempt_log import follow

            asyncio.run(follow(journal, journal_path(args), log, reader, write))
    return EXIT_OK


def write(data: bytes) -> None:
    """The log's bytes as they are, flushed at once (a reader of a pipe sees them as written)."""
    if sys.stdout is None:
        raise OutputError("standard output is closed")
    try:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise OutputError(exc.strerror or str(exc)) from None


def note(text: str) -> None:
    print(f"refine: logs: {printable(text)}", file=sys.stderr, flush=True)
