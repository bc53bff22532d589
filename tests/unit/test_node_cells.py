"""A node's row in the Nodes view: a silent node calls for the operator (bold red) while work
runs there or waits for it; silent with nothing left (a machine retired) it is only dim red."""

from __future__ import annotations

from refine_tui.cells import node_cells
from store.journal.presence import Presence
from store.ops.nodes import NodeView


def silent(running: int, waiting: int) -> NodeView:
    presence = Presence("b7", "host-b7", 4, "0.1.0", 5.0, 0.0, 0.0, None)
    return NodeView("b7", "silent", running, presence, 600.0, waiting)


def state_style(n: NodeView) -> str:
    state = node_cells(n)[1]
    return str(state.style)  # type: ignore[union-attr]


def test_a_silent_node_with_work_is_bold_red_and_without_only_dim() -> None:
    assert state_style(silent(running=2, waiting=0)) == "bold red"
    assert state_style(silent(running=0, waiting=3)) == "bold red"
    assert state_style(silent(running=0, waiting=0)) == "dim red"
    cells = node_cells(silent(running=0, waiting=3))
    assert [str(c) for c in cells] == ["b7", "silent", "10m", "░░░░░░ 0/4", "3", "host-b7"]


def test_x_is_offered_for_a_stopped_nodes_attempts_only_once_their_work_has_ended() -> None:
    """A node's exit leaves its workers running: `x` on a silent node's attempts (a dead
    machine), but a stopped node's only once their work has ended."""
    from refine_tui.cells import node_words

    presence = Presence("b7", "host-b7", 4, "0.1.0", 5.0, 0.0, 0.0, 0.0)
    stopped = NodeView("b7", "stopped", 2, presence, 60.0, 0)
    assert node_words(silent(running=2, waiting=0)).endswith(
        " · x: confirm cleanup of its attempts"
    )
    assert node_words(stopped).endswith(
        " · x: confirm cleanup of its attempts once their work has ended"
    )
