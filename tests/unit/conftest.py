"""The unit tier: no processes, no servers, seconds in all (``python -m pytest tests/unit``).

Pure functions and Textual widgets under Pilot on small journal files; the inner loop while
writing code, and the tier CI runs on every supported Python.
"""
