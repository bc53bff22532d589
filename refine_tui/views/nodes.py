"""The Nodes view (DESIGN §14): one row per node the journal knows, its presence (live, silent,
stopped, unknown), when it was last seen, its running attempts against its capacity as a bar,
and its host.

Presence changes without a commit: while shown, its part of the read (``follower.wants.view``)
has every read list the nodes, and the dashboard wakes the follower every few seconds.
"""

from __future__ import annotations

from refine_tui import cells
from refine_tui.cells import NODE_COLUMNS, node_cells
from refine_tui.follow import JournalFollower
from refine_tui.views.base import TableView
from store.ops.nodes import NodeView


class NodesView(TableView):
    VIEW = "nodes"

    def __init__(self, follower: JournalFollower) -> None:
        super().__init__(NODE_COLUMNS, follower)
        self.nodes: dict[str, NodeView] = {}

    def show(self, nodes: list[NodeView]) -> None:
        """The nodes slice of a journal update."""
        self.nodes = {n.node_id: n for n in nodes}
        self.sync({key: node_cells(n) for key, n in self.nodes.items()})

    def selected_row(self) -> NodeView | None:
        key = self.selected_key
        return self.nodes.get(key) if key else None

    def crumbs(self) -> str:
        return "Nodes   (x: confirm a gone node's attempts · m: move its goals · escape: back)"

    def words(self) -> str | None:
        if self.selected_key is None:
            return None
        row = self.selected_row()
        return cells.node_words(row) if row else ""
