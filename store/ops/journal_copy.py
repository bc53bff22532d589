"""`refine copy`: a journal's rows, any backend to any backend, then `check` on the copy.

Rows are copied as stored (sequences, versions, receipts, committed times), never re-decided, so
the copy replays the same command ids to the same results. The source is read in one snapshot
and the target written in one transaction: a failed copy leaves the target as empty as before.
``copy_to`` copies to a location, where a new journal appears whole or not at all
(``store.ops.copy_target``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from store.journal.core import COPY_TABLES
from store.ops.check import CheckReport, check_journal
from store.ops.copy_target import copy_target


class Copyable(Protocol):
    """What both journal backends offer for copying (beyond the ordinary reads)."""

    def snapshot(self) -> Any: ...

    def last_sequence(self) -> int: ...

    def export_rows(self, table: str) -> Iterator[list[tuple[Any, ...]]]: ...

    def import_rows(self, batches: Any) -> int: ...


Progress = Callable[[int, int], None]  # (events copied, events in the source)


@dataclass(frozen=True)
class CopyReport:
    rows: int
    events: int
    check: CheckReport


def copy_journal(
    source: Any,
    target: Any,
    progress: Progress | None = None,
    check_progress: Progress | None = None,
) -> CopyReport:
    """Copy every row of ``source`` into the empty ``target`` and check the copy (its progress
    reported to ``check_progress``, as ``check_journal`` reports it)."""
    with source.snapshot():
        total = source.last_sequence()
        rows = target.import_rows(_batches(source, total, progress))
    return CopyReport(rows=rows, events=total, check=check_journal(target, check_progress))


def copy_to(
    source: Any,
    location: str,
    progress: Progress | None = None,
    check_progress: Progress | None = None,
) -> CopyReport:
    """Copy ``source`` to the empty or new journal at ``location`` and check the copy there."""
    with copy_target(location) as target:
        return copy_journal(source, target, progress, check_progress)


def _batches(
    source: Copyable, total: int, progress: Progress | None
) -> Iterator[tuple[str, list[tuple[Any, ...]]]]:
    copied = 0
    for table, _, _ in COPY_TABLES:
        for batch in source.export_rows(table):
            yield table, batch
            if table == "events":
                copied += len(batch)
                if progress is not None:
                    progress(copied, total)
