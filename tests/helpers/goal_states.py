"""Goals put in a status through the Goals API, as a node and an operator would: for tests
that act on goals in a given status (batches, reassignment)."""

from __future__ import annotations

from store.model.goals import Goals


def add(goals: Goals, goal_id: str, *, node: str = "n1", **kw: object) -> None:
    """A queued goal (recipe ``true``), its title its id."""
    goals.create(goal_id=goal_id, title=goal_id, node_id=node, argv=["true"], **kw)  # type: ignore[arg-type]


def start(goals: Goals, goal_id: str, *, node: str = "n1") -> None:
    """Its attempt 1 claimed by a worker of ``node``."""
    goals.start(goal_id=goal_id, node_id=node, worker=f"{node}:w-{goal_id}", token=f"t-{goal_id}")


def held(goals: Goals, goal_id: str, *, node: str = "n1") -> None:
    """A goal held for release: redelivery operator, its attempt 1 confirmed ended."""
    add(goals, goal_id, node=node, redelivery="operator")
    start(goals, goal_id, node=node)
    goal = goals.read(goal_id)
    assert goal is not None
    run = goals.current_run(goal)
    assert run is not None
    goals.interrupt(
        goal_id=goal_id,
        run_id=goal.run_id,
        epoch=1,
        goal_version=goal.version,
        run_version=run.version,
        confirmed_by=f"dana@{node}",
        method="operator-confirmed",
        command_id=f"test:{goal_id}:interrupt",
    )
    assert goals.read(goal_id).status == "held"  # type: ignore[union-attr]
