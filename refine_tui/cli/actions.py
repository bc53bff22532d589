"""The commands that change the journal: init, goal add, the operator's actions (stop, cancel,
cleanup, release) and copy."""

from __future__ import annotations

import argparse
import os
import sys
import unicodedata
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from refine_tui.cli.common import (
    EXIT_OK,
    EXIT_REFUSED,
    UsageError,
    emit,
    journal_path,
    node_name,
    open_journal,
    printable,
    terminated_as_interrupted,
)
from refine_tui.cli.reads import require_goal
from refine_tui.visible import listed
from store.journal.locations import journal_file_exists
from store.journal.url import redact

# Each command imports the store modules it uses: a quick `refine goals` must not pay for the
# operator's process tools (psutil), the checker or the dashboard (DESIGN §9, CLI start-up).
if TYPE_CHECKING:
    from store.journal.api import Journal
    from store.ops.operator import ActionReport


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
            cwd=_typed_here(args.cwd),
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


def _typed_here(cwd: str | None) -> str | None:
    """A relative --cwd is the folder of that name where the operator typed it: the node may
    run anywhere, and the goal's recipe then names one folder for every machine and every
    reader (it ran relative to the node's own working folder, wherever that was started)."""
    return cwd if not cwd or os.path.isabs(cwd) else os.path.abspath(cwd)


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


def act(args: argparse.Namespace, action: Callable[[Journal], ActionReport]) -> int:
    """Run one operator action on the writable journal and print what it did."""
    with open_journal(args, write=True) as journal:
        report = action(journal)
    emit(args, report.to_json(), report.text())
    return EXIT_OK


def cmd_stop(args: argparse.Namespace) -> int:
    from refine_tui.cli.bulk import is_batch, run_batch
    from store.ops.operator import default_operator, stop_goal

    if is_batch(args):
        return run_batch(args, "stop")
    goal, node, operator = args.goals[0], node_name(args), default_operator()
    return act(args, lambda j: stop_goal(j, goal, node=node, operator=operator, grace_s=args.grace))


def cmd_cancel(args: argparse.Namespace) -> int:
    from refine_tui.cli.bulk import is_batch, run_batch
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
    if args.to:
        raise UsageError("--to moves a whole node's waiting goals: give --node N, not RUN")
    if args.dry_run:
        raise UsageError("--dry-run shows a whole node: give --node N, not RUN")
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
    """`refine cleanup --node N [--to M[,M...]]`: every running attempt of node N, while N is
    silent or stopped; with --to, then every goal that waits for N (queued or held) moves."""
    from store.ops.node_cleanup import cleanup_node, plan_moving_waiting
    from store.ops.operator import default_node, default_operator

    if args.target_node is None:
        usage = "cleanup needs RUN --epoch E (one attempt), or --node N (a whole node)"
        raise UsageError(usage + (" (--to follows --node N)" if args.to else ""))
    if args.epoch is not None:
        raise UsageError("--epoch names an attempt of RUN: give RUN, or --node N without --epoch")
    node, here, operator = args.target_node, args.node or default_node(), default_operator()
    if args.dry_run:
        return cleanup_node_dry_run(args, node, here)
    with open_journal(args, write=True) as journal:
        if args.to:  # an unknown --to is refused before anything is written
            plan_moving_waiting(journal, node, here=here, to=args.to)
        done = cleanup_node(journal, node, here=here, operator=operator, method=args.method)
        moved = None
        if args.to:
            from store.ops.bulk import run_bulk

            plan = plan_moving_waiting(journal, node, here=here, to=args.to)
            moved = run_bulk(journal, plan, operator=operator)
    reports = [report.to_json() for report in done.reports]
    lines = [done.text(next_step=moved is None)]
    if moved is not None:
        reports += [goal.to_json() for goal in moved.goals]
        lines += [goal.text() for goal in moved.goals] + [moved.summary()]
    emit(args, reports, "\n".join(lines))
    code = EXIT_OK
    if done.errors:
        first = done.errors[0]
        print(
            f"refine: {first.code}: {len(done.errors)} of {len(done.reports)} attempts of node"
            f" {node} not confirmed; first: {printable(first.message)}",
            file=sys.stderr,
        )
        code = EXIT_REFUSED
    if moved is not None and moved.failed:
        from refine_tui.cli.bulk import say_failed

        say_failed(moved.failed)
        code = EXIT_REFUSED
    return code


def cleanup_node_dry_run(args: argparse.Namespace, node: str, here: str) -> int:
    """What `refine cleanup --node N [--to M]` would do, refused as it refuses; writes nothing."""
    from store.ops.node_cleanup import plan_moving_waiting, plan_node_cleanup

    with open_journal(args, write=False) as journal:
        if args.to:  # an unknown --to is refused as the cleanup refuses it
            plan_moving_waiting(journal, node, here=here, to=args.to)
        plan = plan_node_cleanup(journal, node, dry_run=True, here=here)
        moving = plan.waiting_after(journal)
    attempts = [
        {
            "action": "cleanup",
            "goal_id": a.goal.goal_id,
            "run_id": a.run.run_id,
            "epoch": a.epoch,
            "expect": plan.expect(a),
            "why": plan.refused(a),
        }
        for a in plan.attempts
    ]
    lines = [plan.text()]
    lines += [
        f"  cleanup {a['goal_id']}: attempt {a['epoch']} → {a['expect']}"
        + (f": {a['why']}" if a["why"] else "")
        for a in attempts
    ]
    then = moving_sentence(node, args.to, moving) if args.to else waiting_sentence(node, moving)
    lines += [then, "dry run: nothing was written"] if then else ["dry run: nothing was written"]
    data = {"cleanup": attempts, "move": {"to": args.to, "goals": moving} if args.to else None}
    emit(args, {**data, "dry_run": True}, "\n".join(lines))
    return EXIT_OK


def waiting_sentence(node: str, goals: list[str]) -> str:
    """Without --to: the goals that would then still wait for the gone node (only it starts
    them), and how to move them in the same command."""
    if not goals:
        return ""
    waits = "1 goal waits" if len(goals) == 1 else f"{len(goals)} goals wait"
    return f"then {waits} for node {node}: {listed(goals, 8)}; --to NODE[,NODE] also moves them"


def moving_sentence(node: str, to: list[str], goals: list[str]) -> str:
    """The dry run's last line with --to: which goals would then move, and where."""
    if not goals:
        return f"then no goal waits for node {node}: nothing moves"
    where = f"node {to[0]}" if len(to) == 1 else f"nodes {', '.join(to)} (by room left)"
    moves = "1 goal moves" if len(goals) == 1 else f"{len(goals)} goals move"
    return f"then {moves} to {where}: {listed(goals, 8)}"


def cmd_reassign(args: argparse.Namespace) -> int:
    from refine_tui.cli.bulk import is_batch, run_batch

    is_batch(args)  # its usage checks: goals named, or a selection
    return run_batch(args, "reassign")


def cmd_release(args: argparse.Namespace) -> int:
    from refine_tui.cli.bulk import is_batch, run_batch
    from store.ops.operator import default_operator, release_goal

    if is_batch(args):
        return run_batch(args, "release")
    goal, operator = args.goals[0], default_operator()
    return act(args, lambda j: release_goal(j, goal, operator=operator))


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
