"""The aggregate reads both backends share (store.journal.queries): one builder, two dialects."""

from __future__ import annotations

import pytest

from store.journal.queries import ACTIVE_TERM, GOAL_TERM, POSTGRES, SQLITE, filtered_page, of_kind


def test_a_goal_page_repeats_the_partial_indexes_terms_in_each_dialect() -> None:
    sql, args = of_kind(SQLITE, "SELECT x FROM t", "goal", ["queued", "held"])
    assert sql == f"SELECT x FROM t WHERE {GOAL_TERM} AND status IN (?,?) AND {ACTIVE_TERM}"
    assert args == ["queued", "held"]
    sql, args = of_kind(POSTGRES, "SELECT x FROM t", "goal", ["queued", "completed"])
    assert sql == f"SELECT x FROM t WHERE {GOAL_TERM} AND status = ANY(%s)"  # not all active
    assert args == [["queued", "completed"]]
    assert of_kind(POSTGRES, "SELECT x FROM t", "run", None) == (
        "SELECT x FROM t WHERE kind = %s",
        ["run"],
    )


def test_the_filtered_page_differs_only_in_the_dialect() -> None:
    given = {"contains": "AbC", "node_id": "n1", "after_id": "g9", "limit": 10, "offset": 0}
    sqlite, s_args = filtered_page(SQLITE, "Q", ["k"], newest_first=False, **given)
    postgres, p_args = filtered_page(POSTGRES, "Q", ["k"], newest_first=False, **given)
    # An ASCII needle: SQLite's LIKE folds ASCII letters itself (no lowered copy of each state),
    # its wildcards in the needle escaped, any other letter with a case any one character;
    # PostgreSQL folds an ASCII needle's letters only (faster than the database's collation
    # would), any other needle's by the collation.
    assert sqlite == (
        "Q AND (aggregate_id LIKE ? ESCAPE '\\' OR state LIKE ? ESCAPE '\\')"
        " AND node_id = ? AND aggregate_id > ? ORDER BY aggregate_id LIMIT ? OFFSET ?"
    )
    assert s_args == ["k", "%AbC%", "%AbC%", "n1", "g9", 10, 0]  # LIKE folds ASCII letters
    plain = (
        "Q AND (instr(lower(aggregate_id), ?) > 0 OR instr(lower(state), ?) > 0)"
        " AND node_id = ? AND aggregate_id > ? ORDER BY aggregate_id LIMIT ? OFFSET ?"
    )
    same = plain.replace("instr", "strpos").replace("?", "%s")
    assert postgres == same.replace("lower(state)", 'lower(state COLLATE "C")')
    assert p_args == ["k", "abc", "abc", "n1", "g9", 10, 0]
    unicode = given | {"contains": "Über"}
    assert filtered_page(POSTGRES, "Q", ["k"], newest_first=False, **unicode)[0] == same
    assert filtered_page(SQLITE, "Q", ["k"], newest_first=False, **unicode)[1][1] == "%_ber%"
    cjk = filtered_page(SQLITE, "Q", ["k"], newest_first=False, **(given | {"contains": "東京"}))
    assert cjk[1][1] == "%東京%"  # no case: itself
    wild = filtered_page(SQLITE, "Q", [], **(given | {"contains": "5%_\\"}), newest_first=False)
    assert wild[1][:2] == ["%5\\%\\_\\\\%"] * 2
    assert filtered_page(
        SQLITE, "Q", [], contains=None, node_id=None, after_id=None, newest_first=True,
        limit=None, offset=0,
    ) == ("Q ORDER BY last_sequence DESC, aggregate_id DESC", [])  # fmt: skip
    assert filtered_page(
        SQLITE, "Q", [], contains=None, node_id=None, after_id=None, newest_first=True,
        limit=2, offset=0, before=(7, "goal:b"),
    ) == (
        "Q AND last_sequence <= ? AND (last_sequence < ? OR aggregate_id < ?)"
        " ORDER BY last_sequence DESC, aggregate_id DESC LIMIT ? OFFSET ?",
        [7, 7, "goal:b", 2, 0],
    )  # fmt: skip
    with pytest.raises(ValueError, match="newest first"):
        filtered_page(POSTGRES, "Q", [], newest_first=False, before=(7, "goal:b"), **given)
    with pytest.raises(ValueError, match="id order"):
        filtered_page(POSTGRES, "Q", [], newest_first=True, **given)
