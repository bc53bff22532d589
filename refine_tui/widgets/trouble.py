"""The notice that takes the tables' place while the journal cannot be read."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from refine_tui.format import literal


class TroubleNotice(Static):
    """Says the journal cannot be read, why (its text literal), and that nothing is written."""

    def show(self, text: str | None) -> None:
        """Show ``text`` (None: hide the notice)."""
        self.display = text is not None
        if text is not None:
            self.update(
                Text.assemble(
                    ("The journal cannot be read.\n\n", "bold red"),
                    literal(text),
                    "\n\nNothing is written while it is unavailable; the dashboard picks up "
                    "again as soon as the file is back.",
                )
            )
