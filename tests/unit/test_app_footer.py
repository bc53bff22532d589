"""The footer's keys follow focus and selection, updated in place (widgets/key_footer.py)."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import Footer

from refine_tui.app import RefineApp
from refine_tui.demo import populate
from refine_tui.textual_private import FooterKey
from store.ops.operator import default_node
from tests.helpers.dashboard import loaded, select
from tests.helpers.waits import until

NODE = default_node()


def shown(app: RefineApp) -> list[tuple[str, str, bool]]:
    """What the footer's key widgets show: key, description, enabled (hidden ones: nothing)."""
    keys = app.query_one(Footer).query_children(FooterKey)
    return [(k.key_display, k.description, not k.has_class("-disabled")) for k in keys if k.display]


def bindings(app: RefineApp) -> list[tuple[str, str, bool]]:
    """What Textual's Footer would show: the first shown binding of each action."""
    first: dict[str, tuple[str, str, bool]] = {}
    for _node, binding, enabled, _tip in app.screen.active_bindings.values():
        if binding.show:
            key = app.get_key_display(binding)
            first.setdefault(binding.action, (key, binding.description, enabled))
    return list(first.values())


async def test_the_footer_follows_focus_and_selection_without_new_key_widgets(
    tmp_path: Path,
) -> None:
    path = populate(tmp_path / "journal.db", node=NODE, live=False)
    app = RefineApp(journal=path, node=NODE)
    async with app.run_test(size=(120, 30)) as pilot:
        await loaded(pilot)
        await until(pilot, lambda: bool(shown(app)) and shown(app) == bindings(app))
        widgets = list(app.query(FooterKey))
        states = []
        for goal_id in ("build-docs", "old-backfill", "gpu-train", "deploy-stage"):
            await select(pilot, goal_id)
            await until(pilot, lambda: shown(app) == bindings(app))
            states.append(shown(app))
        await pilot.press("slash")  # focus moves to the filter box
        await until(pilot, lambda: app.focused is not None and app.focused.id == "filter")
        await until(pilot, lambda: shown(app) == bindings(app))
        states.append(shown(app))
        # The box takes the letters, `/` too; escape clears the filter (issue 24.3: shown).
        assert shown(app) == [("esc", "Back", True)]
        await pilot.press("enter")  # and back to the table
        await until(pilot, lambda: app.focused is not None and app.focused.id == "goals")
        await until(pilot, lambda: shown(app) == bindings(app))
        assert len({tuple(s) for s in states}) > 1, "the selections enabled different keys"
        now = list(app.query(FooterKey))
        assert [w for w in now if w in widgets] == widgets  # the same widgets, updated in place
        # and one mounted in its place for escape, first shown by the filter box (issue 24.3)
        assert [w.action for w in now if w not in widgets] == ["back"]
        footer = app.query_one(Footer)
        painted = "".join(str(k.render()) for k in footer.query_children(FooterKey) if k.display)
        assert "Stop" in painted and "Quit" in painted
