"""Screenshot the dashboard as a browser shows it: `refine serve` on a demo journal, in Chromium.

    python scripts/browser_screenshot.py [--out screenshots/browser.png]

Uses Debian's Chromium (/usr/bin/chromium) through Playwright, as tests/system/test_serve.py does.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from refine_tui.demo import DEMO_NODE, finish, populate, start_node, stop_node  # noqa: E402
from tests.helpers.browser import READ_SCREEN, launch, read_url, wait_for  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "screenshots" / "browser.png")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        journal = populate(Path(tmp) / "journal.db")  # the demo's goals, its node running them
        node = start_node(journal, DEMO_NODE)
        refine = [sys.executable, "-m", "refine_tui.cli", "--journal", str(journal)]
        serve = subprocess.Popen(
            [*refine, "--node", DEMO_NODE, "serve", "--port", "0"],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            url = read_url(serve, [])
            with sync_playwright() as playwright:
                context = launch(playwright, Path(tmp) / "profile", width=1100, height=560)
                page = context.new_page()
                page.goto(url)
                wait_for(lambda: "needs cleanup" in page.evaluate(READ_SCREEN), "the Goals table")
                wait_for(lambda: "soak-test" in page.evaluate(READ_SCREEN), "the live goals")
                page.wait_for_timeout(8000)  # a few steps of log, a few thumbnails done
                page.screenshot(path=str(args.out))
                context.close()
        finally:
            serve.send_signal(signal.SIGTERM)
            serve.wait(timeout=60)
            stop_node(node)
            finish(journal, DEMO_NODE, "dana")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
