"""The aggregate reads both backends build the same way: one kind (maybe some statuses), then a
filtered page (text, node, after an id), ordered and cut.

SQLite and PostgreSQL differ here only in their SQL dialect (``Dialect``: the placeholder, the
substring search, "one of these values"), so the terms are written once and each backend
passes its own. Only Goals are looked up by status or by recency (Runs are read by id): the
Goals' partial indexes (each backend's schema) are made with ``GOAL_TERM`` and ``ACTIVE_TERM``,
and the queries repeat those terms word for word, since a planner uses a partial index only for
a query whose WHERE implies its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from store.names import ALNUM
from store.statuses import ACTIVE_GOAL_STATUSES

GOAL_TERM = "kind = 'goal'"
ACTIVE_STATUSES = ACTIVE_GOAL_STATUSES  # a Goal's statuses that are not terminal
ACTIVE_TERM = f"status IN ({', '.join(repr(s) for s in ACTIVE_STATUSES)})"


class Dialect:
    """What differs between the backends' SQL for these reads."""

    __slots__ = ("ascii", "find", "like", "many", "mark")

    def __init__(
        self, mark: str, find: str, *, many: bool, ascii: str = "", like: bool = False
    ) -> None:
        self.mark = mark  # a parameter's placeholder
        self.find = find  # the 1-based position of a substring, 0 when absent
        self.many = many  # a list may be one parameter (``= ANY(%s)``)
        self.ascii = ascii  # after a text: its ``lower()`` folds ASCII letters only
        self.like = like  # LIKE folds ASCII letters itself: no state lowered to search it

    def one_of(self, column: str, values: Sequence[str]) -> tuple[str, list[Any]]:
        """``column`` is one of ``values``: the term and its parameters."""
        if self.many:
            return f"{column} = ANY({self.mark})", [list(values)]
        return f"{column} IN ({','.join(self.mark * len(values))})", list(values)


# SQLite's LIKE folds ASCII letters as its lower() does, without making a lowered copy of each
# state: a million states searched in 0.8–0.9 s instead of 1.5–1.7 s (the filter before the
# dashboard's index is built). Its lower() folds nothing else: a needle "é" missed "É".
SQLITE = Dialect("?", "instr", many=False, like=True)
# A database's collation (C.UTF-8, en_US.UTF-8) makes lower() fold every letter, one wide
# character at a time: twice the time of "C"'s ASCII folding over a scan of every state.
POSTGRES = Dialect("%s", "strpos", many=True, ascii=' COLLATE "C"')


def check_field_names(names: Sequence[str]) -> Sequence[str]:
    """Top-level field names of a stored state, safe to write into a query as they are: ASCII
    letters, digits and ``_``, not first a digit (ValueError otherwise)."""
    if not names or not all(n and not n[0].isdigit() and _FIELD.issuperset(n) for n in names):
        raise ValueError(f"field names are letters, digits and _: {list(names)!r}")
    return names


_FIELD = ALNUM | {"_"}


_LIKE_ESCAPES = str.maketrans({"\\": "\\\\", "%": "\\%", "_": "\\_"})  # LIKE's wildcards, literal


def _like(needle: str) -> str:
    """``needle`` as a LIKE pattern that finds it in any case: LIKE folds ASCII letters, and
    any other letter with a case stands for any one character (the caller's refinement on the
    parsed state decides), so a coarse search never misses a state with ``Ü`` for ``ü``."""
    if needle.isascii():
        return needle.translate(_LIKE_ESCAPES)
    return "".join(
        "_" if not c.isascii() and c.lower() != c.upper() else c.translate(_LIKE_ESCAPES)
        for c in needle
    )


def of_kind(
    dialect: Dialect, select: str, kind: str, statuses: Sequence[str] | None
) -> tuple[str, list[Any]]:
    """``select`` with the WHERE terms for one kind and maybe some statuses; for Goals, the
    partial indexes' own terms, word for word, so the planner may use them in any plan."""
    sql, args = f"{select} WHERE kind = {dialect.mark}", list[Any]([kind])
    if kind == "goal":
        sql, args = f"{select} WHERE {GOAL_TERM}", []
    if statuses is not None:
        term, values = dialect.one_of("status", list(statuses))
        sql += f" AND {term}"
        args += values
        if kind == "goal" and set(statuses) <= set(ACTIVE_STATUSES):
            sql += f" AND {ACTIVE_TERM}"
    return sql, args


def filtered_page(
    dialect: Dialect,
    sql: str,
    args: list[Any],
    *,
    contains: str | None,
    node_id: str | None,
    after_id: str | None,
    newest_first: bool,
    limit: int | None,
    offset: int,
    before: tuple[int, str] | None = None,
) -> tuple[str, list[Any]]:
    """``sql`` (a SELECT of aggregates with its WHERE begun) narrowed to those whose id or
    stored state contains ``contains`` (ASCII case folded), of ``node_id``, after ``after_id``
    (in id order only: ValueError with ``newest_first``), older than ``before`` (a row's
    ``(last_sequence, aggregate_id)``, newest first only), then ordered and cut to a page."""
    mark = dialect.mark
    if contains and dialect.like:
        pattern = f"%{_like(contains)}%"
        sql += f" AND (aggregate_id LIKE {mark} ESCAPE '\\' OR state LIKE {mark} ESCAPE '\\')"
        args = [*args, pattern, pattern]
    elif contains:
        # An ASCII needle is found by ASCII folding alone, faster than by the collation's.
        state = f"state{dialect.ascii}" if contains.isascii() else "state"
        sql += (
            f" AND ({dialect.find}(lower(aggregate_id), {mark}) > 0"
            f" OR {dialect.find}(lower({state}), {mark}) > 0)"
        )
        args = [*args, contains.lower(), contains.lower()]
    if node_id is not None:
        sql += f" AND node_id = {mark}"
        args = [*args, node_id]
    if after_id is not None:
        if newest_first:
            raise ValueError("after_id pages in id order, not newest first")
        sql += f" AND aggregate_id > {mark}"
        args = [*args, after_id]
    if before is not None:
        if not newest_first:
            raise ValueError("before pages newest first, not in id order")
        # The first term is the recency index's range; the id breaks ties (rows of no event
        # share last_sequence 0), so pages neither skip nor repeat a row.
        sql += f" AND last_sequence <= {mark} AND (last_sequence < {mark} OR aggregate_id < {mark})"
        args = [*args, before[0], before[0], before[1]]
    if newest_first:
        sql += " ORDER BY last_sequence DESC, aggregate_id DESC"
    else:
        sql += " ORDER BY aggregate_id"
    if limit is not None:
        sql += f" LIMIT {mark} OFFSET {mark}"
        args = [*args, int(limit), int(offset)]
    return sql, args
