"""Where the store does what the standard library (or a library) does, faster where a benchmark
measured that it matters. One module per concern; each names in its docstring the benchmark that
justifies it, and a test in ``tests/unit/test_speedups_<module>.py`` compares it with what it
replaces on every supported Python (3.11, 3.12, 3.13; `.ci/run` runs the unit tier on each).

- ``frozen_dataclass``: ``@dataclass(frozen=True)`` without compiling six methods per class or
  importing ``inspect``, its ``__init__`` compiled once per interpreter and kept beside the
  bytecode (``bench/cli.py``: every command's start-up).
- ``sha256``: CPython's built-in SHA-256, without importing ``hashlib`` and OpenSSL
  (``bench/cli.py``: a write command's start-up).
- ``sqlite``: the C module ``_sqlite3`` without the ``sqlite3`` wrapper, which imports
  ``datetime`` for adapters the store never uses (``bench/cli.py``: every command's start-up).
- ``inotify``: the kernel's directory events on the event loop instead of watchfiles' polling
  thread (``bench/idle.py``: an idle node's and dashboard's CPU).

A win a benchmark no longer shows goes back to the plain call (issue 28 dropped the prebuilt C
JSON encoder of ``store.canonical``: ≈ 1 µs of a ≈ 300 µs command).
"""

# The public surface: these modules (other packages import from them, never from a
# private ``_name``).
__all__ = ["frozen_dataclass", "inotify", "json_scan", "sha256", "sqlite"]
