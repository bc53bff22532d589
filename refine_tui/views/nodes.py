"""The Nodes view (DESIGN §14): one row per node the journal knows, its presence (live, silent,
stopped, unknown), when it was last seen, its running attempts against its capacity as a bar,
and its host.

Presence changes without a commit: while shown, its part of the read (``follower.wants.view``)
has every read list the nodes, and the dashboard wakes the follower every few seconds.

A fleet is up to a hundred rows, so `/` here filters the nodes (id, state or host contains the
text: `/silent` finds the machines that went quiet), not the Goals as it does elsewhere.
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
        self.known: list[NodeView] = []  # every node of the last read
        self.nodes: dict[str, NodeView] = {}  # those the filter shows
        self.filter = ""

    def show(self, nodes: list[NodeView]) -> None:
        """The nodes slice of a journal update."""
        self.known = nodes
        self.nodes = {n.node_id: n for n in nodes if node_matches(n, self.filter)}
        self.sync({key: node_cells(n) for key, n in self.nodes.items()})

    def set_filter(self, text: str) -> None:
        self.filter = text.strip()
        self.show(self.known)

    def selected_row(self) -> NodeView | None:
        key = self.selected_key
        return self.nodes.get(key) if key else None

    def crumbs(self) -> str:
        if not self.filter:
            return "Nodes   (x: confirm a gone node's attempts · m: move its goals · escape: back)"
        shown = f"{len(self.nodes)} of {len(self.known)}"
        return f"Nodes — filter “{self.filter}”: {shown}   (escape: clear the filter)"

    def words(self) -> str | None:
        if self.selected_key is None:
            if self.filter and not self.nodes:
                return f"No node matches “{self.filter}” — escape clears the filter"
            return None
        row = self.selected_row()
        return cells.node_words(row) if row else ""


def node_matches(node: NodeView, text: str) -> bool:
    """Whether the node's id, state or host contains ``text`` (any case)."""
    needle = text.lower()
    host = node.presence.host if node.presence is not None else ""
    return any(needle in field.lower() for field in (node.node_id, node.state, host))
