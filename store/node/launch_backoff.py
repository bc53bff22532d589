"""Launches wait after workers that could not start their attempts, for the machine's reasons or
the journal's.

A worker that could not claim (the journal would not take the write: a full disk, a server
refusing writes) or could not fork its claim helper leaves its Goal queued, and the node's next
round launches it again at once; one that claimed but could not record itself (its state dir's
disk full) reports its attempt failed, and the next launch fails the same way, so the queue's
attempts would all be spent in seconds. Without a wait, a node on a full disk forked workers as
fast as they failed (≈ 260 processes a second, 15 % of a core) and said nothing where the
operator looks: the workers' words went to the node log, on the same full disk. So such an exit
makes the node's launches wait, 0.5 s and doubling to 30 s while they keep failing; it says so
once on its own stderr, and again when a worker reaches the journal. Both causes are the
machine's or the journal's, not one Goal's, so the whole node waits; a worker that crashed (a
fault of ours, maybe one Goal's) does not make the others wait.
"""

from __future__ import annotations

from pathlib import Path

from store.node.worker import (
    EXIT_NO_HELPER,
    EXIT_NO_RECORD,
    EXIT_REFUSED,
    EXIT_SETTLED,
    EXIT_STOPPED,
    EXIT_SUPERSEDED,
    EXIT_UNAVAILABLE,
)
from store.records import dataclass

FIRST_WAIT_S, LONGEST_WAIT_S = 0.5, 30.0
# The exits that say the journal or this machine cannot take a new attempt now, in words.
UNREACHED = {
    EXIT_UNAVAILABLE: "the journal would not take its claim",
    EXIT_NO_HELPER: "no claim helper could be started",
    EXIT_NO_RECORD: "this machine could not record it: its attempt was reported failed",
}
REACHED = (EXIT_SETTLED, EXIT_REFUSED, EXIT_SUPERSEDED, EXIT_STOPPED)  # the journal answered it


@dataclass
class LaunchBackoff:
    """When the node may launch again (``until``, monotonic) and the wait that set it."""

    wait_s: float = 0.0  # 0: no wait (launches go at once)
    until: float = 0.0

    def exited(self, code: int | None, now: float, log: Path) -> str | None:
        """A worker's exit code: the words to say when it starts or ends a run of waits."""
        if code in UNREACHED:
            fresh = self.wait_s == 0.0 or now > self.until + LONGEST_WAIT_S  # failures apart
            self.wait_s = FIRST_WAIT_S if fresh else min(self.wait_s * 2, LONGEST_WAIT_S)
            self.until = now + self.wait_s
            if fresh:
                return (
                    f"a worker could not start its attempt ({UNREACHED[code]}, exit {code};"
                    f" its words are in {log}): launches wait {FIRST_WAIT_S:g} s, doubling to"
                    f" {LONGEST_WAIT_S:g} s while workers keep failing so"
                )
        elif code in REACHED and self.wait_s:
            self.wait_s = self.until = 0.0
            return "launches go at once again: a worker reached the journal"
        return None

    def waits(self, now: float) -> bool:
        return now < self.until
