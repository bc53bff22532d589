"""Driving a real `refine tui` in tmux: the session, keys sent to it, what its pane shows."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], check=True, capture_output=True, text=True).stdout


def session_alive(session: str) -> bool:
    found = subprocess.run(["tmux", "has-session", "-t", session], capture_output=True)
    return found.returncode == 0


def wait_for_screen(session: str, needle: str, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    while True:
        screen = tmux("capture-pane", "-p", "-t", session)
        if needle in screen:
            return screen
        assert time.monotonic() < deadline, f"{needle!r} never showed:\n{screen}"
        time.sleep(0.2)


def wait_for_pane(
    session: str, shows: Callable[[str], bool], what: str, timeout: float = 30.0
) -> str:
    """The pane once ``shows(screen)`` holds (e.g. the footer of the view just opened: it can
    come a frame after the view's rows)."""
    deadline = time.monotonic() + timeout
    while not shows(screen := tmux("capture-pane", "-p", "-t", session)):
        assert time.monotonic() < deadline, f"{what} never showed:\n{screen}"
        time.sleep(0.2)
    return screen


def unwrapped(screen: str) -> str:
    """The screen's words as one line: borders, scrollbars and line ends taken off (block
    elements, U+2580–U+259F), so text wrapped at any width reads whole."""
    text = "".join(" " if "\u2580" <= c <= "\u259f" else c for c in screen)
    return " ".join(text.split())
