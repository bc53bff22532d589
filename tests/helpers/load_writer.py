"""One load writer: ``python load_writer.py JOURNAL INDEX COMMANDS RATE SEED``.

Commits COMMANDS Goal commands (create, start, settle, interrupt, cancel, release, reassign) on
its own Goals at about RATE commands/s, as a node, a worker and an operator would, then
prints one JSON line: {"commands", "refused", "locked", "first_locked"} (the first storage
refusal's words, or null). Goals are kept alive by failures and reassignment (a fresh round
each time) so the set stays small while the commands keep coming.
"""

from __future__ import annotations

import json
import random
import sys
import time

from store.errors import RefineError, StorageError
from store.journal.sqlite import Journal
from store.model.goals import Goal, Goals

MAX_GOALS = 40  # per writer: 4 writers stay within what the dashboard lists (1000 + 200)
NODES = ("n1", "n2")


class Writer:
    def __init__(self, goals: Goals, index: int, rng: random.Random) -> None:
        self.goals = goals
        self.index = index
        self.rng = rng
        self.created = 0
        self.serial = 0

    def next_id(self, what: str) -> str:
        self.serial += 1
        return f"w{self.index}:{what}:{self.serial}"

    def step(self) -> bool:
        """One command on one of this writer's Goals (False: nothing left to do)."""
        live = [g for g in self.mine() if not g.terminal]
        if self.created < MAX_GOALS and (not live or self.rng.random() < 0.1):
            self.create()
        elif live:
            self.act(self.rng.choice(live))
        return bool(live) or self.created < MAX_GOALS

    def mine(self) -> list[Goal]:
        return [self.goals.read(f"w{self.index}-g{i}") for i in range(self.created)]  # type: ignore[misc]

    def create(self) -> None:
        goal_id = f"w{self.index}-g{self.created}"
        self.created += 1
        self.goals.create(
            goal_id=goal_id,
            title=f"Load {goal_id}",
            node_id=self.rng.choice(NODES),
            argv=["true", goal_id],
            max_attempts=self.rng.randint(10, 20),
            redelivery=self.rng.choice(("safe", "operator")),
        )

    def act(self, goal: Goal) -> None:
        r = self.rng.random()
        if r < 0.003:
            self.goals.cancel(
                goal_id=goal.goal_id, reason="load: cancel", command_id=self.next_id("c")
            )
        elif goal.status == "queued":
            if r < 0.3:
                other = NODES[1 - NODES.index(goal.node_id)]
                self.goals.reassign(
                    goal_id=goal.goal_id, node_id=other, expected_version=goal.version
                )
            else:
                token = self.next_id("t").replace(":", "-")
                self.goals.start(
                    goal_id=goal.goal_id, node_id=goal.node_id, worker=f"w{self.index}", token=token
                )
        elif goal.status == "held":
            self.goals.release(goal_id=goal.goal_id, command_id=self.next_id("r"), by="load")
        elif goal.status == "running":
            self.finish(goal, r)

    def finish(self, goal: Goal, r: float) -> None:
        run = self.goals.current_run(goal)
        assert run is not None and run.running_attempt is not None
        epoch = run.running_attempt.epoch
        if r < 0.2:
            self.goals.interrupt(
                goal_id=goal.goal_id,
                run_id=run.run_id,
                epoch=epoch,
                goal_version=goal.version,
                run_version=run.version,
                confirmed_by="load@n1",
                method="load-test",
                command_id=self.next_id("i"),
            )
            return
        outcome = "completed" if r < 0.21 else "failed"
        self.goals.settle(
            goal_id=goal.goal_id,
            run_id=run.run_id,
            epoch=epoch,
            outcome=outcome,
            reason="exit 1" if outcome == "failed" else None,
            evidence=[f"exit:{0 if outcome == 'completed' else 1}"],
        )


def main(path: str, index: int, quota: int, rate: float, seed: int) -> None:
    """A count of commands, not a duration: on a busy machine the load takes longer, it is not
    smaller (the test asserts how many commands ran)."""
    counts = {"commands": 0, "refused": 0, "locked": 0}
    first_locked = None  # the first storage refusal's words, for the test's report
    with Journal.open(path, create=False, busy_timeout_ms=10_000) as journal:
        writer = Writer(Goals(journal), index, random.Random(seed))
        start = time.monotonic()
        while counts["commands"] < quota:
            now = time.monotonic()
            try:
                if not writer.step():
                    break
                counts["commands"] += 1
            except StorageError as exc:
                counts["locked"] += 1
                first_locked = first_locked or f"{exc.code}: {exc.message}"
            except RefineError:
                counts["refused"] += 1
            due = start + counts["commands"] / rate
            if due > now:
                time.sleep(due - now)
    print(json.dumps({**counts, "first_locked": first_locked}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]))
