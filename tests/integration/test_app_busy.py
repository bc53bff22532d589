"""What a store call says while it runs: its "busy" words only once it has taken a while. A
quick call's "Stopping…" stayed beside its answer for its 2 s (Textual takes one notification
off only through a private name), so a call quicker than ``BUSY_AFTER_S`` says nothing first."""

from __future__ import annotations

import time
from pathlib import Path

from refine_tui.actions import BUSY_AFTER_S
from refine_tui.app import RefineApp
from refine_tui.textual_private import notifications
from tests.helpers.dashboard import loaded


async def test_a_quick_store_call_says_only_its_answer_a_slow_one_says_it_is_busy(
    journal_path: Path,
) -> None:
    app = RefineApp(journal=journal_path, node="n1")
    async with app.run_test(size=(100, 30)) as pilot:
        await loaded(pilot)
        flows = app.dashboard.flows
        assert await flows.call_store(lambda: "done", busy="Quick…") == "done"
        await pilot.pause(BUSY_AFTER_S + 0.3)
        assert [n.message for n in notifications(app) if "Quick" in n.message] == []

        def slow() -> str:
            time.sleep(BUSY_AFTER_S + 0.5)
            return "done"

        assert await flows.call_store(slow, busy="Slow…") == "done"
        await pilot.pause()
        assert [n.message for n in notifications(app) if "Slow" in n.message] == ["Slow…"]
