"""A dashboard left open lists what a new one would: the active Goals and the most recently
ended ones, not every Goal that ended while it was open.

Found with a dashboard open for 20 minutes while a node ran 5 Goals a second: it listed all
5,760 of them and held 28 MB more than a dashboard opened then (1,200 rows at most: the active
ones and the 200 most recently changed terminal ones). Real journal, commits from another
process, the real app under Pilot.
"""

from __future__ import annotations

from pathlib import Path

from refine_tui.app import RefineApp
from refine_tui.rows import RECENT_LIMIT
from refine_tui.views.goals import FORGET_SLACK
from tests.helpers.dashboard import commit_in_process, goals_table, loaded, select
from tests.helpers.waits import until

NEW = RECENT_LIMIT + FORGET_SLACK + 10


async def test_goals_that_end_while_it_is_open_push_out_the_longest_ended(
    journal_path: Path,
) -> None:
    app = RefineApp(journal=journal_path, node="n1")
    async with app.run_test(size=(100, 30)) as pilot:
        await loaded(pilot)
        before = ended(app)
        await select(pilot, "lint")
        await pilot.press("space")  # marked: it stays, as the selected Goal does
        await select(pilot, "build-docs")
        commit_in_process(
            journal_path,
            f"for i in range({NEW}):\n"
            "    goals.create(goal_id=f'z{i:03}', title='t', node_id='n1', argv=['true'])\n"
            "    goals.cancel(goal_id=f'z{i:03}', reason='done', command_id=f'op:cancel:z{i}')",
        )
        await until(pilot, lambda: f"z{NEW - 1:03}" in app.goal_rows, timeout=30)
        await pilot.pause()
        newest = {f"z{i:03}" for i in range(NEW - RECENT_LIMIT, NEW)}
        listed = ended(app) - {"lint", "build-docs"}
        first = min(listed)  # the ones ended longest ago went, FORGET_SLACK at a time at most
        assert listed == {f"z{i:03}" for i in range(int(first[1:]), NEW)}, sorted(listed)
        assert RECENT_LIMIT <= len(listed) <= RECENT_LIMIT + FORGET_SLACK
        assert {"lint", "build-docs"} <= ended(app)
        assert {"lint", "build-docs"} <= before  # the demo's, ended before the dashboard opened
        assert app.selected_goal().goal_id == "build-docs"
        table = goals_table(app)
        assert table.keys() == list(app.goal_rows)  # the table is the list, in order
        active = {k for k, r in app.goal_rows.items() if not r.terminal}
    fresh = RefineApp(journal=journal_path, node="n1")
    async with fresh.run_test(size=(100, 30)) as pilot:
        await loaded(pilot)
        await until(pilot, lambda: len(fresh.goal_rows) == RECENT_LIMIT + len(active))
        assert ended(fresh) == newest <= listed  # what a dashboard opened now lists
        assert {k for k, r in fresh.goal_rows.items() if not r.terminal} == active


def ended(app: RefineApp) -> set[str]:
    return {k for k, r in app.goal_rows.items() if r.terminal}
