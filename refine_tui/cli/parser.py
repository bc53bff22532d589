"""The `refine` grammar: one parser per command, built only for the command a line names."""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from refine_tui.cli.common import (
    DEFAULT_JOURNAL,
    EXIT_NOT_YET,
    MAX_CAPACITY,
    UsageError,
)
from refine_tui.cli.values import (
    bind_host,
    capacity,
    goal_statuses,
    heartbeat_seconds,
    node_names,
    node_states,
    non_empty,
    non_negative_float,
    port_number,
    positive_int,
    seconds,
)
from store.journal.locations import STATE_DIR_ENV


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)

    def _get_formatter(self) -> argparse.HelpFormatter:
        # argparse makes a formatter for every argument added, and a formatter without a width
        # imports shutil (and with it bz2, lzma, zlib: ≈ 3 ms of every command) to learn it.
        make = self.formatter_class
        if isinstance(make, type) and issubclass(make, argparse.HelpFormatter):
            return make(prog=self.prog, width=_help_width())
        return super()._get_formatter()


def _help_width() -> int:
    """The width argparse would use: ``shutil.get_terminal_size().columns - 2``, as there
    ``$COLUMNS`` first, then the terminal of ``sys.__stdout__``, else 80."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return (columns or 80) - 2


# Every command's name: `parse` builds only the parser of the one a command line names.
COMMANDS = (
    "init", "goal", "goals", "runs", "show", "node", "nodes", "stop", "cancel", "cleanup",
    "release", "reassign", "wait", "check", "copy", "tui", "serve", "demo", "events", "metrics",
    "logs", "log",
)  # fmt: skip


# Commands that print no data (a log's own bytes, a screen, a server): they take no --json.
PRINTS_NO_DATA = frozenset({"node", "tui", "serve", "demo", "metrics", "logs", "log"})


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; with ``only``, the same grammar with just that command in it."""
    # The handlers as the package names them (a test may replace one there): cli.cmd_*.
    from refine_tui import cli

    # stop/cancel/release take one goal, several, or a selection: the batch's own module.
    from refine_tui.cli.bulk import add_target_arguments

    common = common_options(node=True)
    # The other parents are made only for a command that uses them: each parser costs ≈ 0.3 ms
    # (argparse's registry, gettext asked for its headings) of a command built alone.
    no_data = functools.cache(lambda: common_options(node=True, with_json=False))
    parser = _Parser(
        prog="refine",
        parents=[common],
        description="Supervise Goals, Runs and Attempts from the command line.",
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def command(
        name: str,
        func: Callable[[argparse.Namespace], int],
        text: str,
        parent: Callable[[], _Parser] | None = None,
        aliases: Sequence[str] = (),
    ) -> Any:
        if only is not None and only != name and only not in aliases:
            return None
        if parent is None:
            parent = no_data if name in PRINTS_NO_DATA else lambda: common
        p = sub.add_parser(
            name, parents=[parent()], help=text, description=text, aliases=list(aliases)
        )
        p.set_defaults(func=func)
        return p

    command("init", cli.cmd_init, "create the journal (idempotent)")
    if only in (None, "goal"):
        goal_parser = sub.add_parser(
            "goal", help="goal commands: add", description="goal commands: add (see goal add -h)"
        )
        goal_parser.set_defaults(func=cli.cmd_goal_without_subcommand)
        goal = goal_parser.add_subparsers(
            dest="goal_command", title="subcommands", parser_class=_Parser
        )
        add = goal.add_parser("add", parents=[common], help="add a goal: refine goal add -- ARGV")
        add.set_defaults(func=cli.cmd_goal_add)
        add.add_argument("--title", required=True, help="what the goal is, for people")
        add.add_argument("--id", help="the goal's id (default: made from the title)")
        add.add_argument(
            "--cwd",
            help="the recipe's working folder, a relative one taken from where you type it "
            "(default: the node's)",
        )
        add.add_argument(
            "--max-attempts", type=positive_int, default=3, metavar="K",
            help="attempts the goal's run may make, 1 to 20 (default 3)",
        )  # fmt: skip
        add.add_argument(
            "--timeout-ms", type=positive_int, default=3_600_000, metavar="MS",
            help="an attempt's time limit in milliseconds (default 3600000: an hour)",
        )  # fmt: skip
        add.add_argument(
            "--redelivery", choices=["safe", "operator"], default="safe",
            help="after an interrupted attempt: safe = requeue it (the recipe may run again),"
            " operator = hold it until someone releases it (default safe)",
        )  # fmt: skip
        add.add_argument("argv", nargs=argparse.REMAINDER, help="-- the recipe's command line")
    if goals := command("goals", cli.cmd_goals, "list goals"):
        goals.add_argument(
            "--status", type=goal_statuses, help="only goals in these statuses, e.g. running,held"
        )
        goals.add_argument("--only-node", metavar="N", help="only goals of node N (default: all)")
    if runs := command("runs", cli.cmd_runs, "list runs (of one goal)"):
        runs.add_argument("goal", nargs="?", help="only this goal's runs (default: every goal's)")
    if show := command("show", cli.cmd_show, "one goal or run with its events"):
        show.add_argument("target", metavar="GOAL|RUN", help="a goal id or a run id (GOAL.rN)")
    if node := command("node", cli.cmd_node, "run this node's scheduler until SIGINT/SIGTERM"):
        from store.journal.slots import MAX_CONNECTIONS_ENV

        node.add_argument(
            "--capacity", type=capacity, default=4, metavar="N",
            help=f"attempts this node runs at once, 1 to {MAX_CAPACITY} (default 4)",
        )  # fmt: skip
        node.add_argument(
            "--heartbeat",
            type=heartbeat_seconds,
            metavar="SECONDS",
            help="seconds between presence beats (default: $REFINE_HEARTBEAT_S, else 5)",
        )
        node.add_argument(
            "--force",
            action="store_true",
            help="start even while a node of this name is live on the journal (default: refuse)",
        )
        node.add_argument(
            "--max-connections",
            type=positive_int,
            default=None,
            help="journal connections this node and its workers hold at most, together"
            f" (PostgreSQL; default ${MAX_CONNECTIONS_ENV} or 5)",
        )
    if nodes := command(
        "nodes", cli.cmd_nodes, "the nodes: presence (live, silent, stopped) and attempts running"
    ):
        nodes.add_argument(
            "--state",
            type=node_states,
            metavar="S[,S...]",
            help="only nodes in these states, e.g. silent,stopped",
        )
    if stop := command("stop", cli.cmd_stop, "stop goals' local processes and requeue them"):
        add_target_arguments(stop)
        stop.add_argument("--grace", type=non_negative_float, default=5.0)
    if cancel := command("cancel", cli.cmd_cancel, "cancel goals (terminal), then clean up"):
        add_target_arguments(cancel)
        cancel.add_argument("--reason", required=True)
        cancel.add_argument("--grace", type=non_negative_float, default=5.0)
    # Its own --node (``target_node``): without RUN it names the node whose attempts ended;
    # after RUN it is this node's name, as for every command.
    if cleanup := command(
        "cleanup",
        cli.cmd_cleanup,
        "confirm that a silent attempt's work ended (RUN --epoch E), or a whole node's (--node N)",
        parent=lambda: common_options(node=False),
    ):
        cleanup.add_argument("run", nargs="?")
        cleanup.add_argument("--epoch", type=positive_int)
        cleanup.add_argument(
            "--node",
            dest="target_node",
            type=non_empty,
            metavar="N",
            help="without RUN: every running attempt of node N, while N is silent or stopped",
        )
        cleanup.add_argument(
            "--method",
            default="operator-confirmed",
            help="how you know the work ended (recorded; default operator-confirmed)",
        )
        cleanup.add_argument(
            "--dry-run",
            action="store_true",
            help="with --node N: print what the cleanup (and --to) would do; write nothing",
        )
        cleanup.add_argument(
            "--to",
            type=node_names,
            metavar="NODE[,NODE...]",
            help="with --node N: then move N's queued and held goals there (as refine reassign"
            " --node N --status queued,held --to does)",
        )
    if release := command("release", cli.cmd_release, "make held goals actionable again"):
        add_target_arguments(release)
    if reassign := command(
        "reassign", cli.cmd_reassign, "move queued or held goals to another node"
    ):
        add_target_arguments(reassign)
        reassign.add_argument(
            "--to",
            required=True,
            type=node_names,
            metavar="NODE[,NODE...]",
            help="the node they move to (one the journal knows: it beat, or a goal names it);"
            " several: each goal to the one with the most room left",
        )
    if wait := command("wait", cli.cmd_wait, "wait until a goal reaches one of the given statuses"):
        wait.add_argument("goal", help="the goal to wait for")
        wait.add_argument(
            "--status", type=goal_statuses, required=True, metavar="S[,S...]",
            help="the statuses to wait for, e.g. running,held (required)",
        )  # fmt: skip
        wait.add_argument(
            "--timeout", type=seconds, metavar="S",
            help=f"give up after S seconds: WAIT_TIMEOUT, exit {EXIT_NOT_YET} (default: never)",
        )  # fmt: skip
    command("check", cli.cmd_check, "check every invariant; exit 0 only when clean")
    if copy := command(
        "copy", cli.cmd_copy, "copy a journal (file or postgresql:// URL), then check it"
    ):
        copy.add_argument("source", help="journal to copy from (read only)")
        copy.add_argument("target", help="an empty or new journal to copy into")
    if tui := command("tui", cli.cmd_tui, "the dashboard"):
        tui.add_argument("--read-only", action="store_true", help=READ_ONLY_HELP)
        tui.add_argument("--quiet", action="store_true", help=QUIET_HELP)
        tui.add_argument(
            "--no-pulses",
            dest="pulses",
            action="store_false",
            help="no pulses above the Goals (nor their reads of the journal's last hour)",
        )
    if serve := command(
        "serve", cli.cmd_serve, "the dashboard in a browser (prints a URL with a token)"
    ):
        serve.add_argument(
            "--host", type=bind_host, default="127.0.0.1", help="address to bind (default loopback)"
        )
        serve.add_argument(
            "--port", type=port_number, default=8000, help="port (default 8000; 0 picks a free one)"
        )
        serve.add_argument("--read-only", action="store_true", help=READ_ONLY_HELP)
        serve.add_argument(
            "--token-file", help="a file holding the token, shared by a team (default: a new one)"
        )
        serve.add_argument(
            "--max-connections",
            type=positive_int,
            default=None,
            help="journal connections all tabs together hold at most (PostgreSQL; default"
            " $REFINE_MAX_CONNECTIONS or 5)",
        )
    if demo := command("demo", cli.cmd_demo, "a demo journal with live work and the dashboard"):
        demo.add_argument("--quiet", action="store_true", help=QUIET_HELP)
        demo.add_argument(
            "--dir",
            metavar="DIR",
            help="where the demo journal is made (or reused, if DIR/journal.db exists);"
            " default: a new temporary folder, kept after the demo",
        )
    if events := command("events", cli.cmd_events, "the journal's events in commit order"):
        from refine_tui.cli.events import add_arguments

        add_arguments(events)
    if metrics := command("metrics", cli.cmd_metrics, "a read-only Prometheus exporter (/metrics)"):
        from refine_tui.cli.metrics import add_arguments as metrics_arguments

        metrics_arguments(metrics)
    if logs := command(
        "logs", cli.cmd_logs, "an attempt's log, from this node's state dir", aliases=["log"]
    ):
        from refine_tui.cli.logs import add_arguments as logs_arguments

        logs_arguments(logs)
    describe_shared_arguments(sub)
    return parser


READ_ONLY_HELP = "no action can change the journal (default: the operator's dashboard)"


QUIET_HELP = "alerts (goal exhausted, attempt needs cleanup) notify without the terminal bell"


# The operator actions' arguments mean the same in each (stop's and cancel's --grace): their
# help is said once, here, for any of them that has none of its own.
SHARED_HELP = {
    "goal": "the goal's id",
    "grace": "seconds between SIGTERM and SIGKILL of the process group (default 5)",
    "reason": "why, recorded with the cancellation (required)",
    "run": "RUN (GOAL.rN) with --epoch E; or a GOAL: its current run's running attempt",
    "epoch": "the attempt of RUN whose work ended",
}


def describe_shared_arguments(sub: Any) -> None:
    for name in ("stop", "cancel", "release", "reassign", "cleanup"):
        parser = sub.choices.get(name)
        for action in parser._actions if parser is not None else ():
            if action.help is None and action.dest in SHARED_HELP:
                action.help = SHARED_HELP[action.dest]


def common_options(*, node: bool, with_json: bool = True) -> _Parser:
    """The options every command takes (``node``: with ``--node``, this node's name;
    ``with_json``: with ``--json``, for the commands that print data)."""
    common = _Parser(add_help=False)
    # An empty value (an unset shell variable) is refused, never read as "the default".
    common.add_argument(
        "--journal", type=non_empty, default=argparse.SUPPRESS, metavar="PATH|URL",
        help=f"the journal: a file, or a postgresql:// URL (default: $REFINE_JOURNAL, else"
        f" ./{DEFAULT_JOURNAL})",
    )  # fmt: skip
    if node:
        common.add_argument(
            "--node", type=non_empty, default=argparse.SUPPRESS,
            help="this node's name (default: $REFINE_NODE, else the host name)",
        )  # fmt: skip
    common.add_argument(
        "--state-dir",
        type=non_empty,
        default=argparse.SUPPRESS,
        metavar="DIR",
        help=f"this node's local files: process records, logs (default: ${STATE_DIR_ENV}, else"
        " beside a SQLite journal, else under $XDG_STATE_HOME)",
    )
    if with_json:
        common.add_argument(
            "--json", action="store_true", default=argparse.SUPPRESS, help="print JSON"
        )
    return common


def parse(argv: Sequence[str]) -> argparse.Namespace:
    argv = list(argv)
    args = parse_quickly(argv) or build_parser().parse_args(argv)
    for name, default in (("journal", None), ("node", None), ("state_dir", None), ("json", False)):
        if not hasattr(args, name):
            setattr(args, name, default)
    if args.json and args.command in PRINTS_NO_DATA:  # given before the command's name
        raise UsageError(f"{args.command} prints no data: --json is for commands that do")
    refuse_empty_environment(args)
    return args


# The variables standing in for an option when it is not given (None: no option; always read).
ENVIRONMENT = (
    ("REFINE_JOURNAL", "journal"),
    ("REFINE_NODE", "node"),
    (STATE_DIR_ENV, "state_dir"),
    ("REFINE_OPERATOR", None),
)


def refuse_empty_environment(args: argparse.Namespace) -> None:
    """An empty variable (an unset one, exported) is bad usage, as an empty option is: it is
    never read as "the default" (the host name for a node: another node's goals)."""
    for variable, option in ENVIRONMENT:
        if os.environ.get(variable) == "" and (option is None or getattr(args, option) is None):
            raise UsageError(f"${variable} is empty: give it a value, or unset it")


def parse_quickly(argv: list[str]) -> argparse.Namespace | None:
    """Parse with only the parser of the command named (the whole one costs ≈ 3 ms, a tenth of
    Python's start-up). What it accepts, the whole parser parses the same way (the grammar is
    the same but for the other commands' names). Help, a mistake or a command's name as an
    option's value: None, and the whole parser answers with its own help or message."""
    name = next((a for a in argv if a in COMMANDS), None)
    if name is None or any(a.startswith(("-h", "--h")) for a in argv):
        return None
    try:
        return build_parser(only=name).parse_args(argv)
    except UsageError:
        return None
