"""Keys that arrive together (a laggy ssh, keystrokes pasted, tmux send-keys) are handled as
typed: the ones after `/` are the filter's text, never the dashboard's commands."""

from __future__ import annotations

from pathlib import Path

from textual import events
from textual.widgets import Input

from refine_tui.app import RefineApp
from refine_tui.demo import populate
from refine_tui.screens.confirm import CancelModal
from tests.helpers.dashboard import select
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
        for char in "/xcR":  # in the box, `/` and the dialogs' keys are text
            app.post_message(events.Key(KEY_NAMES.get(char, char), char))
        await until(pilot, lambda: app.dashboard.filter_box.value == "nodes/xcR")
        assert len(app.screen_stack) == 1


def typed(app: RefineApp, keys: list[str]) -> None:
    """``keys`` as a terminal sends keys that arrived together: all queued before any is
    handled (names as the driver gives them; a letter's name is itself)."""
    for key in keys:
        character = {"slash": "/", "space": " "}.get(key, key if len(key) == 1 else None)
        app.post_message(events.Key(key, character))


async def test_a_reason_typed_with_c_goes_into_the_dialog_and_runs_nothing(
    tmp_path: Path,
) -> None:
    """`c` and a reason typed at once: the reason's `s` ran Stop and its `t` opened the
    timeline before the dialog showed. Now the dialog shows, with the reason in its field."""
    path = populate(tmp_path / "journal.db", node=NODE, live=False)
    app = RefineApp(journal=path, node=NODE)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: bool(app.goal_rows))
        await select(pilot, "gpu-train")
        typed(app, ["c", *"stale"])
        await until(pilot, lambda: isinstance(app.screen, CancelModal))
        reason = app.screen.query_one("#reason", Input)
        await until(pilot, lambda: reason.value == "stale")
        assert [type(s).__name__ for s in app.screen_stack] == ["Dashboard", "CancelModal"]


async def test_no_key_typed_before_a_dialog_showed_answers_it(tmp_path: Path) -> None:
    """`c` then enter at once: the enter was typed before the dialog was on screen, so it
    does not submit it; the Goal is not cancelled until the operator answers."""
    path = populate(tmp_path / "journal.db", node=NODE, live=False)
    app = RefineApp(journal=path, node=NODE)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: bool(app.goal_rows))
        await select(pilot, "gpu-train")
        typed(app, ["c", "enter", "y"])
        await until(pilot, lambda: isinstance(app.screen, CancelModal))
        await pilot.pause(0.3)
        assert isinstance(app.screen, CancelModal)
        assert app.screen.query_one("#reason", Input).value == "y"  # text, not an answer
        assert app.goal_rows["gpu-train"].status == "running"
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, CancelModal))
        assert app.goal_rows["gpu-train"].status == "running"
