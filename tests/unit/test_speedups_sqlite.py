"""``store.speedups.sqlite`` is ``sqlite3``: the same objects, without the wrapper's imports."""

from __future__ import annotations

import sqlite3 as wrapper
import subprocess
import sys

from store.speedups.sqlite import sqlite3

# Every name the store's SQLite code uses (grep `sqlite3\.` in store/): the same object.
USED = [
    "connect", "Connection", "Cursor", "Row", "Error", "DatabaseError", "OperationalError",
    "IntegrityError", "ProgrammingError", "sqlite_version", "SQLITE_BUSY", "SQLITE_LOCKED",
    "SQLITE_NOTADB", "SQLITE_CORRUPT", "SQLITE_CANTOPEN", "SQLITE_PERM", "SQLITE_AUTH",
    "SQLITE_IOERR", "SQLITE_READONLY", "SQLITE_FULL",
]  # fmt: skip


def test_every_name_the_store_uses_is_the_wrappers_own_object() -> None:
    for name in USED:
        assert getattr(sqlite3, name) is getattr(wrapper, name), name


def test_an_error_it_raises_is_caught_as_the_wrappers() -> None:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    try:
        conn.execute("select * from missing")
    except wrapper.OperationalError as exc:
        assert exc.sqlite_errorcode == wrapper.SQLITE_ERROR
    else:
        raise AssertionError("no error")
    assert conn.execute("select 1 + 1").fetchone() == (2,)


def test_it_imports_neither_the_wrapper_nor_datetime() -> None:
    probe = (
        "import sys; from store.journal.sqlite import Journal;"
        " print('sqlite3' in sys.modules, 'datetime' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "False"], done.stdout + done.stderr
