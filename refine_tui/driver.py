"""Textual's Linux terminal driver, with an input thread that sleeps until there is input.

Textual 8's input thread wakes every 100 ms (``select(0.1)``) to see whether the app is exiting
and whether a half-read escape sequence timed out: ≈ 0.1 % of a core in a dashboard left open
all day, a fifth of its idle budget (issue 16, per-thread CPU). Here it waits on the terminal
and on a pipe that ``exit_event.set()`` writes to, with a timeout only while the parser awaits
the rest of a sequence (a lone escape key). The loop is otherwise Textual's own.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import threading
from codecs import getincrementaldecoder

from textual.drivers.linux_driver import LinuxDriver

from refine_tui.textual_private import (
    ParseError,
    XTermParser,
    driver_app,
    driver_debug,
    driver_loop,
    parser_timeout,
)


class _WakingEvent(threading.Event):
    """An Event whose ``set`` also makes a pipe readable (a selector can wait on it)."""

    def __init__(self) -> None:
        super().__init__()
        self.fileno, self._write_end = os.pipe()
        os.set_blocking(self.fileno, False)

    def set(self) -> None:
        super().set()
        os.write(self._write_end, b"x")

    def clear(self) -> None:
        super().clear()
        try:
            while os.read(self.fileno, 64):
                pass
        except BlockingIOError:
            pass


class QuietLinuxDriver(LinuxDriver):
    """LinuxDriver whose input thread does not poll."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.exit_event = _WakingEvent()

    def run_input_thread(self) -> None:
        """Wait for input, exit or an escape sequence's timeout; dispatch events."""
        exit_event = self.exit_event
        assert isinstance(exit_event, _WakingEvent)
        selector = selectors.DefaultSelector()
        selector.register(self.fileno, selectors.EVENT_READ)
        selector.register(exit_event.fileno, selectors.EVENT_READ)
        parser = XTermParser(driver_debug(self))
        decode = getincrementaldecoder("utf-8")().decode
        a_terminal = os.isatty(self.fileno)  # (a hung-up one is no longer a tty to isatty)

        def dispatch(ready: list[tuple[selectors.SelectorKey, int]], final: bool = False) -> None:
            for key, _ in ready:
                if key.fd != self.fileno:
                    continue
                try:
                    raw: bytes | None = os.read(self.fileno, 1024 * 4)
                except OSError:  # EIO: the terminal hung up (its window closed)
                    raw = None
                if not raw:  # nothing will come again: stop waiting on it (it stays readable)
                    selector.unregister(self.fileno)
                    self._input_ended(terminal_gone=raw is None or a_terminal)
                    continue
                for event in parser.feed(decode(raw, final=final)):
                    self.process_message(event)
            for event in parser.tick():
                self.process_message(event)

        try:
            while not exit_event.is_set():
                dispatch(selector.select(parser_timeout(parser)))
            if self.fileno in selector.get_map():
                selector.unregister(self.fileno)
                dispatch(selector.select(0.1), final=True)
        finally:
            selector.close()
            try:
                for _ in parser.feed(""):
                    pass
            except (EOFError, ParseError):
                pass

    def _input_ended(self, terminal_gone: bool) -> None:
        """The input ended. A terminal that went away ends the dashboard: nothing it draws can
        be seen and no key can come (it kept running, its input thread spinning: a hung-up
        terminal reads as ended, and is always readable). Piped input that ended does not."""
        if terminal_gone:
            self.exit_event.set()  # this thread ends: the app's exit has nothing to wait for
            with contextlib.suppress(RuntimeError):  # its loop is closed: it ended already
                driver_loop(self).call_soon_threadsafe(driver_app(self).exit)
