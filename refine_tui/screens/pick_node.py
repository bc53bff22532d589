"""Which node goals move to: the nodes the journal knows, live ones first; ``enter`` picks.

Node names and hosts come from the journal (presence beats): shown literally.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Label, OptionList, Static
from textual.widgets.option_list import Option

from refine_tui.format import literal
from refine_tui.screens.confirm import FittedDialog
from store.ops.nodes import NodeView

LIST_ROWS = 6  # the list's height at most; it scrolls beyond
SPREAD = "*"  # the option that spreads the goals over every live node (no node is named *)


def node_line(node: NodeView) -> Text:
    """``b1  live  4/5 running  host vm``."""
    presence = node.presence
    capacity = f"/{presence.capacity}" if presence is not None else ""
    host = f"  host {presence.host}" if presence is not None else ""
    return literal(f"{node.node_id}  {node.state}  {node.running}{capacity} running{host}")


class NodePickModal(FittedDialog, ModalScreen[str | None]):
    """Pick a node from ``nodes``: dismissed with its id, or None when the operator backs out.
    ``spread``: first offer every live node of them at once (dismissed with ``SPREAD``)."""

    BINDINGS: ClassVar = [
        Binding("escape", "back", "Back"),
        Binding("pageup", "scroll_body(-5)", "Page up", show=False),
        Binding("pagedown", "scroll_body(5)", "Page down", show=False),
    ]
    RESERVED = 8 + LIST_ROWS  # and the list
    scroll_hint = "pgup pgdn scroll"  # ↑↓ move in the list

    def __init__(
        self, title: str, body: str, nodes: Sequence[NodeView], *, spread: bool = False
    ) -> None:
        super().__init__()
        self.title_text, self.body = title, body
        self.nodes = list(nodes)
        self.spread = spread

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label(literal(self.title_text), id="dialog-title")
            with VerticalScroll(id="dialog-body"):
                yield Static(literal(self.body), id="dialog-text")
            options = [Option(node_line(n), id=n.node_id) for n in self.nodes]
            if self.spread:
                live = sum(n.state == "live" for n in self.nodes)
                words = f"every live node ({live}): each goal to the one with the most room"
                options.insert(0, Option(Text(words, style="bold"), id=SPREAD))
            yield OptionList(*options, id="node-choices")
            with Horizontal(id="dialog-buttons"):
                yield Button("Back (esc)", id="back", variant="primary")

    def on_mount(self) -> None:
        self.fit_body()
        choices = self.query_one("#node-choices", OptionList)
        choices.styles.max_height = LIST_ROWS + 2  # its border
        choices.highlighted = 0
        choices.focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.dismiss(event.option.id)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(None)

    def action_back(self) -> None:
        self.dismiss(None)
