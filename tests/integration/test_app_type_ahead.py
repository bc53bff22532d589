"""Keys that arrive together (a laggy ssh, keystrokes pasted, tmux send-keys) are handled as
typed: the ones after `/` are the filter's text, never the dashboard's commands."""

from __future__ import annotations

from pathlib import Path

from textual import events

from refine_tui.app import RefineApp
from refine_tui.demo import populate
from tests.helpers.waits import until

NODE = "n1"
KEY_NAMES = {"/": "slash"}  # as the terminal driver names it


async def test_keys_typed_right_after_slash_go_into_the_filter_not_to_the_dashboard(
    tmp_path: Path,
) -> None:
    """Keys that arrive together (a laggy ssh, a paste of keystrokes, tmux send-keys): each
    after `/` is filter text. Before, the box took the focus a turn later, so `/sync` ran Stop
    on the selected Goal and `/nodes` opened the Nodes view."""
    path = populate(tmp_path / "journal.db", node=NODE, live=False)
    app = RefineApp(journal=path, node=NODE)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: bool(app.goal_rows))
        for char in "/nodes":  # as a terminal sends them: all queued before any is handled
            app.post_message(events.Key(KEY_NAMES.get(char, char), char))
        await until(pilot, lambda: app.dashboard.filter_box.value == "nodes")
        await pilot.pause()
        assert app.dashboard.goals.display and len(app.screen_stack) == 1
        assert app.focused is app.dashboard.filter_box
        for char in "/x":  # in the box, `/` is text
            app.post_message(events.Key(KEY_NAMES.get(char, char), char))
        await until(pilot, lambda: app.dashboard.filter_box.value == "nodes/x")
