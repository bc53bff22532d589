"""Progress bars for long commands (`refine check`, `refine copy`: minutes at a million Goals).

Rich's progress display on stderr, only when stderr is a terminal and the output is not
``--json``: a pipe or a script gets its output and nothing else. The store never sees Rich: it
calls a plain ``(done, total)`` callback (store.ops.check.Progress)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import TracebackType
from typing import Any

Callback = Callable[[int, int], None]


class Bars:
    """One Rich progress display whose bars the command's phases add (``bar``); inert when off."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._progress: Any = None

    def __enter__(self) -> Bars:
        if self.enabled:  # Rich is imported only for a terminal: a script pays nothing
            from rich.console import Console
            from rich.progress import MofNCompleteColumn, Progress, TimeElapsedColumn

            self._progress = Progress(
                *Progress.get_default_columns(),  # description, bar, percent, time remaining
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=True,  # the report that follows stands alone
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._progress.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._progress is not None:
            self._progress.stop()

    def bar(self, description: str) -> Callback | None:
        """A new bar, as the callback the store's long operations take (None when off); shown
        from its first report on, so a later phase's bar waits its turn."""
        if self._progress is None:
            return None
        progress = self._progress
        task = progress.add_task(description, total=None, visible=False)

        def update(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total, visible=True)

        return update


def bars_for(json_output: bool) -> Bars:
    """Bars on a terminal's stderr, unless the output is JSON."""
    stderr = sys.stderr
    return Bars(not json_output and stderr is not None and stderr.isatty())
