"""What every `refine` command shares: exit codes, the journal it names, output made visible."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from refine_tui.visible import cells, visible
from store.errors import JournalMissingError
from store.journal.locations import JournalLocation

# Each command imports the store modules it uses: a quick `refine goals` must not pay for the
# operator's process tools (psutil), the checker or the dashboard (DESIGN §9, CLI start-up).
if TYPE_CHECKING:
    from store.journal.api import Journal


EXIT_OK, EXIT_REFUSED, EXIT_USAGE, EXIT_UNAVAILABLE, EXIT_NOT_YET = 0, 1, 2, 3, 4
MAX_CAPACITY = 1024  # attempts a node runs at once
EXIT_PIPE = 128 + 13  # as a tool ended by SIGPIPE: the shell's `| head` convention
EXIT_INTERRUPTED, EXIT_TERMINATED = 128 + 2, 128 + 15  # SIGINT, SIGTERM
DEFAULT_JOURNAL = Path(".refine") / "journal.db"


class UsageError(Exception):
    """Bad command-line usage: exit 2 with one line."""


def journal_text(args: argparse.Namespace) -> str:
    """The journal's location as given: ``--journal``, else ``$REFINE_JOURNAL``, else default."""
    return args.journal or os.environ.get("REFINE_JOURNAL") or str(DEFAULT_JOURNAL)


def journal_path(args: argparse.Namespace) -> JournalLocation:
    """The journal's location: a file, or a server's URL (``JournalLocation`` tells which)."""
    return JournalLocation(journal_text(args))


def node_name(args: argparse.Namespace) -> str:
    from store.ops.operator import default_node

    return args.node or default_node()


TITLE_WIDTH, REASON_WIDTH = 30, 40  # table cells cut with …; `show` and --json have it all


class OutputError(Exception):
    """Standard output cannot be written (a full disk, a closed descriptor): the command itself
    was done, only its report is lost. Not a bug, so never INTERNAL."""


def emit(args: argparse.Namespace, data: Any, text: str) -> None:
    if args.json:
        out = json.dumps(data, indent=2, sort_keys=True)
    else:  # every line made visible (idempotent): nothing reaches the terminal as control
        out = "\n".join(printable(line) for line in text.split("\n"))
    write_out(out + "\n")


def write_out(out: str) -> None:
    """Write to stdout; a closed or failing stdout is an OutputError (a closed pipe stays one)."""
    if sys.stdout is None:  # started with stdout closed: print would drop it without a word
        raise OutputError("standard output is closed")
    try:
        sys.stdout.write(out)
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise OutputError(exc.strerror or str(exc)) from None


def flush_stdout() -> None:
    """Flush now, so a closed pipe or a full disk shows here, not in the interpreter's exit."""
    if sys.stdout is None:
        return
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise OutputError(exc.strerror or str(exc)) from None


def printable(text: str) -> str:
    """Control characters and undecodable bytes of a path (surrogates) shown as escapes."""
    return visible(text).encode("utf-8", "backslashreplace").decode()


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Columns aligned by display width (CJK and emoji take two cells), controls visible."""
    return "\n".join(StreamedTable(headers).lines(rows))


class StreamedTable:
    """A table printed a page at a time (`refine goals` on a million Goals): each column as wide
    as its widest cell so far. A later page may widen a column, never narrow one; a listing of
    one page is exactly the table its rows make."""

    def __init__(self, headers: Sequence[str]) -> None:
        self.headers: list[str] | None = [h.upper() for h in headers]
        self.widths = [len(h) for h in headers]

    def lines(self, rows: Sequence[Sequence[Any]]) -> list[str]:
        """The lines of these rows (after the header, the first time)."""
        shown = [[("-" if v is None else visible(str(v))) for v in row] for row in rows]
        for row in shown:
            self.widths = [max(w, cells(c)) for w, c in zip(self.widths, row, strict=True)]
        head, self.headers = ([self.headers] if self.headers else []), None
        return [
            "  ".join(pad(c, w) for c, w in zip(r, self.widths, strict=True)).rstrip()
            for r in head + shown
        ]


def pad(text: str, width: int) -> str:
    return text + " " * (width - cells(text))


def open_journal(args: argparse.Namespace, *, write: bool) -> Journal:
    """Every command but init needs an existing journal; reads never create or modify it."""
    from store.journal.api import Journal

    location = journal_path(args)
    if location.missing_file():
        raise JournalMissingError(f"journal missing: {location} (create it with `refine init`)")
    return Journal.open(location, read_only=not write, create=False)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the command is, as Ctrl+C raises KeyboardInterrupt: the same
    clean-up runs (a copy removes what it made; psycopg cancels the query in the server)."""


@contextlib.contextmanager
def terminated_as_interrupted() -> Iterator[None]:
    """While the block runs, SIGTERM raises Terminated (only the main thread gets signals)."""
    import logging
    import signal
    import threading

    # Raised in the middle of a COPY, it leaves psycopg a rollback it cannot send and logs; the
    # connection is closed next and the server rolls back. One line is the command's own.
    logging.getLogger("psycopg").addHandler(logging.NullHandler())
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminated(signum: int, frame: object) -> None:
        raise Terminated

    before = signal.signal(signal.SIGTERM, terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)
