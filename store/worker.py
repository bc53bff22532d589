"""``python -m store.worker``: the contract's path to the worker (``store.node.worker``).

The node launches workers by this name, and ``ps`` shows it: a restarted node finds its workers
by it (``store.host.processes``).
"""

import sys

from store.node.worker import JOURNAL_ENV, main, run_worker, worker_name

__all__ = ["JOURNAL_ENV", "main", "run_worker", "worker_name"]

if __name__ == "__main__":
    sys.exit(main())
