"""The node picker offers live nodes first, those with the most room before the full ones."""

from __future__ import annotations

from refine_tui.actions import pick_order
from store.journal.presence import Presence
from store.ops.nodes import NodeView


def node(node_id: str, state: str, running: int, capacity: int | None) -> NodeView:
    presence = None
    if capacity is not None:
        presence = Presence(node_id, "host", capacity, "0.1.0", 5.0, 0.0, 0.0, None)
    return NodeView(node_id, state, running, presence, 1.0 if presence else None)  # type: ignore[arg-type]


def test_live_first_then_the_most_room_then_the_name() -> None:
    nodes = [
        node("a-full", "live", 3, 3),
        node("b-dead", "silent", 0, 10),
        node("c-roomy", "live", 1, 8),
        node("d-some", "live", 2, 4),
        node("e-half", "live", 2, 4),
        node("f-never", "unknown", 1, None),
    ]
    ordered = [n.node_id for n in sorted(nodes, key=pick_order)]
    assert ordered == ["c-roomy", "d-some", "e-half", "a-full", "b-dead", "f-never"]
