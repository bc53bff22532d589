"""Before `refine node` serves: no second node of the same name on the same journal.

Two schedulers of one node name claim the same Goals and adopt each other's workers. A node of
the name already runs when this machine's node lock is held (``store.host.node_lock``: proof),
or when its presence is ``live`` from another machine (``store.journal.presence``: evidence,
which ``force`` overrides). A live beat from this machine with the lock free is a node that
ended without its clean-exit mark (killed): starting again is what the operator wants.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from store.errors import NodeLiveError, StorageError
from store.host.node_lock import NodeLock
from store.host.processes import ProcessRegistry
from store.ops.nodes import node_view

if TYPE_CHECKING:
    from store.journal.api import Journal


def claim_node_name(journal: Journal, node_id: str, *, force: bool = False) -> NodeLock:
    """This machine's lock of ``node_id`` on ``journal`` (``held`` False only with ``force``);
    NodeLiveError while another node of that name runs."""
    lock = NodeLock(ProcessRegistry.for_journal(journal, node_id).root)
    try:
        acquired = lock.acquire()
    except OSError as exc:  # e.g. its disk full: the state dir's problem, in words (exit 3)
        raise StorageError(
            f"cannot write this node's lock {lock.path}: {exc.strerror or exc}"
        ) from None
    if not acquired:
        if force:
            return lock
        raise NodeLiveError(
            f"node {node_id} already runs on this machine for this journal (pid {lock.holder()}):"
            " stop it first (--force starts a second one anyway)"
        )
    if force:
        return lock
    view = node_view(journal, node_id, count=False)
    presence = view.presence if view is not None else None
    if view is None or presence is None or view.state != "live":
        return lock
    if presence.host == os.uname().nodename:  # no node holds the lock here: that one ended
        return lock
    lock.release()
    age = f"{view.age_s:.0f} s ago" if view.age_s is not None else "recently"
    raise NodeLiveError(
        f"node {node_id} is live on this journal from host {presence.host} (last beat {age}):"
        " stop it there, or --force if it is gone (it turns silent after three missed beats)"
    )
