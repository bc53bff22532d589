"""This machine's facts: the node-local process records and how to observe and stop a process.

Never authority over who owns work (the journal decides); used to observe and to stop.
"""
