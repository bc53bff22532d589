"""This machine's facts: the node-local process records and how to observe and stop a process.

Never authority over who owns work (the journal decides); used to observe and to stop.
"""

# The public surface: these modules (other packages import from them, never from a
# private ``_name``).
__all__ = ["node_lock", "observe", "processes", "stopping"]
