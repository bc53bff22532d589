"""Rows → what the dashboard's tables and its row line show: the columns, their widths, and
pure functions from a row (and the widths and a clock where they matter) to its cells or words.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from rich.text import Text

from refine_tui import format as fmt
from refine_tui.rows import AttemptRow, GoalRow, RunRow, WorkerRow
from refine_tui.widgets.keyed_table import Column
from store.ops.nodes import NodeView

Clock = Callable[[], float]
Cells = tuple[Any, ...]

# Widths chosen for 80 columns first: the first seven Goal columns (what an operator scans:
# status, markers, elapsed) and all nine Attempt columns fit; round and worker follow off
# screen. Text cut with … is whole in the line under the table (the selected row, in words).
# The Note (needs cleanup, R: release) comes before Elapsed, Att and Node: a narrower terminal
# loses those first, and at 60 columns the Note still shows whole.
GOAL_COLUMNS = (
    Column("goal", "Goal", 14),
    Column("title", "Title", 12),
    Column("status", "Status", 9),
    Column("note", "Note", 16),
    Column("elapsed", "Elapsed", 7),
    Column("attempts", "Att", 4),
    Column("node", "Node", 4),
    Column("round", "Rnd", 3),
    Column("worker", "Worker", 12),
)
RUN_COLUMNS = (
    Column("run", "Run", 18),
    Column("status", "Status", 9),
    Column("attempts", "Att", 5),
    Column("submitted", "Submitted", 9),
    Column("cancel", "Cancel", None),
)
ATTEMPT_COLUMNS = (
    Column("epoch", "#", 2),
    Column("worker", "Worker", 7),
    Column("state", "State", 17),
    Column("started", "Started", 8),
    Column("duration", "Dur", 6),
    Column("pid", "PID", 7),
    Column("alive", "Alive", 5),
    Column("cpu", "CPU", 4),
    Column("memory", "Mem", 5),
)
NODE_COLUMNS = (
    Column("node", "Node", 14),
    Column("state", "State", 7),
    Column("seen", "Seen", 7),
    Column("running", "Running", 13),
    Column("waiting", "Waiting", 7),
    Column("host", "Host", None),
)
BAR_CELLS = 6  # the running/capacity bar's width, in cells
# The Command (its file name and arguments) before Worker and Started, which a wider terminal
# shows (widths_for): last, it had four cells at 80 columns, the first folder of its path.
WORKER_COLUMNS = (
    Column("run", "Run", 16),
    Column("epoch", "#", 2),
    Column("pid", "PID", 7),
    Column("alive", "Alive", 5),
    Column("cpu", "CPU", 4),
    Column("memory", "Mem", 7),
    Column("argv", "Command", 25),
    Column("worker", "Worker", 10),
    Column("started", "Started", 8),
)
WORKER_SHOWN_LATER = 10 + 8 + 2 * 2  # Worker and Started, with their padding
# All Goal columns at their base widths, with cell padding and a scrollbar.
TABLE_WIDTH = sum(c.width or 0 for c in GOAL_COLUMNS) + 2 * len(GOAL_COLUMNS) + 2
ATTEMPT_TABLE_WIDTH = sum(c.width or 0 for c in ATTEMPT_COLUMNS) + 2 * len(ATTEMPT_COLUMNS)
LONG_TEXT = 200  # a last column sized to content shows at most this many cells (argv can be 64k)
# A title in the row line: one line's worth at 80 columns. The line shows 3 lines at most, and
# a 200-character title pushed the status, node and worker out of it.
LINE_TITLE = 78
NEEDS_CLEANUP = "needs cleanup"  # an orphaned attempt's State, in the Goals Note's words
BASE_WIDTHS = {"title": 12, "note": 16, "worker": 7, "state": 17, "argv": 25}


def widths_for(terminal_width: int) -> dict[str, int]:
    """Title, Note and an attempt's State (and Worker) grown into the room a wide terminal has;
    the attempt State fits "interrupted (… by dana@n1)"."""
    spare = max(0, terminal_width - TABLE_WIDTH)  # round and worker are on screen first
    more = max(0, terminal_width - ATTEMPT_TABLE_WIDTH)
    command = max(0, terminal_width - 80 - WORKER_SHOWN_LATER)  # Worker and Started first
    return {
        "argv": BASE_WIDTHS["argv"] + min(command, LONG_TEXT),
        "title": BASE_WIDTHS["title"] + min(spare // 2, 28),
        "note": BASE_WIDTHS["note"] + min(spare - spare // 2, 46),
        "state": BASE_WIDTHS["state"] + min(more, 18),
        "worker": BASE_WIDTHS["worker"] + min(max(0, more - 18), 30),
    }


def goal_cells(
    r: GoalRow, widths: Mapping[str, int], clock: Clock, away: str | None = None
) -> Cells:
    """``away``: the presence of the Goal's node, when that is another node and it is not
    live (``silent``, ``stopped``): said first in the Note."""
    elapsed = fmt.duration(clock() - r.started_at) if r.started_at else ""
    return (
        fmt.clip(r.goal_id, 14),
        fmt.clip(r.title, widths["title"]),
        fmt.status_text(r.status),
        fmt.note_text(fmt.clip(goal_note(r, away), widths["note"])),
        elapsed,
        r.attempts,
        fmt.clip(r.node_id, 4),
        str(r.round) if r.round else "",
        fmt.clip(r.worker, 12),
    )


def run_cells(r: RunRow) -> Cells:
    return (
        r.run_id,
        fmt.status_text(r.status),
        r.attempts,
        fmt.clock(r.submitted_at),
        fmt.note_text(fmt.clip(r.cancel, LONG_TEXT)),
    )


def attempt_cells(
    a: AttemptRow, widths: Mapping[str, int], clock: Clock, presence: NodeView | None = None
) -> Cells:
    """``presence``: the attempt's node when it is another one (its PID is not seen here:
    the PID and Alive columns show that node and its state instead)."""
    end = a.ended_at if a.ended_at is not None else (clock() if a.running else None)
    alive = {True: Text("yes", "green"), False: Text("no", "red"), None: Text("")}[a.alive]
    if a.pid is not None and not a.running:  # an ended attempt: its last observation
        alive.stylize("dim")
    start = _attempt_start(a, widths, end, orphaned(a, presence))
    if presence is not None and a.pid is None and a.running and presence.state != "unknown":
        # The node's beat is evidence; a node that never beat says nothing: blank, not guessed.
        node = fmt.clip(f"@{presence.node_id}", 7)
        return (*start, node, state_text(presence.state), "", "")
    return (
        *start,
        str(a.pid) if a.pid else "",
        alive,
        fmt.percent(a.cpu_percent),
        fmt.size(a.rss_bytes),
    )


def orphaned(a: AttemptRow, presence: NodeView | None) -> bool:
    """A running attempt left for an operator: this node has no live process of it, or its
    node (another one) is silent or stopped — what the Goals table marks `needs cleanup`."""
    if not a.running:
        return False
    elsewhere = presence is not None and a.pid is None and presence.state in ("silent", "stopped")
    return a.needs_cleanup or elsewhere


def _attempt_start(
    a: AttemptRow, widths: Mapping[str, int], end: float | None, orphan: bool = False
) -> Cells:
    state = fmt.clip(a.state, widths["state"])
    return (
        str(a.epoch),
        fmt.clip(a.worker, widths["worker"]),
        fmt.note_text(NEEDS_CLEANUP) if orphan else fmt.status_text(state),
        fmt.clock(a.started_at),
        fmt.duration(end - a.started_at) if a.started_at and end else "",
    )


STATE_STYLES = {"live": "green", "silent": "bold red", "stopped": "dim", "unknown": "dim"}
IDLE_SILENT_STYLE = "dim red"  # silent, but nothing runs there or waits for it (retired?)


def state_text(state: str, idle: bool = False) -> Text:
    """A node's presence state: the word says it, the colour only repeats it (a silent node
    with no work left on it does not call for the operator as one with work does)."""
    style = IDLE_SILENT_STYLE if idle and state == "silent" else STATE_STYLES.get(state, "")
    return Text(state, style)


def bar(used: int, capacity: int | None, cells: int = BAR_CELLS) -> str:
    """``████░░ 4/6``: running out of capacity, readable without colour (no capacity known:
    the count alone)."""
    if not capacity:
        return f"{used}/?"
    full = min(cells, round(cells * used / capacity))
    if used and not full:
        full = 1  # one running attempt is never drawn as none
    return "█" * full + "░" * (cells - full) + f" {used}/{capacity}"


def node_cells(n: NodeView) -> Cells:
    p = n.presence
    return (
        fmt.clip(n.node_id, 14),
        state_text(n.state, idle=not (n.running or n.waiting)),
        fmt.duration(n.age_s) if n.age_s is not None else "never",
        bar(n.running, p.capacity if p else None),
        str(n.waiting) if n.waiting else "",
        p.host if p else "",
    )


def node_words(n: NodeView) -> str:
    """A node in words: its presence, what runs there, and what `x` would do."""
    text = f"node {n.node_id} — {presence_words(n)}"
    if n.presence is not None and n.state != "live":  # the walkthrough's "last seen 10:42:07"
        text += f" (last seen {fmt.clock(n.presence.last_seen)})"
    text += f" · {n.running} running"
    p = n.presence
    if p is not None:
        text += f", capacity {p.capacity}"
    if n.waiting:
        one = n.waiting == 1
        text += f" · {n.waiting} goal{'' if one else 's'} wait{'s' if one else ''} for it"
    if p is not None:
        text += f" · host {p.host} · version {p.version}"
    if n.state == "silent" and n.running:
        text += " · x: confirm cleanup of its attempts"
    elif n.state == "stopped" and n.running:  # a node's exit leaves its workers running
        text += " · x: confirm cleanup of its attempts once their work has ended"
    elif n.state != "live" and n.waiting:
        text += " · m: move them to another node"
    return text


def presence_words(n: NodeView) -> str:
    """``live, seen 2s ago`` / ``silent for 4m00s`` / ``stopped 1m ago`` / ``never beat``."""
    if n.age_s is None:
        return "unknown: it never beat"
    age = fmt.duration(n.age_s)
    if n.state == "live":
        return f"live, seen {age} ago"
    if n.state == "silent":
        return f"silent for {age}"
    return f"{n.state} {age} ago"  # its time of day follows (node_words)


def worker_cells(w: WorkerRow, width: int = BASE_WIDTHS["argv"]) -> Cells:
    """``width``: the Command column's."""
    return (
        fmt.clip(w.run_id, 16),
        str(w.epoch),
        str(w.pid),
        Text("yes", "green") if w.alive else Text("no", "red"),
        fmt.percent(w.cpu_percent),
        fmt.size(w.rss_bytes),
        fmt.clip(w.comm, width),
        fmt.clip(w.worker, 10),
        fmt.clock(w.started_at),
    )


# --- the selected row in words, whole: what the columns had to cut at 80 columns -----------------


def goal_note(g: GoalRow, away: str | None) -> str:
    """The Note: ``node silent`` (its node, another one, beats no more: what runs there is
    not seen, what waits for it waits) or ``node stopped``, then the row's own note."""
    return " · ".join(part for part in (f"node {away}" if away else "", g.note) if part)


def goal_words(g: GoalRow, away: str | None = None) -> str:
    extra = [f"node {g.node_id}", f"round {g.round}", f"attempts {g.attempts}"]
    if g.worker:
        extra.append(f"worker {g.worker}")
    note = goal_note(g, away)
    note = f" ({note})" if note else ""
    title = fmt.clip(g.title, LINE_TITLE)
    return f"{g.goal_id}: {title} — {g.status}{note} · " + " · ".join(extra)


def run_words(r: RunRow) -> str:
    cancel = f" · {r.cancel}" if r.cancel else ""
    return f"{r.run_id} — {r.status} · attempts {r.attempts}{cancel}"


def attempt_words(
    a: AttemptRow, elsewhere: str | None = None, presence: NodeView | None = None
) -> str:
    """``elsewhere``: the node the attempt's Goal names, when it is not this dashboard's (its
    process record and log are on that machine: the PID and Alive columns show its presence,
    ``presence``, when it is known)."""
    text = f"attempt {a.epoch} — {a.state} · worker {a.worker}"
    if a.needs_cleanup and a.running:
        return (
            f"attempt {a.epoch} — {a.state} ({NEEDS_CLEANUP}: no process of it is left on this "
            f"node) · worker {a.worker} · x confirms it ended"
        )
    if elsewhere is not None and a.pid is None:
        if presence is None or not a.running:
            return text + f" · on node {elsewhere}: its process is not observed from here"
        text += f" · on node {elsewhere}: its process is not observed from here"
        text += f" · node {elsewhere} {presence_words(presence)}"
        if presence.state in ("silent", "stopped"):
            text += " · needs cleanup? n: Nodes, x there confirms its attempts"
        return text
    if a.pid is None and a.running:  # starting, or its node keeps its records elsewhere
        return text + " · its process is not observed from here"
    if a.pid is not None:
        seen = {True: "alive", False: "not alive", None: "not observed"}[a.alive]
        text += f" · pid {a.pid} {seen}"
        if a.observed_at is not None and not a.running:
            text += f" at {fmt.clock(a.observed_at)} (last observation)"
    return text


def worker_words(w: WorkerRow) -> str:
    """A worker process, with its command whole (its column shows a few cells at 80)."""
    alive = "alive" if w.alive else "not alive"
    return f"{w.run_id} attempt {w.epoch} · pid {w.pid} {alive} · worker {w.worker} · {w.argv}"


def empty_words(filter_text: str, journal_label: str) -> str:
    """An empty Goals table says why, and what to do."""
    if filter_text:
        return f"No goal matches “{filter_text}” — escape clears the filter"
    return (
        f"No goals in this journal yet — add one: refine --journal {journal_label} "
        "goal add --title TITLE -- COMMAND ARGS…"
    )
