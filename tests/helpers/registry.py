"""A node's process registry for a journal given by path, as its node and dashboard find it."""

from __future__ import annotations

from pathlib import Path

from store.journal_api import Journal
from store.processes import ProcessRegistry


def node_registry(journal: Path | str, node_id: str) -> ProcessRegistry:
    """``node_id``'s registry for the journal at ``journal`` (its journal id names the folder)."""
    with Journal.open(journal, read_only=True) as opened:
        return ProcessRegistry.for_journal(opened, node_id)
