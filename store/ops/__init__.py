"""Operator services and reads: Stop, Cancel, Confirm cleanup, Release, their evidence, the
dashboard's reads, ``refine check``, ``refine wait`` and ``refine copy``.
"""

# The public surface: these modules (other packages import from them, never from a
# private ``_name``).
__all__ = [
    "attempt_log",
    "attempt_spans",
    "bulk",
    "bulk_plan",
    "check",
    "copy_target",
    "event_stream",
    "evidence",
    "goal_wait",
    "journal_copy",
    "journal_stats",
    "metrics",
    "node_cleanup",
    "node_start",
    "nodes",
    "operator",
    "pulses",
    "reads",
]
