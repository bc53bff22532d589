"""`refine events`: the journal's events in commit order, for scripts (DESIGN §16).

``--json`` prints one JSON object per line (exact: every character of the journal's text comes
back with ``jq``); without it, one readable line per event with control characters shown as
escapes, as in every other table of the CLI. The reading, following and resuming are the
store's (``store.ops.event_stream``); this module only parses the options and prints.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from refine_tui.cli.common import EXIT_OK, OutputError, journal_path, open_journal, printable
from refine_tui.cli.reads import require_goal
from refine_tui.visible import visible
from store.ops.event_stream import EventFilter, EventStream, StreamedEvent, unknown_types


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--after", type=sequence_number, default=0, metavar="SEQ",
        help="only events after this sequence (the last one a reader saw: resume there)",
    )  # fmt: skip
    parser.add_argument(
        "--follow", action="store_true", help="keep printing new events as they commit"
    )
    parser.add_argument(
        "--type", type=type_names, metavar="T[,T]", help="only events of these types"
    )
    parser.add_argument("--goal", metavar="G", help="only events of this goal and its runs")


def sequence_number(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"not a sequence number (0 or more): {text!r}")
    return int(text)


def type_names(text: str) -> frozenset[str]:
    names = frozenset(n.strip() for n in text.split(","))
    unknown = unknown_types(names)
    if not text.strip() or "" in names or unknown:
        from store.ops.event_stream import EVENT_TYPES

        raise argparse.ArgumentTypeError(
            f"unknown event type {', '.join(unknown) or repr(text)}; the types are"
            f" {', '.join(sorted(EVENT_TYPES))}"
        )
    return names


def cmd_events(args: argparse.Namespace) -> int:
    journal = open_journal(args, write=False)
    try:
        if args.goal is not None:
            from store.model.goals import Goals

            require_goal(Goals(journal), args.goal)
        wanted = EventFilter(args.type, args.goal)
        stream = EventStream(journal_path(args), after=args.after, journal=journal, note=note)
    except BaseException:
        journal.close()
        raise
    try:

        def deliver(page: list[StreamedEvent]) -> None:
            write([line(e, as_json=args.json) for e in page if wanted(e)])

        for page in stream.pages():  # what is there now; a failure here is the answer (exit 3)
            deliver(page)
        if args.follow:
            import asyncio

            asyncio.run(stream.follow(deliver, output=output_fd()))
    finally:
        stream.close()
    return EXIT_OK


def output_fd() -> int | None:
    try:
        return sys.stdout.fileno() if sys.stdout is not None else None
    except (OSError, ValueError, AttributeError):  # not a real file (a test's capture)
        return None


def line(streamed: StreamedEvent, *, as_json: bool) -> str:
    if as_json:  # ASCII only: exact whatever the terminal's encoding, one line per event
        return json.dumps(streamed.to_json(), sort_keys=True)
    event = streamed.event
    return printable(
        f"{event.sequence:>8}  {utc(event.committed_at)}  {event.type}  {event.aggregate_id}"
        f"  by {streamed.command_id}  {data_text(event.data)}"
    )


def utc(at: float) -> str:
    seconds, millis = divmod(int(at * 1000), 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"


def data_text(data: Any) -> str:
    """``key=value ...``: text as it is (controls made visible), anything else as JSON."""
    parts = []
    for key, value in data.items():
        shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        parts.append(f"{visible(str(key))}={visible(shown)}")
    return " ".join(parts)


def write(lines: list[str]) -> None:
    """Print and flush at once: a reader of a pipe sees each event as it commits."""
    if not lines:
        return
    if sys.stdout is None:
        raise OutputError("standard output is closed")
    try:
        sys.stdout.write("\n".join(lines) + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise OutputError(exc.strerror or str(exc)) from None


def note(text: str) -> None:
    print(f"refine: events: {printable(text)}", file=sys.stderr, flush=True)
