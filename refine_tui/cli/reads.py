"""The read commands: goals, runs, show, nodes, wait, check. They never change the journal."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Sequence
from typing import Any

from refine_tui.cli.common import (
    EXIT_OK,
    EXIT_REFUSED,
    REASON_WIDTH,
    TITLE_WIDTH,
    StreamedTable,
    emit,
    flush_stdout,
    journal_path,
    open_journal,
    printable,
    table,
    write_out,
)
from refine_tui.visible import clip, visible
from store.errors import (
    GoalNotFoundError,
    RefineError,
)

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
        reason = run.get("cancel_reason")  # a round ended by a move says so (once)
        why = (
            f": {visible(reason)}" if reason and reason != (goal or {}).get("cancel_reason") else ""
        )
        lines.append(
            f"run {run['run_id']}  [{run['status']}{why}]"
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


def cmd_nodes(args: argparse.Namespace) -> int:
    from store.ops.nodes import list_nodes

    with open_journal(args, write=False) as journal:
        nodes = list_nodes(journal)
    if args.state is not None:
        nodes = [view for view in nodes if view.state in args.state]
    rows = []
    for view in nodes:
        data = view.to_json()
        seen = data["last_seen"]
        if seen is not None and view.age_s is not None:
            seen = f"{seen} ({age_words(view.age_s)} ago)"
        capacity = data["capacity"]
        running = view.running if capacity is None else f"{view.running}/{capacity}"
        row = (view.node_id, view.state, seen, running, view.waiting, data["host"], data["version"])
        rows.append(row)
    emit(
        args,
        [view.to_json() for view in nodes],
        table(["node", "state", "last seen", "running", "waiting", "host", "version"], rows),
    )
    return EXIT_OK


def age_words(seconds: float) -> str:
    """``4 s``, ``12 min``, ``3 h``, ``2 d``: how long ago, for people."""
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= 2 * size:
            return f"{int(seconds // size)} {unit}"
    return f"{int(seconds)} s"


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
