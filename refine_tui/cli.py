"""The `refine` command line: the same store functions the dashboard calls, for scripts.

Exit codes (DESIGN §11): 0 done, 1 refused by the model, 2 bad usage or input,
3 journal unavailable, 4 not yet (``WAIT_TIMEOUT``). Errors are one line naming the code, never a
traceback; with ``--json`` also ``{"error": {"code", "message"}}`` on stdout.
Human output shows text from the journal with its control characters made visible (``\\x1b``)
and is laid out by display width; ``--json`` is exact.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import gc
import io
import json
import os
import sys
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from refine_tui.visible import cells, clip, visible
from store.errors import (
    GoalNotFoundError,
    InvalidInputError,
    JournalClosedError,
    JournalMissingError,
    RefineError,
    StorageError,
    WaitTimeoutError,
)
from store.journal.locations import STATE_DIR_ENV, JournalLocation, journal_file_exists
from store.journal.url import redact

# Each command imports the store modules it uses: a quick `refine goals` must not pay for the
# operator's process tools (psutil), the checker or the dashboard (DESIGN §9, CLI start-up).
if TYPE_CHECKING:
    from store.journal.api import Journal
    from store.ops.operator import ActionReport

EXIT_OK, EXIT_REFUSED, EXIT_USAGE, EXIT_UNAVAILABLE, EXIT_NOT_YET = 0, 1, 2, 3, 4
MAX_CAPACITY = 1024  # attempts a node runs at once
EXIT_PIPE = 128 + 13  # as a tool ended by SIGPIPE: the shell's `| head` convention
EXIT_INTERRUPTED, EXIT_TERMINATED = 128 + 2, 128 + 15  # SIGINT, SIGTERM
DEFAULT_JOURNAL = Path(".refine") / "journal.db"


class UsageError(Exception):
    """Bad command-line usage: exit 2 with one line."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def journal_text(args: argparse.Namespace) -> str:
    """The journal's location as given: ``--journal``, else ``$REFINE_JOURNAL``, else default."""
    return args.journal or os.environ.get("REFINE_JOURNAL") or str(DEFAULT_JOURNAL)


def journal_path(args: argparse.Namespace) -> JournalLocation:
    """The journal's location: a file, or a server's URL (``JournalLocation`` tells which)."""
    return JournalLocation(journal_text(args))


def node_name(args: argparse.Namespace) -> str:
    from store.ops.operator import default_node

    return args.node or default_node()


# --- output ------------------------------------------------------------------------------------


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


# --- commands ----------------------------------------------------------------------------------


def open_journal(args: argparse.Namespace, *, write: bool) -> Journal:
    """Every command but init needs an existing journal; reads never create or modify it."""
    from store.journal.api import Journal

    location = journal_path(args)
    if location.missing_file():
        raise JournalMissingError(f"journal missing: {location} (create it with `refine init`)")
    return Journal.open(location, read_only=not write, create=False)


def cmd_init(args: argparse.Namespace) -> int:
    from store.journal.api import Journal

    location = journal_path(args)
    shown = location.printable
    if location.is_server:  # a URL is never a file name: create the schema there
        from store.errors import JournalMissingError

        try:  # an existing journal, even an empty one, was not created now
            Journal.open(location, read_only=False, create=False).close()
            created = False
        except JournalMissingError:
            Journal.open(location, read_only=False, create=True).close()
            created = True
        emit(args, {"journal": shown, "created": created}, f"journal ready: {shown}")
        return EXIT_OK
    # An empty file (say, from mktemp) becomes the journal now: it did not exist as one.
    existed = journal_file_exists(location.path) and os.path.getsize(location.path) > 0
    Journal.open(location).close()
    emit(
        args,
        {"journal": shown, "created": not existed},
        f"{'journal exists' if existed else 'created journal'}: {shown}",
    )
    return EXIT_OK


def cmd_goal_without_subcommand(args: argparse.Namespace) -> int:
    raise UsageError("goal needs a subcommand: add (refine goal add --title T -- ARGV...)")


def cmd_goal_add(args: argparse.Namespace) -> int:
    from store.model.goals import Goals

    argv = list(args.argv)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise UsageError(
            "goal add needs the recipe after --, e.g. refine goal add --title T -- make"
        )
    goal_id = args.id if args.id is not None else default_goal_id(args.title)
    with open_journal(args, write=True) as journal:
        result = Goals(journal).create(
            goal_id=goal_id,
            title=args.title,
            node_id=node_name(args),
            argv=argv,
            cwd=args.cwd,
            max_attempts=args.max_attempts,
            attempt_timeout_ms=args.timeout_ms,
            redelivery=args.redelivery,
        )
    goal = result.goal
    note = " (already added: replayed)" if result.replayed else ""
    if args.id is None:
        note += " (id derived from the title; --id chooses another)"
    emit(args, goal.to_json(), f"added goal {goal.goal_id} on node {goal.node_id}{note}")
    return EXIT_OK


# Letters NFKD does not take apart into ASCII ones.
_LATIN = str.maketrans({"ß": "ss", "æ": "ae", "œ": "oe", "ø": "o", "ł": "l", "đ": "d", "þ": "th"})


def default_goal_id(title: str) -> str:
    """A goal id from the title: ASCII by transliteration (``Déploiement`` → ``deploiement``);
    when a letter has no ASCII form (``日本語``), a short digest of the title keeps ids apart."""
    ascii_of = {c: _ascii(c) for c in set(title.lower())}
    slug = "".join(ascii_of[c] or "-" for c in title.lower())
    slug = "".join(c if c.isalnum() else "-" for c in slug)
    slug = "-".join(filter(None, slug.split("-")))[:40].strip("-")
    if any(c.isalnum() and not ascii_of[c] for c in ascii_of) or not slug:
        import hashlib

        digest = hashlib.sha256(title.encode("utf-8", "surrogatepass")).hexdigest()[:8]
        slug = f"{slug[:31].rstrip('-')}-{digest}" if slug else f"goal-{digest}"
    return slug


def _ascii(char: str) -> str:
    decomposed = unicodedata.normalize("NFKD", char.translate(_LATIN))
    return decomposed.encode("ascii", "ignore").decode()


GOALS_PAGE = 1000  # goals read, then printed, at a time: the output streams, memory stays flat
GOAL_HEADERS = ("goal", "title", "node", "status", "round", "redelivery", "cancel reason")


def cmd_goals(args: argparse.Namespace) -> int:
    """Each page is printed as it is read: the first lines appear at once on a million Goals.
    Pages follow one another by id; each is consistent, not the listing as a whole (it holds
    no read transaction while a slow reader takes the output)."""
    from store.model.goals import CorruptGoal, Goals

    corrupt: list[str] = []
    text = StreamedTable(GOAL_HEADERS)
    write_out("")  # a closed stdout is refused before any read
    first = True
    with open_journal(args, write=False) as journal:
        for page in goal_pages(Goals(journal), args.status, args.only_node):
            corrupt += [g.goal_id for g in page if isinstance(g, CorruptGoal)]
            if args.json:  # "[" once a page was read: a refusal before it is one JSON object
                write_out(("[" if first else "") + json_items([g.to_json() for g in page], first))
            else:
                write_out("".join(printable(line) + "\n" for line in text.lines(goal_rows(page))))
            first = False
            flush_stdout()
    if args.json:
        write_out("[]\n" if first else "\n]\n")
    elif text.headers:  # no goal at all: the header alone
        write_out(text.lines([])[0] + "\n")
    warn_corrupt(corrupt)
    return EXIT_OK


def goal_pages(goals: Any, statuses: frozenset[str] | None, node: str | None) -> Iterator[Any]:
    """The Goals in id order, ``GOALS_PAGE`` at a time; with statuses, over the status index."""
    wanted = sorted(statuses) if statuses is not None else None
    after = ""  # every id comes after the empty one: the first page is a page like the others
    while page := goals.list_readable(
        status=wanted, node_id=node, limit=GOALS_PAGE, after_id=after
    ):
        yield page
        after = page[-1].goal_id


def goal_rows(goals: Sequence[Any]) -> list[tuple[Any, ...]]:
    from store.model.goals import CorruptGoal

    return [
        (g.goal_id, "-", "-", "corrupt", "-", "-", clip(g.error.message, REASON_WIDTH))
        if isinstance(g, CorruptGoal)
        else (
            g.goal_id,
            clip(g.title, TITLE_WIDTH),
            g.node_id,
            g.status,
            g.round,
            g.redelivery,
            clip(g.cancel_reason or "-", REASON_WIDTH),
        )
        for g in goals
    ]


def json_items(items: list[Any], first: bool) -> str:
    """Items of a JSON array as ``json.dumps(all, indent=2)`` prints them, a page at a time."""
    text = ",".join(
        "\n"
        + "\n".join("  " + line for line in json.dumps(i, indent=2, sort_keys=True).split("\n"))
        for i in items
    )
    return text if first or not items else "," + text


def warn_corrupt(goal_ids: list[str]) -> None:
    """Listings go on past a corrupt record; stderr says which and what to run."""
    if goal_ids:
        print(
            f"refine: {len(goal_ids)} corrupt goal record(s): {printable(', '.join(goal_ids))}"
            " (listed as corrupt; `refine check` says more)",
            file=sys.stderr,
        )


def cmd_runs(args: argparse.Namespace) -> int:
    from store.errors import RefineError
    from store.model.goals import CorruptGoal, Goals

    corrupt: list[tuple[str, str]] = []  # (goal id, what is wrong): one row each
    with open_journal(args, write=False) as journal:
        goals = Goals(journal)
        if args.goal:
            require_goal(goals, args.goal)
            runs = goals.runs(args.goal)
        else:
            runs = []
            for goal in goals.list_readable():
                if isinstance(goal, CorruptGoal):
                    corrupt.append((goal.goal_id, goal.error.message))
                    continue
                try:
                    runs += goals.runs(goal.goal_id)
                except RefineError as exc:  # a corrupt run record: its goal's row says so
                    corrupt.append((goal.goal_id, exc.message))
    rows = [
        (
            r.run_id,
            r.status,
            f"{len(r.attempts)}/{r.budget['max_attempts']}",
            r.attempts[-1].worker if r.attempts else None,
            "cancelling" if r.cancel_requested else clip(r.cancel_reason or "-", REASON_WIDTH),
        )
        for r in runs
    ]
    rows += [(f"{g} (runs)", "corrupt", "-", "-", clip(why, REASON_WIDTH)) for g, why in corrupt]
    data = [r.to_json() for r in runs]
    data += [{"run_id": None, "goal_id": g, "status": "corrupt", "corrupt": w} for g, w in corrupt]
    emit(args, data, table(["run", "status", "attempts", "worker", "cancel"], rows))
    warn_corrupt([g for g, _ in corrupt])
    return EXIT_OK


def require_goal(goals: Any, goal_id: str) -> Any:
    goal = goals.read(goal_id)
    if goal is None:
        raise GoalNotFoundError(f"no goal {goal_id}", goal_id=goal_id)
    return goal


def cmd_show(args: argparse.Namespace) -> int:
    from store.model.execution import Execution
    from store.model.goals import Goals, goal_id_of_run
    from store.ops.reads import goal_history, run_history

    with open_journal(args, write=False) as journal:
        goals = Goals(journal)
        goal = goals.read(args.target)
        if goal is not None:
            runs = goals.runs(goal.goal_id)
            events = goal_history(journal, goal.goal_id)
            for each in runs:
                events += run_history(journal, each.run_id)
            events.sort(key=lambda e: e.sequence)
            data: dict[str, Any] = {
                "goal": goal.to_json(),
                "runs": [r.to_json() for r in runs],
                "events": [event_json(e) for e in events],
            }
            emit(args, data, show_text(goal.to_json(), data["runs"], events))
            owner = goal_id_of_run(
                args.target
            )  # ids like x.r1 are refused now, not in old journals
            if owner is not None and Execution(journal).read(args.target) is not None:
                print(
                    f"refine: {args.target} names a goal and also a run of goal {owner}:"
                    f" this is the goal; the run is listed by `refine runs {owner}`",
                    file=sys.stderr,
                )
            return EXIT_OK
        run = Execution(journal).read(args.target)
        if run is None:
            raise GoalNotFoundError(f"no goal or run named {args.target}")
        events = run_history(journal, run.run_id)
        data = {"run": run.to_json(), "events": [event_json(e) for e in events]}
        emit(args, data, show_text(None, [data["run"]], events))
    return EXIT_OK


def event_json(event: Any) -> dict[str, Any]:
    return {
        "sequence": event.sequence,
        "aggregate_id": event.aggregate_id,
        "version": event.version,
        "type": event.type,
        "data": dict(event.data),
        "committed_at": event.committed_at,
    }


def show_text(goal: dict[str, Any] | None, runs: list[dict[str, Any]], events: list[Any]) -> str:
    lines = []
    if goal:
        lines.append(
            f"goal {goal['goal_id']}: {visible(goal['title'])}  [{goal['status']}]"
            f"  node {goal['node_id']}  round {goal['round']}"
            f"  redelivery {goal['redelivery']}"
        )
        lines.append(f"  recipe: {' '.join(visible(a) for a in goal['recipe']['argv'])}")
        if goal.get("cancel_reason"):
            lines.append(f"  cancel reason: {visible(goal['cancel_reason'])}")
    for run in runs:
        lines.append(
            f"run {run['run_id']}  [{run['status']}]"
            f"  attempts {len(run['attempts'])}/{run['budget']['max_attempts']}"
        )
        for a in run["attempts"]:
            how = a.get("reason") or (a.get("cleanup") or {}).get("method") or ""
            lines.append(
                f"  {a['attempt_id']}  {a['worker']}  {a['state']}  {visible(how)}".rstrip()
            )
    lines.append("events:")
    lines += [f"  {e.sequence:>6}  {e.aggregate_id}  v{e.version}  {e.type}" for e in events]
    return "\n".join(lines)


def act(args: argparse.Namespace, action: Callable[[Journal], ActionReport]) -> int:
    """Run one operator action on the writable journal and print what it did."""
    with open_journal(args, write=True) as journal:
        report = action(journal)
    emit(args, report.to_json(), report.text())
    return EXIT_OK


def cmd_stop(args: argparse.Namespace) -> int:
    from refine_tui.cli_bulk import is_batch, run_batch
    from store.ops.operator import default_operator, stop_goal

    if is_batch(args):
        return run_batch(args, "stop")
    goal, node, operator = args.goals[0], node_name(args), default_operator()
    return act(args, lambda j: stop_goal(j, goal, node=node, operator=operator, grace_s=args.grace))


def cmd_cancel(args: argparse.Namespace) -> int:
    from refine_tui.cli_bulk import is_batch, run_batch
    from store.ops.operator import cancel_goal, default_operator

    if is_batch(args):
        return run_batch(args, "cancel")
    goal, node, operator = args.goals[0], node_name(args), default_operator()
    return act(
        args,
        lambda j: cancel_goal(
            j, goal, reason=args.reason, node=node, operator=operator, grace_s=args.grace
        ),
    )


def cmd_cleanup(args: argparse.Namespace) -> int:
    from store.ops.operator import confirm_cleanup, default_operator

    if args.run is None:
        return cmd_cleanup_node(args)
    from store.model.goal import goal_id_of_run

    if args.epoch is None and goal_id_of_run(args.run) is not None:
        raise UsageError(f"cleanup {args.run} needs --epoch E: the epoch of the attempt that ended")
    # After RUN, --node is this node's name, as before (here parsed as ``target_node``).
    node, operator = args.target_node or node_name(args), default_operator()

    def cleanup(journal: Journal) -> ActionReport:
        # Without --epoch the target is a goal: its current run's running attempt.
        run_id, epoch = (
            (args.run, args.epoch) if args.epoch is not None else goal_attempt(journal, args.run)
        )
        return confirm_cleanup(
            journal, run_id, epoch=epoch, node=node, operator=operator, method=args.method
        )

    return act(args, cleanup)


def goal_attempt(journal: Journal, goal_id: str) -> tuple[str, int]:
    """(run, epoch) of the goal's running attempt (a run has one at most); refused, naming the
    exact ``RUN --epoch E`` form, when there is none."""
    from store.errors import NoActiveAttemptError
    from store.model.goals import Goals

    goals = Goals(journal)
    goal = require_goal(goals, goal_id)
    run = goals.current_run(goal)
    if run is not None and run.running_attempt is not None:
        return run.run_id, run.running_attempt.epoch
    status = run.status if run is not None else "not submitted"
    epoch = str(run.attempts[-1].epoch) if run is not None and run.attempts else "E"
    raise NoActiveAttemptError(
        f"goal {goal_id} has no running attempt to confirm ({goal.run_id} is {status}); one"
        f" attempt is named as: refine cleanup {goal.run_id} --epoch {epoch}",
        goal_id=goal_id,
    )


def cmd_cleanup_node(args: argparse.Namespace) -> int:
    """`refine cleanup --node N`: every running attempt of node N, while N is silent or stopped."""
    from store.ops.node_cleanup import cleanup_node
    from store.ops.operator import default_node, default_operator

    if args.target_node is None:
        raise UsageError("cleanup needs RUN --epoch E (one attempt), or --node N (a whole node)")
    if args.epoch is not None:
        raise UsageError("--epoch names an attempt of RUN: give RUN, or --node N without --epoch")
    here, operator = args.node or default_node(), default_operator()
    with open_journal(args, write=True) as journal:
        done = cleanup_node(
            journal, args.target_node, here=here, operator=operator, method=args.method
        )
    emit(args, [report.to_json() for report in done.reports], done.text())
    if not done.errors:
        return EXIT_OK
    first = done.errors[0]
    print(
        f"refine: {first.code}: {len(done.errors)} of {len(done.reports)} attempts of node"
        f" {args.target_node} not confirmed; first: {printable(first.message)}",
        file=sys.stderr,
    )
    return EXIT_REFUSED


def cmd_nodes(args: argparse.Namespace) -> int:
    from store.ops.nodes import list_nodes

    with open_journal(args, write=False) as journal:
        nodes = list_nodes(journal)
    rows = []
    for view in nodes:
        data = view.to_json()
        seen = data["last_seen"]
        if seen is not None and view.age_s is not None:
            seen = f"{seen} ({age_words(view.age_s)} ago)"
        capacity = data["capacity"]
        running = view.running if capacity is None else f"{view.running}/{capacity}"
        rows.append((view.node_id, view.state, seen, running, data["host"], data["version"]))
    emit(
        args,
        [view.to_json() for view in nodes],
        table(["node", "state", "last seen", "running", "host", "version"], rows),
    )
    return EXIT_OK


def age_words(seconds: float) -> str:
    """``4 s``, ``12 min``, ``3 h``, ``2 d``: how long ago, for people."""
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= 2 * size:
            return f"{int(seconds // size)} {unit}"
    return f"{int(seconds)} s"


def cmd_release(args: argparse.Namespace) -> int:
    from refine_tui.cli_bulk import is_batch, run_batch
    from store.ops.operator import default_operator, release_goal

    if is_batch(args):
        return run_batch(args, "release")
    goal, operator = args.goals[0], default_operator()
    return act(args, lambda j: release_goal(j, goal, operator=operator))


def cmd_wait(args: argparse.Namespace) -> int:
    import asyncio

    from store.ops.goal_wait import wait_for_status

    with open_journal(args, write=False) as journal:
        goal = asyncio.run(
            wait_for_status(journal, journal_path(args), args.goal, args.status, args.timeout)
        )
    emit(args, goal.to_json(), f"{goal.goal_id} {goal.status}")
    return EXIT_OK


def cmd_check(args: argparse.Namespace) -> int:
    from refine_tui.progress import bars_for
    from store.ops.check import check_journal

    with open_journal(args, write=False) as journal, bars_for(args.json) as bars:
        report = check_journal(journal, bars.bar("checking"))
    emit(args, report.to_json(), report.text())
    return EXIT_OK if report.clean else EXIT_REFUSED


def open_location(location: str, *, read_only: bool, create: bool) -> Any:
    """The journal a path or a ``postgresql://`` URL names (psycopg is imported only for URLs)."""
    from store.journal.api import Journal

    return Journal.open(location, read_only=read_only, create=create)


def cmd_copy(args: argparse.Namespace) -> int:
    from refine_tui.progress import bars_for
    from store.ops.journal_copy import copy_to

    with (
        terminated_as_interrupted(),
        open_location(args.source, read_only=True, create=False) as source,
        bars_for(args.json) as bars,
    ):
        copying, checking = bars.bar("copying events"), bars.bar("checking the copy")
        report = copy_to(source, args.target, copying, check_progress=checking)
    data = {
        "source": redact(args.source),
        "target": redact(args.target),
        "events": report.events,
        "rows": report.rows,
        "check": report.check.to_json(),
    }
    text = (
        f"copied {report.events} events ({report.rows} rows) from {redact(args.source)}"
        f" to {redact(args.target)}\n{report.check.text()}"
    )
    emit(args, data, text)
    return EXIT_OK if report.check.clean else EXIT_REFUSED


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


def cmd_node(args: argparse.Namespace) -> int:
    import asyncio

    from store.journal.slots import named
    from store.node.scheduler import Node
    from store.ops.node_start import claim_node_name

    location = journal_path(args)
    named(f"refine node {node_name(args)}")  # its connections say so in pg_stat_activity
    open_journal(args, write=True).close()
    # A refusal (a bad node name, a state dir that cannot be made, a node of this name that
    # runs already) ends as every command's does: one line, the exit code of its kind.
    with Node(
        location,
        node_name(args),
        args.capacity,
        heartbeat_s=args.heartbeat,
        connections=args.max_connections,
    ) as node:
        lock = claim_node_name(node.journal, node.node_id, force=args.force)
        try:
            print(
                printable(
                    f"refine node: node {node.node_id} on journal {location.printable}, state dir"
                    f" {node.registry.root}, capacity {node.capacity},"
                    f" heartbeat {node.heartbeat_s:g} s"
                ),
                file=sys.stderr,
                flush=True,
            )
            return asyncio.run(node.serve())
        finally:
            lock.release()


QUIET_HELP = "alerts (goal exhausted, attempt needs cleanup) notify without the terminal bell"


def cmd_tui(args: argparse.Namespace) -> int:
    from refine_tui.app import RefineApp
    from store.journal import slots

    if os.environ.get(slots.SLOTS_ENV):  # a tab of `refine serve`: its connections, its wake-ups
        slots.share_from_env(application="refine tui (serve)")
    else:
        slots.named("refine tui")
    location = journal_path(args)
    if location.is_server:  # a URL that can never connect is bad input now, not a wait
        from store.journal.postgres import connection_info

        connection_info(location.text)
    RefineApp(
        journal=journal_text(args), node=node_name(args), read_only=args.read_only, quiet=args.quiet
    ).run()
    return EXIT_OK


def cmd_serve(args: argparse.Namespace) -> int:
    from refine_tui.serve import TokenFileError, serve
    from store.journal.slots import max_connections, named

    named("refine serve")
    open_journal(args, write=False).close()  # refuse now, not in every tab
    try:
        return serve(
            journal=args.journal,
            node=node_name(args),
            host=args.host,
            port=args.port,
            read_only=args.read_only,
            token_file=Path(args.token_file) if args.token_file else None,
            connections=max_connections(args.max_connections),
            location=journal_text(args),
        )
    except TokenFileError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:  # the address is taken or cannot be bound
        raise UsageError(
            f"cannot serve on {args.host}:{args.port}: {exc.strerror or exc}"
        ) from None


def cmd_events(args: argparse.Namespace) -> int:
    from refine_tui.cli_events import cmd_events as events

    return events(args)


def cmd_metrics(args: argparse.Namespace) -> int:
    from refine_tui.cli_metrics import cmd_metrics as metrics

    return metrics(args)


def cmd_logs(args: argparse.Namespace) -> int:
    from refine_tui.cli_logs import cmd_logs as logs

    return logs(args)


def cmd_demo(args: argparse.Namespace) -> int:
    from refine_tui.demo import run_demo

    return run_demo(Path(args.dir) if args.dir else None, quiet=args.quiet)


# --- parser ------------------------------------------------------------------------------------


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text!r}")
    return value


def port_number(text: str) -> int:
    if not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"not a port number (0-65535): {text!r}")
    return int(text)


def bind_host(text: str) -> str:
    # An empty host (an unset `--host "$HOST"`) would make aiohttp bind every interface.
    if not text.strip():
        raise argparse.ArgumentTypeError("empty; name an address (0.0.0.0 for every interface)")
    return text


def capacity(text: str) -> int:
    value = positive_int(text)
    if value > MAX_CAPACITY:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_CAPACITY}: {text!r}")
    return value


def non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value <= 3600:
        raise argparse.ArgumentTypeError(f"must be between 0 and 3600 seconds: {text!r}")
    return value


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of seconds (0 or more): {text!r}")
    return value


def heartbeat_seconds(text: str) -> float:
    from store.journal.presence import heartbeat_interval

    try:
        return heartbeat_interval(float(text))
    except (ValueError, InvalidInputError):
        raise argparse.ArgumentTypeError(f"must be 0.05 to 3600 seconds: {text!r}") from None


def goal_statuses(text: str) -> frozenset[str]:
    from store.model.goals import GOAL_STATUSES

    wanted = frozenset(s.strip() for s in text.split(","))
    if not text.strip() or not wanted <= set(GOAL_STATUSES):
        raise argparse.ArgumentTypeError(
            f"{text!r}: give statuses among {', '.join(GOAL_STATUSES)}, separated by commas"
        )
    return wanted


def non_empty(text: str) -> str:
    if not text:
        raise argparse.ArgumentTypeError("must not be empty")
    return text


# Every command's name: `parse` builds only the parser of the one a command line names.
COMMANDS = (
    "init", "goal", "goals", "runs", "show", "node", "nodes", "stop", "cancel", "cleanup",
    "release", "wait", "check", "copy", "tui", "serve", "demo", "events", "metrics", "logs", "log",
)  # fmt: skip
# Commands that print no data (a log's own bytes, a screen, a server): they take no --json.
PRINTS_NO_DATA = frozenset({"node", "tui", "serve", "demo", "metrics", "logs", "log"})


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; with ``only``, the same grammar with just that command in it."""
    # stop/cancel/release take one goal, several, or a selection: the batch's own module.
    from refine_tui.cli_bulk import add_target_arguments

    common = common_options(node=True)
    no_data = common_options(node=True, with_json=False)
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
        parent: Any = common,
        aliases: Sequence[str] = (),
    ) -> Any:
        if only is not None and only != name and only not in aliases:
            return None
        if parent is common and name in PRINTS_NO_DATA:
            parent = no_data
        p = sub.add_parser(
            name, parents=[parent], help=text, description=text, aliases=list(aliases)
        )
        p.set_defaults(func=func)
        return p

    command("init", cmd_init, "create the journal (idempotent)")
    if only in (None, "goal"):
        goal_parser = sub.add_parser(
            "goal", help="goal commands: add", description="goal commands: add (see goal add -h)"
        )
        goal_parser.set_defaults(func=cmd_goal_without_subcommand)
        goal = goal_parser.add_subparsers(
            dest="goal_command", title="subcommands", parser_class=_Parser
        )
        add = goal.add_parser("add", parents=[common], help="add a goal: refine goal add -- ARGV")
        add.set_defaults(func=cmd_goal_add)
        add.add_argument("--title", required=True, help="what the goal is, for people")
        add.add_argument("--id", help="the goal's id (default: made from the title)")
        add.add_argument("--cwd", help="the recipe's working folder (default: the node's)")
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
    if goals := command("goals", cmd_goals, "list goals"):
        goals.add_argument(
            "--status", type=goal_statuses, help="only goals in these statuses, e.g. running,held"
        )
        goals.add_argument("--only-node", metavar="N", help="only goals of node N (default: all)")
    if runs := command("runs", cmd_runs, "list runs (of one goal)"):
        runs.add_argument("goal", nargs="?", help="only this goal's runs (default: every goal's)")
    if show := command("show", cmd_show, "one goal or run with its events"):
        show.add_argument("target", metavar="GOAL|RUN", help="a goal id or a run id (GOAL.rN)")
    if node := command("node", cmd_node, "run this node's scheduler until SIGINT/SIGTERM"):
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
    command("nodes", cmd_nodes, "the nodes: presence (live, silent, stopped) and attempts running")
    if stop := command("stop", cmd_stop, "stop goals' local processes and requeue them"):
        add_target_arguments(stop)
        stop.add_argument("--grace", type=non_negative_float, default=5.0)
    if cancel := command("cancel", cmd_cancel, "cancel goals (terminal), then clean up"):
        add_target_arguments(cancel)
        cancel.add_argument("--reason", required=True)
        cancel.add_argument("--grace", type=non_negative_float, default=5.0)
    # Its own --node (``target_node``): without RUN it names the node whose attempts ended;
    # after RUN it is this node's name, as for every command.
    if cleanup := command(
        "cleanup",
        cmd_cleanup,
        "confirm that a silent attempt's work ended (RUN --epoch E), or a whole node's (--node N)",
        parent=common_options(node=False),
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
    if release := command("release", cmd_release, "make held goals actionable again"):
        add_target_arguments(release)
    if wait := command("wait", cmd_wait, "wait until a goal reaches one of the given statuses"):
        wait.add_argument("goal", help="the goal to wait for")
        wait.add_argument(
            "--status", type=goal_statuses, required=True, metavar="S[,S...]",
            help="the statuses to wait for, e.g. running,held (required)",
        )  # fmt: skip
        wait.add_argument(
            "--timeout", type=seconds, metavar="S",
            help=f"give up after S seconds: WAIT_TIMEOUT, exit {EXIT_NOT_YET} (default: never)",
        )  # fmt: skip
    command("check", cmd_check, "check every invariant; exit 0 only when clean")
    if copy := command(
        "copy", cmd_copy, "copy a journal (file or postgresql:// URL), then check it"
    ):
        copy.add_argument("source", help="journal to copy from (read only)")
        copy.add_argument("target", help="an empty or new journal to copy into")
    if tui := command("tui", cmd_tui, "the dashboard"):
        tui.add_argument("--read-only", action="store_true", help=READ_ONLY_HELP)
        tui.add_argument("--quiet", action="store_true", help=QUIET_HELP)
    if serve := command(
        "serve", cmd_serve, "the dashboard in a browser (prints a URL with a token)"
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
    if demo := command("demo", cmd_demo, "a demo journal with live work and the dashboard"):
        demo.add_argument("--quiet", action="store_true", help=QUIET_HELP)
        demo.add_argument(
            "--dir",
            metavar="DIR",
            help="where the demo journal is made (or reused, if DIR/journal.db exists);"
            " default: a new temporary folder, kept after the demo",
        )
    if events := command("events", cmd_events, "the journal's events in commit order"):
        from refine_tui.cli_events import add_arguments

        add_arguments(events)
    if metrics := command("metrics", cmd_metrics, "a read-only Prometheus exporter (/metrics)"):
        from refine_tui.cli_metrics import add_arguments as metrics_arguments

        metrics_arguments(metrics)
    if logs := command(
        "logs", cmd_logs, "an attempt's log, from this node's state dir", aliases=["log"]
    ):
        from refine_tui.cli_logs import add_arguments as logs_arguments

        logs_arguments(logs)
    describe_shared_arguments(sub)
    return parser


READ_ONLY_HELP = "no action can change the journal (default: the operator's dashboard)"
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
    for name in ("stop", "cancel", "release", "cleanup"):
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


if __name__ == "__main__":
    # `python -m refine_tui.cli` runs this file as __main__: run the refine_tui.cli module the
    # command modules import instead, so their UsageError is the one main() catches.
    from refine_tui.cli import main as module_main

    sys.exit(module_main())
