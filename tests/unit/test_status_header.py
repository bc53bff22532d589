"""The header under a stream of commits: what every commit changes (the last commit, the counts)
is drawn at most every TICKER_REPAINT_S, its last value shown after; anything else at once."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from rich.text import Text
from textual.app import App, ComposeResult

from refine_tui.textual_private import render_screen
from refine_tui.widgets.status_header import TICKER_REPAINT_S, HeaderState, StatusHeader

START = HeaderState(journal="/srv/journal.db", node="n1", read_only=False, state="live")


class CountingHeader(StatusHeader):
    renders = 0

    def render(self) -> Text:
        CountingHeader.renders += 1
        return super().render()


class HeaderApp(App[None]):
    def compose(self) -> ComposeResult:
        yield CountingHeader(START)


def lines(app: App[None]) -> list[str]:
    return ["".join(s.text for s in line) for line in render_screen(app.screen).strips][:2]


async def test_a_stream_of_commits_repaints_the_header_a_few_times_a_second() -> None:
    app = HeaderApp()
    async with app.run_test(size=(80, 4)) as pilot:
        header = app.query_one(CountingHeader)
        await pilot.pause()
        CountingHeader.renders = 0
        began = asyncio.get_running_loop().time()
        for seq in range(1, 101):  # 50 commits a second for 2 s
            header.show(last_sequence=seq, last_commit=1.8e9 + seq, total=seq, shown=seq)
            await asyncio.sleep(0.02)
        elapsed = asyncio.get_running_loop().time() - began
        assert header.state.last_sequence == 100  # the state is the last at once
        await pilot.pause(TICKER_REPAINT_S + 0.1)
        shown = lines(app)
        assert "seq 100 " in shown[1] and "100 goals" in shown[1]  # the last value, drawn
        assert 2 <= CountingHeader.renders <= elapsed / TICKER_REPAINT_S + 3, CountingHeader.renders
        header.show(state="stale", detail="no word from the journal")  # not the ticker: now
        await pilot.pause()
        assert "stale" in lines(app)[0]
        header.show(state="live", detail="", filter="gpu")
        await pilot.pause()
        assert "filter “gpu”" in lines(app)[1]


async def test_a_change_of_the_ticker_alone_after_a_quiet_spell_is_drawn_at_once() -> None:
    app = HeaderApp()
    async with app.run_test(size=(80, 4)) as pilot:
        header = app.query_one(CountingHeader)
        await pilot.pause(TICKER_REPAINT_S + 0.05)
        header.show(**vars(replace(START, last_sequence=7, total=3)))
        await pilot.pause()
        assert "seq 7" in lines(app)[1] and "3 goals" in lines(app)[1]
