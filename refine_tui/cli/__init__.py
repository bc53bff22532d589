"""The `refine` command line: the same store functions the dashboard calls, for scripts.

Exit codes (DESIGN §11): 0 done, 1 refused by the model, 2 bad usage or input,
3 journal unavailable, 4 not yet (``WAIT_TIMEOUT``). Errors are one line naming the code, never a
traceback; with ``--json`` also ``{"error": {"code", "message"}}`` on stdout.
Human output shows text from the journal with its control characters made visible (``\\x1b``)
and is laid out by display width; ``--json`` is exact.

The package: ``common`` (exit codes, the journal named, output), ``values`` (argument types),
``parser`` (the grammar), ``reads`` (goals, runs, show, nodes, wait, check), ``actions`` (init,
goal add, stop, cancel, cleanup, release, copy), ``running`` (node, tui, serve, demo) and the
commands with modules of their own (``bulk``, ``events``, ``metrics``, ``logs``). ``main`` is
here; the names scripts and tests use are re-exported here.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import io
import json
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from refine_tui.cli.actions import (
    act,
    cmd_cancel,
    cmd_cleanup,
    cmd_cleanup_node,
    cmd_copy,
    cmd_goal_add,
    cmd_goal_without_subcommand,
    cmd_init,
    cmd_reassign,
    cmd_release,
    cmd_stop,
    default_goal_id,
)
from refine_tui.cli.common import (
    DEFAULT_JOURNAL,
    EXIT_INTERRUPTED,
    EXIT_NOT_YET,
    EXIT_OK,
    EXIT_PIPE,
    EXIT_REFUSED,
    EXIT_TERMINATED,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    OutputError,
    StreamedTable,
    Terminated,
    UsageError,
    emit,
    flush_stdout,
    journal_path,
    journal_text,
    node_name,
    open_journal,
    printable,
    table,
)
from refine_tui.cli.parser import COMMANDS, PRINTS_NO_DATA, build_parser, parse, parse_quickly
from refine_tui.cli.reads import (
    GOAL_HEADERS,
    GOALS_PAGE,
    cmd_check,
    cmd_goals,
    cmd_nodes,
    cmd_runs,
    cmd_show,
    cmd_wait,
    goal_rows,
    require_goal,
)
from refine_tui.cli.running import (
    cmd_demo,
    cmd_events,
    cmd_logs,
    cmd_metrics,
    cmd_node,
    cmd_serve,
    cmd_tui,
)
from store.errors import (
    InvalidInputError,
    JournalClosedError,
    RefineError,
    StorageError,
    WaitTimeoutError,
)
from store.journal.locations import STATE_DIR_ENV

__all__ = [
    "COMMANDS",
    "DEFAULT_JOURNAL",
    "EXIT_NOT_YET",
    "EXIT_OK",
    "EXIT_REFUSED",
    "EXIT_UNAVAILABLE",
    "EXIT_USAGE",
    "GOALS_PAGE",
    "GOAL_HEADERS",
    "PRINTS_NO_DATA",
    "OutputError",
    "StreamedTable",
    "UsageError",
    "act",
    "build_parser",
    "cmd_cancel",
    "cmd_check",
    "cmd_cleanup",
    "cmd_cleanup_node",
    "cmd_copy",
    "cmd_demo",
    "cmd_events",
    "cmd_goal_add",
    "cmd_goal_without_subcommand",
    "cmd_goals",
    "cmd_init",
    "cmd_logs",
    "cmd_metrics",
    "cmd_node",
    "cmd_nodes",
    "cmd_reassign",
    "cmd_release",
    "cmd_runs",
    "cmd_serve",
    "cmd_show",
    "cmd_stop",
    "cmd_tui",
    "cmd_wait",
    "default_goal_id",
    "emit",
    "goal_rows",
    "journal_path",
    "journal_text",
    "main",
    "node_name",
    "open_journal",
    "parse",
    "parse_quickly",
    "printable",
    "require_goal",
    "table",
    "tui_main",
]


def exit_code(error: RefineError) -> int:
    if isinstance(error, WaitTimeoutError):  # "not yet", where GOAL_TERMINAL says "never"
        return EXIT_NOT_YET
    if isinstance(error, StorageError | JournalClosedError):
        return EXIT_UNAVAILABLE
    if isinstance(error, InvalidInputError):
        return EXIT_USAGE
    return EXIT_REFUSED


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    exit_without_collecting()
    if isinstance(sys.stdout, io.TextIOWrapper):  # a terminal or pipe that is not UTF-8
        sys.stdout.reconfigure(errors="backslashreplace")
    as_json = wants_json(argv)  # before parsing: a usage refusal is JSON too
    try:
        args = parse(argv)
        as_json = args.json
        with state_dir_setting(args.state_dir):
            code = int(args.func(args))
        flush_stdout()
        return code
    except BrokenPipeError:  # the reader went away (`refine goals | head`): end quietly
        discard_stdout()
        return EXIT_PIPE
    except OutputError as exc:
        discard_stdout()  # the interpreter's last flush would meet the same error
        print(f"refine: OUTPUT: the command ran; its output was lost: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    except UsageError as exc:
        return refuse("USAGE", str(exc), EXIT_USAGE, as_json=as_json)
    except RefineError as exc:
        return refuse(exc.code, exc.message, exit_code(exc), as_json=as_json)
    except KeyboardInterrupt as exc:  # the shell's 128 + the signal's number
        return EXIT_TERMINATED if isinstance(exc, Terminated) else EXIT_INTERRUPTED
    except Exception as exc:  # a bug: one line for the operator, the traceback on request
        if os.environ.get("REFINE_DEBUG"):
            raise
        message = f"{type(exc).__name__}: {exc}"
        return refuse("INTERNAL", message, EXIT_REFUSED, as_json=as_json, more=True)


def wants_json(argv: Sequence[str]) -> bool:
    """``--json`` among the options (not in a recipe after ``--``): for refusals before parsing."""
    options = argv[: list(argv).index("--")] if "--" in argv else argv
    return "--json" in options


def refuse(code: str, message: str, exit: int, *, as_json: bool, more: bool = False) -> int:
    """One line on stderr; with ``--json`` also ``{"error": {"code", "message"}}`` on stdout
    (the message exact there: JSON escapes what a terminal must not interpret)."""
    hint = " (REFINE_DEBUG=1 shows more)" if more else ""
    print(f"refine: {code}: {printable(message)}{hint}", file=sys.stderr)
    if as_json and sys.stdout is not None:
        try:
            print(json.dumps({"error": {"code": code, "message": message}}, indent=2))
            sys.stdout.flush()
        except OSError:  # no reader, a full disk: the stderr line stands
            discard_stdout()
    return exit


def exit_without_collecting() -> None:
    """At exit, freeze what is alive rather than let the interpreter's last garbage collections
    walk every object (≈ 5–7 ms of a command, a fifth of Python's own start-up). Nothing here
    needs a collector to end it: journals, records and logs are closed before main returns."""
    atexit.unregister(gc.freeze)  # once, however often main runs in one process
    atexit.register(gc.freeze)


def discard_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's last flush meets no closed pipe."""
    with contextlib.suppress(OSError, ValueError, AttributeError):  # None: no stdout at all
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


@contextlib.contextmanager
def state_dir_setting(state_dir: str | None) -> Iterator[None]:
    """``--state-dir`` as ``$REFINE_STATE_DIR`` (absolute) while the command runs: the node, its
    workers, the operator commands and the dashboard all find this node's files through it."""
    if state_dir is None:
        yield
        return
    before = os.environ.get(STATE_DIR_ENV)
    os.environ[STATE_DIR_ENV] = str(Path(state_dir).absolute())
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(STATE_DIR_ENV, None)
        else:
            os.environ[STATE_DIR_ENV] = before


def tui_main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    return main(["tui", *argv])
