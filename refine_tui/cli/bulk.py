"""`refine cancel|stop|release|reassign` on several goals, or on a selection (DESIGN §15).

    refine cancel G1 G2 ... --reason R          refine cancel --node N --status S[,S] --reason R
    refine stop G1 G2 ...   | --node N --status S[,S]
    refine release G1 G2 ... | --node N --status S[,S]
    refine reassign G1 G2 ... --to M | --node N --status S[,S] --to M

One goal named, without ``--dry-run``, is the single-goal command of cli.py, unchanged (but
reassign, which has none: a batch of one). Otherwise
the batch of store.ops.bulk: the plan (``--dry-run`` prints it and writes nothing), then one
line per goal as it is done, and a summary; ``--json`` prints a JSON array with one report per
goal. Exit 0 when every goal was done (or nothing was left to do), 1 when some were refused or
skipped (each named on stderr), 2 for bad input, an unknown goal among them included: nothing
is written then.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from refine_tui.cli.common import (
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_USAGE,
    TITLE_WIDTH,
    OutputError,
    UsageError,
    emit,
    node_name,
    open_journal,
    printable,
    table,
)
from refine_tui.cli.values import goal_statuses
from refine_tui.visible import clip
from store.errors import GoalNotFoundError

if TYPE_CHECKING:
    from store.ops.bulk import BulkPlan, GoalReport


def add_target_arguments(parser: argparse.ArgumentParser) -> None:
    """The goals an operator command acts on: named, or selected by node and status."""
    parser.add_argument("goals", nargs="*", metavar="GOAL", help="one or more goal ids")
    parser.add_argument(
        "--status",
        type=goal_statuses,
        help="act on every goal of the node (--node, else this node) in these statuses",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print what would happen; write nothing"
    )


def is_batch(args: argparse.Namespace) -> bool:
    """Several goals, a selection or a dry run; one goal named is the single-goal command."""
    if args.goals and args.status is not None:
        raise UsageError("name goals or select them with --status, not both")
    if not args.goals and args.status is None:
        raise UsageError(
            "name a goal, or select goals with --status S[,S] (of --node N, else this node)"
        )
    return len(args.goals) != 1 or args.status is not None or args.dry_run


def run_batch(args: argparse.Namespace, action: str) -> int:
    from store.model.goal import check_reason
    from store.ops.bulk import Selection, dry_run, plan_bulk, run_bulk
    from store.ops.operator import default_operator

    node, operator = node_name(args), default_operator()
    reason = getattr(args, "reason", None)
    if reason is not None:  # refused before the journal is opened, as a single cancel's is
        check_reason(reason)
    selection = Selection(node, tuple(sorted(args.status))) if args.status else None
    grace = getattr(args, "grace", 5.0)
    with open_journal(args, write=not args.dry_run) as journal:
        try:
            plan = plan_bulk(
                journal,
                action,
                node=node,
                goal_ids=args.goals or None,
                selection=selection,
                grace_s=grace,
                to=getattr(args, "to", None),
            )
        except GoalNotFoundError as exc:  # a mistyped id: bad input, refused before any write
            print(f"refine: {exc.code}: {printable(exc.message)}", file=sys.stderr)
            return EXIT_USAGE
        if args.dry_run:
            reports = dry_run(plan)
            emit(args, [r.to_json() for r in reports], plan_text(plan))
            return EXIT_OK
        if not args.json:
            emit(args, None, plan.summary())
        lines = _Lines(args)
        done = run_bulk(
            journal, plan, reason=reason, operator=operator, grace_s=grace, on_report=lines
        )
    say_failed(done.failed)  # before the last output: a lost stdout loses no name
    if lines.lost is not None:
        raise lines.lost
    emit(args, [r.to_json() for r in done.goals], done.summary())
    return EXIT_OK if done.ok else EXIT_REFUSED


def say_failed(reports: Sequence[GoalReport]) -> None:
    """One line on stderr per goal refused or skipped, with its code (or its outcome's)."""
    for report in reports:
        code = report.code or report.outcome.upper().replace("-", "_").replace(" ", "_")
        print(f"refine: {code}: {printable(report.text())}", file=sys.stderr)


class _Lines:
    """Each goal's line as it is done (a long batch shows its progress). A reader that went
    away (`| head`) or a full disk ends the printing, never the batch: it is raised after."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.lost: BrokenPipeError | OutputError | None = None

    def __call__(self, report: GoalReport) -> None:
        if self.args.json or self.lost is not None:
            return
        try:
            emit(self.args, None, report.text())
        except (BrokenPipeError, OutputError) as exc:
            self.lost = exc


def plan_text(plan: BulkPlan) -> str:
    """The plan for a person: the summary, one row per goal, and that nothing was written."""
    rows = [
        (p.goal_id, p.status, clip(p.title, TITLE_WIDTH), f"{p.expect}: {p.why}")
        for p in plan.goals
    ]
    lines = [plan.summary()]
    if rows:
        lines.append(table(["goal", "status", "title", "what happens"], rows))
    lines.append("dry run: nothing was written")
    return "\n".join(lines)
