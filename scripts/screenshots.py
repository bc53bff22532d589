"""Render the real dashboard to screenshots/*.svg (and PNG where a converter can rasterise SVG).

    python scripts/screenshots.py [--out screenshots]

Each shot runs RefineApp on a fresh demo journal while the demo's node runs its live goals
(attempts running, logs growing, the pulses counting), drives it with Pilot like an operator,
and saves what the terminal shows. PNGs are rendered by Chromium (Playwright, the system's
/usr/bin/chromium) where it is there. ``render`` draws one shot on a quiet journal (no node):
tests/integration/test_screenshots_current.py compares its keys and columns with the committed
pictures.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from textual.pilot import Pilot
from textual.widgets import Input

from refine_tui.app import RefineApp
from refine_tui.dashboard import PULSES_MIN_HEIGHT
from refine_tui.demo import DEMO_NODE, finish, populate, start_node, stop_node
from refine_tui.screens.timeline import TimelineScreen
from store.goals import Goals
from store.journal.api import Journal
from store.journal.presence import Beat

Steps = Callable[[Pilot], Awaitable[None]]


async def until(pilot: Pilot, condition: Callable[[], bool], tries: int = 300) -> None:
    for _ in range(tries):
        if condition():
            return
        await pilot.pause(0.02)
    raise RuntimeError("the screen never reached the state to capture")


async def loaded(pilot: Pilot) -> None:
    app = pilot.app
    await until(pilot, lambda: bool(app.goal_rows) and app.header_state.state == "live")


def select(goal_id: str) -> Steps:
    async def steps(pilot: Pilot) -> None:
        pilot.app.query_one("#goals").select(goal_id)
        await pilot.pause()

    return steps


def press(*keys: str, wait: Callable[[RefineApp], bool] | None = None) -> Steps:
    async def steps(pilot: Pilot) -> None:
        await pilot.press(*keys)
        if wait is not None:
            await until(pilot, lambda: wait(pilot.app))

    return steps


def mark(*goal_ids: str) -> Steps:
    async def steps(pilot: Pilot) -> None:
        for goal_id in goal_ids:
            await select(goal_id)(pilot)
            await pilot.press("space")

    return steps


def silent(node_id: str) -> Steps:
    """``node_id`` beat once, quickly, and then nothing more: its machine is gone."""

    async def steps(pilot: Pilot) -> None:
        with Journal.open(pilot.app.journal_path, create=False) as journal:
            journal.write_presence(Beat(node_id, "start", "gpu-1", 4, "0.1.0", 0.05))
        await pilot.pause(2.5)  # silent for a few seconds, as the row line says

    return steps


def select_node(node_id: str) -> Steps:
    async def steps(pilot: Pilot) -> None:
        await press("n", wait=lambda a: node_id in set(a.query_one("#nodes").keys()))(pilot)
        pilot.app.query_one("#nodes").select(node_id)
        await pilot.pause()

    return steps


def timeline_read(app: RefineApp) -> bool:
    return isinstance(app.screen, TimelineScreen) and app.screen.read_once


def modal_open(app: RefineApp) -> bool:
    return len(app.screen_stack) > 1 and app.screen.query("#dialog").first() is not None


SHOTS: dict[str, tuple[tuple[int, int], list[Steps]]] = {
    "goals": ((80, 24), []),
    "goals-wide": ((140, 40), [select("unit-tests"), press("h")]),
    "runs": ((80, 24), [select("unit-tests"), press("enter")]),
    "attempts": (
        (80, 24),
        [
            select("unit-tests"),
            press("enter", wait=lambda a: bool(a.query_one("#runs").keys())),
            press("enter", wait=lambda a: bool(a.query_one("#attempts").keys())),
            press("h"),
        ],
    ),
    "log": ((80, 24), [select("nightly-report"), press("l")]),
    "cancel-modal": ((80, 24), [select("migrate-db"), press("c", wait=modal_open)]),
    "cleanup-modal": ((80, 24), [select("nightly-report"), press("x", wait=modal_open)]),
    "help": ((80, 24), [press("question_mark")]),
    "nodes": ((80, 24), [press("n", wait=lambda a: a.dashboard.stack.view == "nodes")]),
    "bulk-modal": ((80, 24), [mark("soak-test", "sync-billing"), press("c", wait=modal_open)]),
    "move-modal": ((80, 24), [select("migrate-db"), press("m", wait=modal_open)]),
    "goals-small": ((60, 16), []),
    "timeline": ((80, 24), [select("flaky-fetch"), press("t", wait=lambda a: timeline_read(a))]),
    # Last: its node n2 stays silent in the journal after it.
    "node-cleanup-modal": (
        (80, 24),
        [silent("n2"), select_node("n2"), press("x", wait=modal_open)],
    ),
}
LIVE_GOALS = {"soak-test", "index-rebuild", "sync-billing"}  # running for a minute at least


async def shoot(journal: Path, name: str, out: Path) -> Path:
    size, steps = SHOTS[name]
    app = RefineApp(journal=journal, node=DEMO_NODE, operator="dana")
    async with app.run_test(size=size) as pilot:
        await loaded(pilot)
        # The pulses are drawn by the dashboard's first tick (a second in), where they show.
        dashboard = app.dashboard
        await until(
            pilot, lambda: size[1] < PULSES_MIN_HEIGHT or bool(dashboard.pulses_line.series)
        )
        for step in steps:
            await step(pilot)
        await pilot.pause(0.4)
        for widget in app.screen.query(Input):
            widget.cursor_blink = False
        await pilot.pause(0.1)
        return Path(app.save_screenshot(f"{name}.svg", str(out)))


Rasterise = Callable[[Path, Path], None]  # (svg, png)
CHROMIUM = "/usr/bin/chromium"
# Textual's SVG asks for Fira Code (from a CDN); offline, use a local mono font with every
# box-drawing glyph, and let each row's box glyphs touch the next (no gaps in borders).
SVG_FONT_FIX = (
    "<style>text{font-family:'DejaVu Sans Mono',monospace !important;"
    "font-variant-ligatures:none}</style>"
)


def _chromium(svg: Path, png: Path) -> None:
    """Chromium through Playwright: the browser renders Textual's SVG as it was meant to be."""
    from playwright.sync_api import sync_playwright

    text = svg.read_text().replace("</svg>", SVG_FONT_FIX + "</svg>", 1)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM)
        try:
            page = browser.new_page(device_scale_factor=1.5)
            page.set_content(text)
            page.locator("svg").first.screenshot(path=str(png))
        finally:
            browser.close()


def _cairosvg(svg: Path, png: Path) -> None:
    """cairosvg (needs libcairo): Textual's SVG asks for Fira Code; use a mono font we have."""
    import cairosvg

    text = svg.read_text().replace("Fira Code", "DejaVu Sans Mono")
    cairosvg.svg2png(bytestring=text.encode(), write_to=str(png), output_width=1600)


def _command(args: list[str]) -> Rasterise | None:
    if shutil.which(args[0]) is None:
        return None
    if args[0] == "rsvg-convert":
        return lambda svg, png: subprocess.run([*args, str(png), str(svg)], check=True)
    return lambda svg, png: subprocess.run([*args, str(svg), str(png)], check=True)


def rasteriser() -> Rasterise | None:
    """Something here that really turns an SVG into a PNG (checked on a probe, not assumed)."""
    probe = Path(tempfile.mkdtemp()) / "probe.svg"
    probe.write_text(
        '<svg xmlns="http://www.w3.org/2000/svg" width="4" height="4">'
        '<rect width="4" height="4" fill="red"/></svg>'
    )
    png = probe.with_suffix(".png")
    candidates = [_chromium, _cairosvg, _command(["rsvg-convert", "-o"])]
    for candidate in candidates:
        if candidate is None:
            continue
        png.unlink(missing_ok=True)  # judge each candidate by what it writes itself
        try:
            candidate(probe, png)
        except Exception:  # missing library, a stand-in command: try the next one
            continue
        if png.exists() and png.read_bytes()[:4] == b"\x89PNG":
            return candidate
    return None


async def render(name: str, out: Path) -> Path:
    """One shot on a quiet demo journal (no node): its keys and columns, not its live rows."""
    with tempfile.TemporaryDirectory(prefix="refine-shot-") as tmp:
        journal = populate(Path(tmp) / "journal.db", node=DEMO_NODE, live=False)
        return await shoot(journal, name, out)


def running(journal: Path) -> set[str]:
    with Journal.open(journal, create=False) as opened:
        return {g.goal_id for g in Goals(opened).list(status="running")}


async def capture(out: Path) -> list[Path]:
    with tempfile.TemporaryDirectory(prefix="refine-shots-") as tmp:
        journal = populate(Path(tmp) / "journal.db", node=DEMO_NODE)  # the demo's 15 goals
        os.chdir(tmp)  # the header shows the path as given: a short one reads better
        node = start_node(journal, DEMO_NODE)
        try:
            deadline = time.monotonic() + 60
            while not running(journal) >= LIVE_GOALS:
                if time.monotonic() > deadline:
                    raise RuntimeError("the demo's node never ran its live goals")
                await asyncio.sleep(0.2)
            await asyncio.sleep(8)  # a few steps of log, a few thumbnails done
            return [await shoot(Path("journal.db"), name, out) for name in SHOTS]
        finally:
            stop_node(node)
            finish(journal, DEMO_NODE, "dana")


def main(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    os.environ["TZ"] = "UTC"
    shots = asyncio.run(capture(out.absolute()))
    rasterise = rasteriser()  # outside the event loop: Playwright's sync API needs that
    for svg in shots:
        if rasterise is not None:
            rasterise(svg, svg.with_suffix(".png"))
        print(svg)
    if rasterise is None:
        print("no SVG rasteriser (Chromium, cairosvg, rsvg-convert): SVG only", file=sys.stderr)
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("screenshots"))
    sys.exit(main(parser.parse_args().out))
