"""The dashboard's in-memory Goal index lists what the journal would, without reading it."""

from __future__ import annotations

import random
import sqlite3
from typing import Any

import psycopg
import pytest

from refine_tui import goal_index, rows
from refine_tui.goal_index import GoalIndex
from refine_tui.rows import ACTIVE, TERMINAL, GoalRow, Reader
from store.journal.api import Journal, Stored
from store.journal.core import fields_of
from store.model.goals import Goals
from store.ops import reads


def journal_list(journal: Journal, active: int, recent: int) -> list[str]:
    """The unfiltered list as the journal gives it (``Reader.visible_goal_ids``'s queries)."""
    found = reads.goal_ids(journal, status=ACTIVE, limit=active)
    found += reads.goal_ids(journal, status=TERMINAL, newest_first=True, limit=recent)
    return sorted(set(found))


def settle(goals: Goals, goal_id: str) -> None:
    goals.start(goal_id=goal_id, node_id="n1", worker="w", token=f"t-{goal_id}")
    goals.settle(goal_id=goal_id, run_id=f"{goal_id}.r1", epoch=1, outcome="completed")


def test_the_cleared_list_comes_from_the_index_as_the_journal_orders_it(journal: Journal) -> None:
    goals = Goals(journal)
    for n in range(12):
        goals.create(goal_id=f"g{n:02d}", title=f"goal {n}", node_id="n1", argv=["true"])
    for n in (7, 2, 9, 0, 11, 4):  # completed in this order: the most recent are 4, 11, 0
        settle(goals, f"g{n:02d}")
    seen, index = GoalIndex.build(journal)
    assert seen == journal.last_sequence()
    assert index.listed(3, 3) == journal_list(journal, 3, 3)
    assert index.listed(3, 3) == ["g00", "g01", "g03", "g04", "g05", "g11"]

    # Commits after the build reach the index as the rows the dashboard re-reads.
    settle(goals, "g05")  # active → the most recent terminal Goal
    goals.create(goal_id="g00a", title="new", node_id="n1", argv=["true"])
    changed = reads.goals_touched(journal.events_after(seen))
    index.update(Reader(journal, "n1").goal_rows(changed), changed)
    assert index.listed(3, 3) == journal_list(journal, 3, 3)
    assert index.listed(3, 3) == ["g00a", "g01", "g03", "g04", "g05", "g11"]
    assert index.matching("new", 10) == ["g00a"]
    # A filter's hits come in id order, the new Goal in its place, cut at the limit.
    assert index.matching("n1", 4) == ["g00", "g00a", "g01", "g02"]
    index.update({"g00a": None, "g01": None})  # gone from the journal
    assert index.matching("n1", 3) == ["g00", "g02", "g03"]
    assert index.matching("goal 1", 5) == ["g10", "g11"]


def test_a_build_in_pages_equals_one_read_of_every_goal(
    journal: Journal, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The build reads a page at a time (memory) and still sees every Goal in recency order."""
    goals = Goals(journal)
    for n in range(11):
        goals.create(goal_id=f"g{n:02d}", title=f"goal {n}", node_id="n1", argv=["true"])
    for n in (7, 2, 9, 0):
        settle(goals, f"g{n:02d}")
    whole = list(reads.goal_states(journal, newest_first=True))
    with journal.snapshot():
        paged = list(reads.goal_states(journal, newest_first=True, page=3))
    assert paged == whole and len(paged) == 11
    monkeypatch.setattr(goal_index, "BUILD_PAGE", 3)
    _, index = GoalIndex.build(journal)
    assert len(index) == 11
    assert index.listed(11, 11) == journal_list(journal, 11, 11)
    assert index.listed(0, 2) == ["g00", "g09"]  # the two most recently ended


def test_a_filter_without_the_index_reads_only_until_a_list_is_full(
    journal: Journal, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before the index is built a filter is answered from the journal: a page of stored states
    at a time, until it has as many hits as a list shows (the same first ones by id), rather
    than every state that holds the text (a common word at a million Goals: 27 s, 2.6 GB)."""
    goals = Goals(journal)
    for n in range(20):  # every state holds "common" (the argv); the odd ones' titles too
        title = "common" if n % 2 else f"goal {n}"
        goals.create(goal_id=f"g{n:02d}", title=title, node_id="n1", argv=["echo", "common"])
    monkeypatch.setattr(rows, "ACTIVE_LIMIT", 3)
    monkeypatch.setattr(rows, "RECENT_LIMIT", 1)
    pages: list[int] = []
    aggregates = journal.aggregates

    def counted(*args: Any, **kwargs: Any) -> list[Stored]:
        page = aggregates(*args, **kwargs)
        pages.append(len(page))
        return page

    monkeypatch.setattr(journal, "aggregates", counted)
    assert Reader(journal, "n1").visible_goal_ids("COMMON") == (["g01", "g03", "g05", "g07"], 20)
    assert pages == [4, 4]  # g00–g03 (two hits), g04–g07 (two more): the list is full


def test_pages_newest_first_neither_skip_nor_repeat_goals_of_equal_recency(
    journal: Journal, journal_location: str, backend: str
) -> None:
    """Each page starts after the last row of the one before (no offset to skip through); rows
    of no event share last_sequence 0, and the id keeps their order whole across pages."""
    goals = Goals(journal)
    for n in range(9):
        goals.create(goal_id=f"g{n}", title=f"goal {n}", node_id="n1", argv=["true"])
    forge = "UPDATE {t} SET last_sequence = 0 WHERE aggregate_id IN ('goal:g1', 'goal:g3',"
    forge += " 'goal:g4', 'goal:g6', 'goal:g8')"
    if backend == "sqlite":
        with sqlite3.connect(journal_location) as raw:
            raw.execute(forge.format(t="aggregates"))
    else:
        with psycopg.connect(journal_location, autocommit=True) as raw:
            raw.execute(forge.format(t="refine.aggregates"))
    whole = [goal_id for goal_id, _ in reads.goal_states(journal, newest_first=True)]
    with journal.snapshot():
        paged = [goal_id for goal_id, _ in reads.goal_states(journal, newest_first=True, page=2)]
    assert paged == whole == ["g7", "g5", "g2", "g0", "g8", "g6", "g4", "g3", "g1"]
    page = journal.aggregates("goal", newest_first=True, limit=2, before=(0, "goal:g6"))
    assert [s.aggregate_id for s in page] == ["goal:g4", "goal:g3"]
    with pytest.raises(ValueError, match="newest first"):
        journal.aggregates("goal", limit=2, before=(0, "goal:g6"))
    with pytest.raises(ValueError, match="only a row read newest first"):
        journal.aggregates("goal", limit=1)[0].recency  # noqa: B018  # read in id order


def test_state_fields_are_what_parsing_each_state_finds_damaged_states_included(
    journal: Journal, journal_location: str, backend: str
) -> None:
    """The index's build reads three fields of each state in the database: the same values,
    order and pages as reading and parsing every state, for states that are not JSON objects
    too (each page holding one is parsed here instead, the snapshot going on)."""
    goals = Goals(journal)
    for n in range(8):
        goals.create(goal_id=f"g{n}", title=f"café ☕ {n}", node_id=f"n{n % 3}", argv=["true"])
    settle(goals, "g4")
    damaged = {
        "goal:g1": "not json {",  # no parser reads it
        "goal:g2": "[1, 2]",  # JSON, not an object
        "goal:g5": '{"title": {"a": [1, true]}, "status": null, "node_id": 5}',
        "goal:g6": '{"title": "a\\u0000b", "status": "queued", "node_id": "n0"}',  # no jsonb
    }
    if backend == "sqlite":
        with sqlite3.connect(journal_location) as raw:
            for aggregate_id, state in damaged.items():
                raw.execute(
                    "UPDATE aggregates SET state = ? WHERE aggregate_id = ?", (state, aggregate_id)
                )
    else:
        with psycopg.connect(journal_location, autocommit=True) as raw:
            for aggregate_id, state in damaged.items():
                raw.execute(
                    "UPDATE refine.aggregates SET state = %s WHERE aggregate_id = %s",
                    (state, aggregate_id),
                )
    names = ("title", "status", "node_id")
    parsed = [
        (s.aggregate_id, s.last_sequence, fields_of(s.text or str(s.state), names))
        for s in journal.aggregates("goal", newest_first=True)
    ]
    assert journal.state_fields("goal", names) == parsed
    with journal.snapshot():
        paged = list(reads.goal_fields(journal, names, page=3))
        assert journal.last_sequence() > 0  # the snapshot outlived a page that fell back
    assert paged == [(a.partition(":")[2], values) for a, _, values in parsed]
    by_id = dict(paged)
    assert by_id["g0"] == ("café ☕ 0", "queued", "n0")
    assert by_id["g4"] == ("café ☕ 4", "completed", "n1")
    assert by_id["g1"] == by_id["g2"] == (None, None, None)
    assert by_id["g5"] == ({"a": [1, True]}, None, 5)
    assert by_id["g6"] == ("a\x00b", "queued", "n0")
    assert journal.state_fields("goal", ["status"], limit=2) == [
        (*r[:2], r[2][1:2]) for r in parsed[:2]
    ]
    for bad in ([], ["title'; --"], ["1st"], ["é"]):
        with pytest.raises(ValueError, match="field names"):
            journal.state_fields("goal", bad)


def test_searching_by_chunks_finds_what_a_scan_of_every_line_finds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Chunks joined for the C-level search stay true through inserts, removals and changes
    that move lines across chunk boundaries; the active list stays sorted."""
    monkeypatch.setattr(goal_index, "CHUNK", 4)
    rng = random.Random(16)
    words = ("alpha", "beta", "gamma", "queued", "running", "completed", "held", "n1", "n2")

    def row(goal_id: str) -> GoalRow:
        status = rng.choice(("queued", "running", "held", "completed", "failed"))
        title = " ".join(rng.sample(words, 2))
        return GoalRow(goal_id, title, rng.choice(("n1", "n2")), status, 0, "0/1", "", None, "")

    rows: dict[str, GoalRow] = {f"g{n:03d}": row(f"g{n:03d}") for n in range(0, 60, 2)}
    lines = {g: f"{g}\n{r.title}\n{r.status}\n{r.node_id}".lower() for g, r in rows.items()}
    index = GoalIndex(lines, {g: r.status for g, r in rows.items()}, list(rows))
    for step in range(300):
        goal_id = f"g{rng.randrange(70):03d}"
        if goal_id in rows and rng.random() < 0.3:
            del rows[goal_id]
            index.update({goal_id: None})
        else:
            rows[goal_id] = row(goal_id)
            index.update({goal_id: rows[goal_id]}, [goal_id])
        needle = rng.choice((*words, "g0", "g01", "a b", "\n", "zzz"))
        limit = rng.choice((1, 3, 10, 100))
        every = sorted(
            g for g, r in rows.items() if needle in f"{g}\n{r.title}\n{r.status}\n{r.node_id}"
        )
        assert index.matching(needle, limit) == every[:limit], (step, needle)
        active = sorted(g for g, r in rows.items() if r.status in ACTIVE)
        assert index.listed(len(rows), 0) == active


def test_the_recency_order_holds_through_many_changes_and_removals(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The order kept compact (one joined string, later changes listed after it and folded in
    when many) lists the most recently changed terminal Goals as a plain recency list would;
    a Goal that is gone leaves the order until it changes again."""
    monkeypatch.setattr(goal_index, "CHUNK", 4)
    rng = random.Random(27)

    def row(goal_id: str, status: str) -> GoalRow:
        return GoalRow(goal_id, "t", "n1", status, 0, "0/1", "", None, "")

    status = {f"g{n:03d}": rng.choice(("queued", "completed", "failed")) for n in range(40)}
    lines = {g: f"{g}\nt\n{s}\nn1" for g, s in status.items()}
    order = list(status)  # least recently changed first
    index = GoalIndex(lines, dict(status), list(order))
    for step in range(400):
        goal_id = f"g{rng.randrange(50):03d}"
        if goal_id in status and rng.random() < 0.1:
            del status[goal_id]
            if goal_id in order:
                order.remove(goal_id)
            index.update({goal_id: None})
        elif goal_id in status or rng.random() < 0.5:
            status[goal_id] = rng.choice(("queued", "running", "completed", "failed"))
            if goal_id in order:
                order.remove(goal_id)
            order.append(goal_id)
            index.update({goal_id: row(goal_id, status[goal_id])}, [goal_id])
        else:  # re-read without a commit of its own: its place stays where it was
            status[goal_id] = "completed"
            index.update({goal_id: row(goal_id, "completed")})
        recent = rng.choice((1, 3, 8))
        ended = [g for g in reversed(order) if status[g] in TERMINAL][:recent]
        assert index.listed(0, recent) == sorted(ended), step
        assert len(index) == len(status)
