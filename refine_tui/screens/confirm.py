"""Confirmation modals: the safe choice has the focus; ``y`` confirms, ``n``/``escape`` back out.

Titles and bodies embed journal text (titles, reasons, argv, log lines): shown literally.
"""

from __future__ import annotations

from typing import Any, ClassVar, cast

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from refine_tui.format import literal, literal_text

SCROLL_HINT = "↑↓ scroll"


class FittedDialog:
    """The body scrolls and the buttons stay on screen, however short the terminal; a body
    cut by the dialog says it scrolls (on the dialog's bottom border)."""

    RESERVED = 7  # rows that are not the body: border, title and its gap, the buttons
    scroll_hint = SCROLL_HINT  # the keys that scroll a cut body

    def fit_body(self) -> None:
        screen = cast("ModalScreen[Any]", self)  # mixed into ModalScreens only
        body = screen.query_one("#dialog-body")
        # Every row a short terminal has (60×16: the warning is whole above the log lines).
        body.styles.max_height = max(2, min(14, screen.app.size.height - self.RESERVED))
        screen.call_after_refresh(self.say_scrolls)

    def say_scrolls(self) -> None:
        screen = cast("ModalScreen[Any]", self)
        if screen.is_attached:
            cut = screen.query_one("#dialog-body").max_scroll_y > 0
            screen.query_one("#dialog").border_subtitle = self.scroll_hint if cut else ""

    def on_resize(self) -> None:
        self.fit_body()

    def action_scroll_body(self, lines: int) -> None:
        """↑↓ (and pgup pgdn) scroll the body whatever has the focus (a button)."""
        screen = cast("ModalScreen[Any]", self)
        screen.query_one("#dialog-body").scroll_relative(y=lines, animate=False)


MOVE = "move"  # what ConfirmModal returns for its second way to confirm


class ConfirmModal(FittedDialog, ModalScreen[bool | str]):
    """Say what will happen, then ask. Dismissed with True (confirmed) or False; with
    ``move_label``, a second way to confirm (``m``: confirm, then move goals) returns MOVE."""

    BINDINGS: ClassVar = [
        Binding("y", "confirm", "Confirm"),
        Binding("m", "move", "Confirm, move", show=False),
        Binding("n,escape", "back", "Back"),
        Binding("up", "scroll_body(-1)", "Scroll up", show=False),
        Binding("down", "scroll_body(1)", "Scroll down", show=False),
        Binding("pageup", "scroll_body(-5)", "Page up", show=False),
        Binding("pagedown", "scroll_body(5)", "Page down", show=False),
    ]

    def __init__(
        self, title: str, body: str | Text, confirm_label: str, move_label: str | None = None
    ) -> None:
        super().__init__()
        self.title_text = title
        self.body = body
        self.confirm_label = confirm_label
        self.move_label = move_label

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog", classes="destructive"):
            yield Label(literal(self.title_text), id="dialog-title")
            with VerticalScroll(id="dialog-body"):
                body = self.body
                # A Text body is built of lines: keep its line breaks, make the rest visible.
                yield Static(
                    literal(body)
                    if isinstance(body, str)
                    else Text("\n").join(literal_text(line) for line in body.split("\n"))
                )
            with Horizontal(id="dialog-buttons"):
                yield Button("Back (n)", id="back", variant="primary")
                yield Button(f"{self.confirm_label} (y)", id="confirm", variant="error")
                if self.move_label:
                    yield Button(f"{self.move_label} (m)", id=MOVE, variant="error")

    def on_mount(self) -> None:
        self.fit_body()
        self.query_one("#back", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(MOVE if event.button.id == MOVE else event.button.id == "confirm")

    def action_confirm(self) -> None:
        self.dismiss(True)

    def action_move(self) -> None:
        if self.move_label:
            self.dismiss(MOVE)

    def action_back(self) -> None:
        self.dismiss(False)


class CancelModal(FittedDialog, ModalScreen[str | None]):
    """Ask for the reason of a Cancel; the reason field has the focus and ``enter`` confirms.

    Dismissed with the reason, or None when the operator backs out. An empty reason is refused
    in words, inline, and the modal stays open.
    """

    BINDINGS: ClassVar = [Binding("escape", "back", "Back")]
    RESERVED = 11  # and the reason field and its error line

    def __init__(
        self,
        goal_id: str = "",
        body: str = "",
        *,
        title: str | None = None,
        confirm: str = "Cancel goal",
    ) -> None:
        super().__init__()
        self.goal_id = goal_id
        self.body = body
        self.title_text = title if title is not None else f"Cancel goal {goal_id}"
        self.confirm_label = confirm  # several goals: "Cancel goals"

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog", classes="destructive"):
            yield Label(literal(self.title_text), id="dialog-title")
            with VerticalScroll(id="dialog-body"):
                yield Static(literal(self.body), id="dialog-text")
            what = "the goal" if self.goal_id else "the goals"  # no id: the marked goals
            yield Input(placeholder=f"reason (required), enter to cancel {what}", id="reason")
            yield Label("", id="dialog-error")
            with Horizontal(id="dialog-buttons"):
                yield Button("Back (esc)", id="back", variant="primary")
                yield Button(f"{self.confirm_label} (enter)", id="confirm", variant="error")

    def on_mount(self) -> None:
        self.fit_body()
        self.query_one("#reason", Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self._confirm()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "confirm":
            self._confirm()
        else:
            self.dismiss(None)

    def _confirm(self) -> None:
        reason = self.query_one("#reason", Input).value.strip()
        if not reason:
            self.query_one("#dialog-error", Label).update(
                "A reason is required: say why this goal is no longer wanted."
            )
            self.query_one("#reason", Input).focus()
            return
        self.dismiss(reason)

    def action_back(self) -> None:
        self.dismiss(None)
