"""Debian's Chromium under Playwright, for `refine serve` (test_serve.py, the screenshot).

The page draws on a canvas (xterm.js), so we read the terminal's own buffer: an init script
keeps textual-serve's terminal object when its constructor assigns ``fitAddon``.
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.helpers.waits import wait_until

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
KEEP_TERMINAL = """
Object.defineProperty(Object.prototype, "fitAddon", {
  configurable: true,
  set(value) {
    Object.defineProperty(this, "fitAddon", {value, writable: true, configurable: true});
    window.__refineTerminal = this;
  },
});
"""
READ_SCREEN = """() => {
  const t = window.__refineTerminal && window.__refineTerminal.terminal;
  if (!t) return "";
  const b = t.buffer.active, rows = [];
  for (let i = 0; i < t.rows; i++) {
    const line = b.getLine(b.viewportY + i);
    rows.push(line ? line.translateToString(true) : "");
  }
  return rows.join("\\n");
}"""


def launch(playwright: Any, profile: Path, width: int = 1200, height: int = 700) -> Any:
    """A headless context on a fresh profile that can read the terminal and stays offline."""
    context = playwright.chromium.launch_persistent_context(
        str(profile),
        executable_path=CHROMIUM,
        headless=True,
        args=CHROMIUM_ARGS,
        viewport={"width": width, "height": height},
    )
    context.add_init_script(KEEP_TERMINAL)
    # The page asks Google for a font: keep the browser off the internet.
    context.route(
        "**/*",
        lambda route: (
            route.continue_()
            if route.request.url.startswith(("http://127.0.0.1", "ws://127.0.0.1"))
            else route.abort()
        ),
    )
    return context


def read_url(proc: subprocess.Popen[str], lines: list[str], timeout: float = 90.0) -> str:
    """Collect stdout in a thread (it also keeps the pipe drained); return the printed URL."""
    assert proc.stdout is not None
    stdout = proc.stdout
    threading.Thread(target=lambda: lines.extend(iter(stdout.readline, "")), daemon=True).start()
    try:
        found = wait_for(
            lambda: (
                next((ln.strip() for ln in lines if "?token=" in ln), None)
                or proc.poll() is not None
            ),
            "refine serve to print its URL",
            timeout,
        )
    except AssertionError:
        proc.kill()
        raise
    assert isinstance(found, str), f"refine serve exited: {lines}"
    return found.split()[0]


def wait_for(condition: Callable[[], Any], what: str, timeout: float = 90.0) -> Any:
    """Poll until ``condition()`` is truthy; generous, and ends as soon as it holds."""
    return wait_until(condition, timeout, what, step=0.2)
