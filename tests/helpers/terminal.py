"""A process on a pseudo-terminal of its own whose window a test can close (the pty's other end
goes away: reads give end-of-file, writes fail; no SIGHUP, as it is not the controlling one)."""

from __future__ import annotations

import contextlib
import os
import pty
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field

import psutil
import pytest


@dataclass
class Terminal:
    proc: subprocess.Popen[bytes]
    controller: int
    seen: bytes = field(default=b"")

    def shows(self, text: str) -> bool:
        """Whether ``text`` was written to the terminal yet (what was written is kept)."""
        with contextlib.suppress(BlockingIOError, OSError):
            self.seen += os.read(self.controller, 1 << 16)
        return text.encode() in self.seen

    def close_window(self) -> None:
        os.close(self.controller)
        self.controller = -1


@contextlib.contextmanager
def on_a_terminal(argv: list[str], env: dict[str, str]) -> Iterator[Terminal]:
    """``argv`` on a fresh pty; killed (and the test failed) if still running at the end."""
    controller, end = pty.openpty()
    os.set_blocking(controller, False)
    proc = subprocess.Popen(argv, stdin=end, stdout=end, stderr=end, env={**env, "TERM": "xterm"})
    os.close(end)
    terminal = Terminal(proc, controller)
    try:
        yield terminal
    finally:
        if terminal.controller >= 0:
            os.close(terminal.controller)
        if proc.poll() is None:
            cpu = psutil.Process(proc.pid).cpu_percent(0.5)
            proc.kill()
            proc.wait()
            pytest.fail(f"still running after its terminal went away ({cpu:.0f} % CPU)")
