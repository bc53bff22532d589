"""What a node or worker says while a step keeps failing (the journal out of reach, say).

Their steps are tried again every round or with a growing wait, for as long as an outage lasts.
Said at every try, an hour's server restart window was thousands of identical lines in a node's
stderr and its node log (two lines every few seconds per node, one every 5 s per worker); said
once, and once more when the step passes again, it is two lines that tell the operator what to
look at and when it ended.
"""

from __future__ import annotations

import time
from collections.abc import Callable

MAX_SAID = 8  # distinct messages in one spell of failures (a reason that varies is not a flood)


class Trouble:
    """Words for one concern's failures: each new message once, not each retry's; then, once
    the concern passes again, one line saying so and how long it lasted."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self._say = say
        self._since: float | None = None  # when the failures began (monotonic)
        self._said: set[str] = set()

    @property
    def failing(self) -> bool:
        return self._since is not None

    def failed(self, message: str) -> None:
        """Say ``message`` unless it was said since the failures began (or ``MAX_SAID`` were)."""
        if self._since is None:
            self._since = time.monotonic()
        if message not in self._said and len(self._said) < MAX_SAID:
            self._said.add(message)
            self._say(f"{message} (trying again; said once until it passes)")

    def passed(self, what: str) -> None:
        """The concern works again: say ``what`` ("the journal answers") and for how long it
        did not, if it had failed; nothing otherwise."""
        if self._since is None:
            return
        lasted = time.monotonic() - self._since
        self._since, self._said = None, set()
        self._say(f"{what} again, after {f'{lasted:.0f} s' if lasted >= 1 else 'under a second'}")
