"""The `?` screen: every key, from help.md beside this module."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Markdown


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar = [Binding("escape,q,question_mark", "close", "Close")]

    def compose(self) -> ComposeResult:
        text = (Path(__file__).parent.parent / "help.md").read_text(encoding="utf-8")
        with VerticalScroll(id="help"):
            yield Markdown(text)

    def action_close(self) -> None:
        self.dismiss(None)
