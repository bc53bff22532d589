"""The dashboard's keys, and whether each applies to what is selected (and, in words, why not).

``why`` is a pure function of a ``Selection`` (what the screen has selected, and the journal's
state): the dashboard greys keys with it and says why on the line above the footer. The flows
the keys start are in ``refine_tui.actions``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from textual.binding import Binding, BindingType

from refine_tui.rows import GoalRow
from refine_tui.visible import cells, clip
from store.model.goals import REASSIGNABLE
from store.ops.nodes import NodeView

# The dashboard's keys. Back beside the tables' enter (the focused table's keys lead the
# footer); shown only where it goes somewhere (Dashboard.check_action).
KEYS: list[BindingType] = [
    Binding("escape,backspace", "back", "Back"),
    Binding("question_mark", "help", "Help"),
    Binding("q", "app.quit", "Quit"),
    # The keys that open a dialog, and `/`, run as the app reads them (priority), before the
    # keys that came with them reach the table: those are then held for the dialog, or typed
    # into the box (Dashboard.holding_keys, FilterBox.open). Not while a text field has focus.
    Binding("s", "stop", "Stop", priority=True),
    Binding("c", "cancel_goal", "Cancel", priority=True),
    Binding("x", "cleanup", "Cleanup", priority=True),
    Binding("R", "release", "Release", priority=True),
    Binding("m", "reassign", "Move", priority=True),
    Binding("l", "log", "Log"),
    Binding("h", "history", "History"),
    Binding("w", "workers", "Workers", show=False),
    Binding("slash", "filter", "Filter", priority=True),
    Binding("p", "pause", "Pause", show=False),
    Binding("r", "refresh", "Refresh", show=False),
]
# The priority keys above: never while a text field has the focus or a dialog is on its way.
EAGER = frozenset({"stop", "cancel_goal", "cleanup", "release", "reassign", "filter"})
# Marks (DESIGN §15): with marks, s c R m act on the marked Goals.
KEYS += [
    Binding("space", "mark", "Mark", show=False),
    Binding("asterisk", "mark_all", "Mark all", show=False),
    Binding("u", "unmark", "Unmark", show=False),
]
MARK_ACTIONS = ("mark", "mark_all", "unmark")
# The operator actions a batch does (store.ops.bulk's names), with marks.
BULK = {"stop": "stop", "cancel_goal": "cancel", "release": "release", "reassign": "reassign"}
# The Nodes view (DESIGN §14): its own block, so other keys land beside it without conflict.
KEYS.append(Binding("n", "nodes", "Nodes", show=False))
# The attempt timeline (DESIGN §17), of the selected Goal or Run.
KEYS.append(Binding("t", "timeline", "Timeline"))
# What a footer too narrow for every key keeps, first to last (whole keys: the others are in
# `?` help): Help and Quit, the Filter, the way down (the tables' enter) and back, then the
# operator keys. Log and History go first.
FOOTER_KEEPS = (
    "help",
    "app.quit",
    "filter",
    "select_cursor",
    "back",
    "stop",
    "cancel_goal",
    "cleanup",
    "release",
    "log",
    "history",
    "timeline",
    "reassign",
)
OPERATOR_ACTIONS = ("stop", "cancel_goal", "cleanup", "release", "reassign")
# The views where only some of the Goals' keys mean anything: the others are not shown there.
VIEW_ACTIONS: dict[str, tuple[str, ...]] = {"nodes": ("cleanup", "reassign"), "workers": ()}
SELECTION_ACTIONS = ("log", "history", "timeline")
ACTION_TITLES = {
    "stop": "Stop",
    "cancel_goal": "Cancel",
    "cleanup": "Confirm cleanup",
    "release": "Release",
    "reassign": "Move to node",
    "log": "Log",
    "history": "History",
    "timeline": "Timeline",
    "mark": "Mark",
    "mark_all": "Mark all",
    "unmark": "Unmark",
}
ACTION_KEYS = {"stop": "s", "cancel_goal": "c", "cleanup": "x", "release": "R", "reassign": "m"}
SYSTEM_COMMANDS = (
    ("Stop", "Stop the selected goal's attempt (s)", "stop"),
    ("Cancel goal", "Cancel the selected goal, with a reason (c)", "cancel_goal"),
    ("Confirm cleanup", "Confirm a silent attempt's work has ended (x)", "cleanup"),
    ("Release", "Make a held goal actionable again (R)", "release"),
    ("Move to node", "Move a queued or held goal (or a node's) to another node (m)", "reassign"),
    ("Log", "Show / hide the attempt's log (l)", "log"),
    ("History", "Show / hide the run's event history (h)", "history"),
    ("Workers", "This node's worker processes (w)", "workers"),
    ("Timeline", "The goal's (or run's) attempts on a time axis (t)", "timeline"),
    ("Nodes", "Every node's presence; x confirms a silent node's attempts (n)", "nodes"),
    ("Filter", "Goals by id, title, status, node; in Nodes: by id, state, host (/)", "filter"),
    ("Pause / resume", "Pause live updates (p)", "pause"),
    ("Refresh", "Reload everything from the journal (r)", "refresh"),
    ("Help", "All keys (?)", "help"),
    ("Mark / unmark", "Mark the selected goal: s c R m act on the marked (space)", "mark"),
    ("Mark all shown", "Mark every goal the filter shows (*)", "mark_all"),
    ("Clear marks", "Unmark every goal (u)", "unmark"),
)


# --- what applies ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Selection:
    """What the screen has selected, and what the actions depend on besides."""

    node: str  # this dashboard's node
    read_only: bool
    journal_state: str  # the header's state: live, paused, missing, broken, connecting, ...
    view: str  # goals | runs | attempts | workers
    goal: GoalRow | None
    attempt: tuple[str, int] | None  # (run_id, epoch) the attempt-level actions apply to
    run_id: str | None
    marked: int = 0  # marked Goals (s c R act on them in the Goals view)
    hidden_marks: int = 0  # of which the filter does not show

    @property
    def bulk(self) -> bool:
        """s c R act on the marked Goals rather than the selected row."""
        return self.marked > 0 and self.view == "goals"

    presence: NodeView | None = None  # the node selected in the Nodes view


def why(action: str, sel: Selection) -> tuple[str, str] | None:
    """(short, long) reason ``action`` is greyed: short for the hint line, long to notify."""
    if action in OPERATOR_ACTIONS:
        if sel.read_only:
            return "read-only", "the journal is open read-only"
        if sel.journal_state in ("missing", "broken", "connecting"):
            return "no journal", "the journal is unavailable"
    if sel.view == "nodes":
        return why_node(action, sel.presence)
    if sel.bulk and action in BULK:
        return None  # the plan says what it does to each marked Goal
    if action in MARK_ACTIONS:
        return why_mark(action, sel)
    if sel.view == "workers":
        return "n/a here", "not in the Workers view (escape goes back)"
    goal = sel.goal
    if goal is None:
        return "no goal", "no goal selected"
    if goal.status == "corrupt":
        return "corrupt", "the goal's record is corrupt"
    if action == "stop":
        if goal.status != "running":
            return f"{goal.status}", f"goal is {goal.status}, nothing runs"
        if goal.node_id != sel.node:
            return (
                f"on {goal.node_id}",
                f"it runs on node {goal.node_id}; Stop works on this node ({sel.node}) only",
            )
        if goal.needs_cleanup:  # advice: pressed anyway, the store answers (store_answers)
            return no_process(goal, sel.node)
    elif action == "cancel_goal":
        if goal.terminal:
            return f"{goal.status}", f"goal is already {goal.status}"
    elif action == "cleanup":
        target = sel.attempt
        if goal.running_epoch is None or target is None:
            return "nothing running", "the goal has no running attempt"
        if target != (goal.run_id, goal.running_epoch):
            return "not running", f"attempt {target[1]} of {target[0]} is not running"
    elif action == "release":
        if goal.status != "held":
            return "not held", f"goal is {goal.status}; only a held goal is released"
    elif action == "reassign":
        if goal.status not in REASSIGNABLE:
            return (
                f"{goal.status}",
                f"goal is {goal.status}; only a queued or held goal moves to another node"
                + (" (stop it, or confirm its cleanup, first)" if goal.status == "running" else ""),
            )
    elif action == "history" and sel.run_id is None:
        return "no run", "no run selected"
    return None


def no_process(goal: GoalRow, node: str) -> tuple[str, str]:
    """Stop on a `needs cleanup` row: no live process proves the attempt, x is what to do."""
    return (
        "no process here — x confirms cleanup",
        f"no process of attempt {goal.running_epoch} is left on node {node} to stop;"
        " x (Confirm cleanup) records that its work has ended",
    )


def store_answers(action: str, sel: Selection) -> bool:
    """Greyed as advice only (Stop on a `needs cleanup` row): pressed anyway, the flow runs
    and the store answers, with its typed refusal (NO_PROCESS_RECORD) when no process record
    is left, or a Stop of the dead process its record names."""
    goal = sel.goal
    if action != "stop" or goal is None or not goal.needs_cleanup or sel.bulk:
        return False
    return why(action, sel) == no_process(goal, sel.node)


def why_mark(action: str, sel: Selection) -> tuple[str, str] | None:
    if action == "unmark":
        return None if sel.marked else ("no marks", "no goal is marked")
    if sel.view != "goals":
        return "goals only", "marks are made in the Goals view (escape goes back)"
    if action == "mark" and sel.goal is None:
        return "no goal", "no goal selected"
    return None


def marks_words(sel: Selection) -> str:
    """The marks in words: "3 marked (1 hidden by the filter)" ("" without marks)."""
    if not sel.marked:
        return ""
    hidden = f" ({sel.hidden_marks} hidden by the filter)" if sel.hidden_marks else ""
    return f"{sel.marked} marked{hidden}"


def why_node(action: str, node: NodeView | None) -> tuple[str, str] | None:
    """In the Nodes view `x` applies to a silent or stopped node that runs attempts, and `m`
    to any node (its queued and held goals move: the plan says if there are none)."""
    if action not in ("cleanup", "reassign"):
        return "n/a here", "not in the Nodes view (escape goes back)"
    if node is None:
        return "no node", "no node selected"
    if action == "reassign":
        return None
    if node.state == "live":
        return "node live", f"node {node.node_id} is live: its attempts are its own to end"
    if node.state == "unknown":
        return "never beat", f"node {node.node_id} never beat: nothing says it is gone"
    if not node.running:
        return "nothing running", f"no attempt runs on node {node.node_id}"
    return None


def applies(sel: Selection) -> tuple[bool, ...]:
    """Which of the operator and selection actions apply (the footer greys the others)."""
    actions = (*OPERATOR_ACTIONS, *SELECTION_ACTIONS, *MARK_ACTIONS)
    return tuple(why(a, sel) is None for a in actions)


def check(action: str, sel: Selection) -> bool | None:
    """As ``App.check_action``: True (applies), None (shown greyed: it does not, now), False
    (not shown: in the Nodes view only `x` and `m` of the Goals' keys mean anything, in the
    Workers view none; at 80 columns the Nodes view's footer had no room left for `m`)."""
    if action in OPERATOR_ACTIONS or action in SELECTION_ACTIONS or action in MARK_ACTIONS:
        if sel.view in VIEW_ACTIONS and action not in VIEW_ACTIONS[sel.view]:
            return False
        return True if why(action, sel) is None else None
    return True


def key_action(key: str) -> str | None:
    """The dashboard's action for ``key`` (None: not one of its keys)."""
    for binding in KEYS:
        if isinstance(binding, Binding) and key in binding.key.split(","):
            return binding.action
    return None


def key_refusal(key: str, selection: Callable[[], Selection]) -> str | None:
    """What pressing ``key`` says when its action is greyed (None: nothing to say, or the
    store answers); the selection is looked at only for the dashboard's own keys."""
    if (action := key_action(key)) is None:
        return None
    sel = selection()
    return None if store_answers(action, sel) else refusal(action, sel)


def refusal(action: str, sel: Selection) -> str | None:
    """What a greyed action says when asked for anyway (None: it applies or is a view's)."""
    reason = why(action, sel) if action in ACTION_TITLES else None
    return f"{ACTION_TITLES[action]}: {reason[1]}" if reason is not None else None


def hint(sel: Selection, width: int = 1000) -> str:
    """The line under the table: why the operator keys are greyed, in short; whole entries
    only, as many as ``width`` cells hold (the rest ends in …: pressed, a key says why)."""
    if sel.read_only:
        return "read-only: s c x R m are disabled"
    if sel.journal_state in ("missing", "broken"):
        return "journal unavailable: actions are disabled until it is back"
    if sel.bulk:
        return f"{marks_words(sel)} · s c R m act on them · u clears"
    marks = [marks_words(sel)] if sel.marked else []
    shown = VIEW_ACTIONS.get(sel.view, OPERATOR_ACTIONS)  # the keys its footer shows
    entries = marks + [
        f"{ACTION_KEYS[a]}: {short}" for a in shown if (short := (why(a, sel) or ("", ""))[0])
    ]
    return fitted(entries, width)


def fitted(entries: list[str], width: int, sep: str = " · ") -> str:
    """``entries`` joined by ``sep``: those that fit in ``width`` cells whole, then … if any
    was left out (a first one too long for the line is cut)."""
    line = ""
    for entry in entries:
        longer = f"{line}{sep}{entry}" if line else entry
        if cells(longer) > width:
            if not line:
                return clip(entry, width)
            return f"{line} …" if cells(line) + 2 <= width else line
        line = longer
    return line
