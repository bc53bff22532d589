"""The node runtime: ``refine node``'s scheduler, its worker processes and their forkserver."""

# The public surface: these modules (other packages import from them, never from a
# private ``_name``).
__all__ = ["forkserver", "scheduler", "wakeups", "worker"]
