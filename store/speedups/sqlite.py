"""``sqlite3`` without its Python wrapper: the C module ``_sqlite3`` that ``sqlite3`` re-exports.

Justified by ``bench/cli.py`` (every command that opens a SQLite journal): ``sqlite3.dbapi2``
imports ``datetime`` and registers date adapters and converters the store never uses (it stores
text and numbers): importing it cost 6.7 ms of CPU over bare Python, the C module alone 3.5 ms
(fresh interpreters, 100 interleaved runs each, 3.11). The classes, functions, constants and
exceptions are the very objects ``sqlite3`` exports (``tests/unit/test_speedups_sqlite.py``), so
an ``except sqlite3.OperationalError`` anywhere catches what these raise. Another Python, or a
build without the C module, gets ``sqlite3``.
"""

from __future__ import annotations

try:
    import _sqlite3 as sqlite3
except ImportError:  # pragma: no cover - another Python: the wrapper, with its C module inside
    import sqlite3  # type: ignore[no-redef]

__all__ = ["sqlite3"]
