"""Alerts for the operator at the dashboard (DESIGN §16): a Goal that becomes ``exhausted``, an
attempt that becomes ``needs cleanup``, a node that goes ``silent``: one notification each (or
one for many of a kind raised together: ``grouped``), never twice for the same thing, never for
what was already so when the dashboard opened.

``Alerts.take`` sees each journal update's Goal rows (on the UI thread: a dict look-up a row).
A full read (the first one, a new filter, a reload) only learns what is so; a row that a commit
touched since (a partial update carries only those) and now is exhausted or needs cleanup
became so while the dashboard watched, unless it was known to be so already.

``Alerts.take_nodes`` sees the nodes' presence, read every few seconds (beats commit nothing).
One silence is one node's silence after one last beat: said once; a node that beats again and
goes silent again is a new silence. A node silent at the first look (or first seen silent in a
full read) was silent before the dashboard looked: never said.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Literal

from refine_tui import format as fmt
from refine_tui.rows import GoalRow
from refine_tui.visible import listed
from store.journal.presence import Presence, State
from store.records import dataclass

Key = tuple[str, ...]
Kind = Literal["exhausted", "cleanup", "silent"]
ONE_BY_ONE = 2  # more alerts of a kind at once than this are said in one notification
GATHER_S = 0.5  # alerts raised within this of the first are said together (a burst spans updates)
# Alerts raised this soon after others were said wait for it, then are said together: a trickle
# of failures (one a second) stacked a toast a second, each shown late behind the older ones.
PACE_S = 7.5  # half an alert toast's 15 s: two at most show at once
NAMED = 8  # the subjects a grouped alert names (the rest counted)


@dataclass(frozen=True)
class Alert:
    """One thing that became so: its kind, what it is about (a goal, a node), in words."""

    kind: Kind
    subject: str
    words: str


class Pace:
    """When alerts raised now are said: ``GATHER_S`` after the first of them, or ``PACE_S``
    after the last were said, whichever is later."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._next = 0.0

    def wait(self) -> float:
        return max(GATHER_S, self._next - self.clock())

    def said(self) -> None:
        self._next = self.clock() + PACE_S


def grouped(alerts: Sequence[Alert]) -> list[str]:
    """The notifications for alerts raised together: each in its own words, but a kind raised
    more than ``ONE_BY_ONE`` times in one notification naming them (a bad deploy exhausting 14
    goals is one notification, not 14 stacked over the table)."""
    by_kind: dict[Kind, list[Alert]] = {}
    for alert in alerts:
        by_kind.setdefault(alert.kind, []).append(alert)
    said = []
    for kind, these in by_kind.items():
        if len(these) <= ONE_BY_ONE:
            said += [alert.words for alert in these]
        else:
            said.append(_together(kind, [alert.subject for alert in these]))
    return said


def _together(kind: Kind, subjects: list[str]) -> str:
    n, names = len(subjects), listed(subjects, NAMED)
    if kind == "exhausted":
        return f"{n} goals are exhausted: {names}"
    if kind == "cleanup":
        return f"{n} attempts need cleanup (their processes are gone; x confirms each): {names}"
    return f"{n} nodes went silent: {names} (n: the nodes; x there confirms a node's attempts)"


class Alerts:
    """What has been seen, and what was said."""

    def __init__(self) -> None:
        self._known: dict[Key, bool] = {}  # a condition's last known state
        self._said: set[Key] = set()
        self.node_states: dict[str, State] = {}  # each node's presence at the last look
        self._silences: dict[str, float] = {}  # node → the last beat its known silence follows

    def take(self, goals: Mapping[str, GoalRow | None], full: bool) -> list[Alert]:
        """The alerts an update raises."""
        said = []
        for row in goals.values():
            if row is None:
                continue
            for key, holds, words in conditions(row):
                was = self._known.get(key)
                self._known[key] = holds
                if holds and key not in self._said and (was is False or (was is None and not full)):
                    self._said.add(key)
                    kind: Kind = "exhausted" if key[0] == "exhausted" else "cleanup"
                    said.append(Alert(kind, row.goal_id, words))
                elif holds:
                    self._said.add(key)  # so from the start: never said
        return said

    def take_nodes(self, presence: tuple[float, list[Presence]], full: bool) -> list[Alert]:
        """The alerts a look at the nodes' presence raises (``presence``: the database's
        clock now and every node's row)."""
        now, rows = presence
        said = []
        for row in rows:
            state = row.state(now)
            was = self.node_states.get(row.node_id)
            self.node_states[row.node_id] = state
            if state != "silent" or self._silences.get(row.node_id) == row.last_seen:
                continue
            self._silences[row.node_id] = row.last_seen
            if was is not None or not full:
                said.append(Alert("silent", row.node_id, silent_words(row, now)))
        return said


def silent_words(row: Presence, now: float) -> str:
    return (
        f"node {row.node_id} ({row.host}) went silent: no heartbeat for "
        f"{fmt.duration(now - row.last_seen)} (n: the nodes; x there confirms its attempts)"
    )


def conditions(row: GoalRow) -> Iterator[tuple[Key, bool, str]]:
    """(key, holds, words) for each condition an alert is about."""
    yield (
        ("exhausted", row.goal_id),
        row.status == "exhausted",
        f"goal {row.goal_id} is exhausted ({row.attempts} attempts): {row.title}",
    )
    if row.run_id is not None and row.running_epoch is not None:
        yield (
            ("cleanup", row.run_id, str(row.running_epoch)),
            row.needs_cleanup,
            f"attempt {row.running_epoch} of {row.run_id} needs cleanup "
            f"(goal {row.goal_id}: its process is gone; x confirms)",
        )
