"""What a store call says while it runs: its "busy" words only once it has taken a while. A
quick call's "Stopping…" stayed beside its answer for its 2 s (Textual takes one notification
off only through a private name), so a call quicker than ``BUSY_AFTER_S`` says nothing first.
(The time is set per case: a starved box must not make the quick call slow.)"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import refine_tui.actions
from refine_tui.app import RefineApp
from refine_tui.textual_private import notifications
from tests.helpers.dashboard import loaded


def said(app: RefineApp, word: str) -> list[str]:
    return [n.message for n in notifications(app) if word in n.message]


async def test_a_quick_store_call_says_only_its_answer_a_slow_one_says_it_is_busy(
    journal_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = RefineApp(journal=journal_path, node="n1")
    async with app.run_test(size=(100, 30)) as pilot:
        await loaded(pilot)
        flows = app.dashboard.flows
        monkeypatch.setattr(refine_tui.actions, "BUSY_AFTER_S", 5.0)
        assert await flows.call_store(lambda: "done", busy="Quick…") == "done"
        await pilot.pause(0.3)
        assert said(app, "Quick") == []

        def slow() -> str:
            time.sleep(0.5)
            return "done"

        monkeypatch.setattr(refine_tui.actions, "BUSY_AFTER_S", 0.05)
        assert await flows.call_store(slow, busy="Slow…") == "done"
        await pilot.pause()
        assert said(app, "Slow") == ["Slow…"]
