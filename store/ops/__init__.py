"""Operator services and reads: Stop, Cancel, Confirm cleanup, Release, their evidence, the
dashboard's reads, ``refine check``, ``refine wait`` and ``refine copy``.
"""
