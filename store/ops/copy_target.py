"""Where `refine copy` writes: a journal that appears whole, or not at all.

- **An existing journal** at the target: filled in place, in the copy's one transaction; a
  copy that fails or is killed leaves it as it was (an empty file, e.g. from mktemp, is made
  an empty journal first, as `refine init` does, and stays one).
- **A new SQLite file**: built as ``.<name>.copying-<8 hex>`` in the target's folder, then given
  its name with ``os.link``, which never replaces a file. Of several copies to one new path, one
  wins; the others refuse (TARGET_NOT_EMPTY) and remove only their own temporary file. A copy
  killed even by SIGKILL leaves only that hidden file (no command opens it unless named), never
  a journal at the target; the next copy to the same target removes it.
- **A new PostgreSQL journal**: its schema is created in the copy's own transaction
  (``PostgresJournal.atomic``), which the server rolls back when the copy dies.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import secrets
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path

from store.errors import StorageError, TargetNotEmptyError
from store.journal.api import Journal
from store.journal.locations import JournalLocation, journal_file_exists

TEMP_MARK = ".copying-"
_NAME_KEPT = 200  # of the target's name in the temporary one (a file name has 255 bytes)
_SIDE_FILES = ("", "-wal", "-shm", "-journal")


def copy_target(location: str) -> AbstractContextManager[Journal]:
    """The empty journal a copy writes into; on a clean exit of the block it is at ``location``.

    Raises TargetNotEmptyError when another journal took a new location meanwhile."""
    where = JournalLocation(location)
    if where.is_server:
        return _postgres_target(where.text)
    path = where.path
    if journal_file_exists(path):
        return Journal.open(path, create=True)  # an empty file becomes the journal, as at init
    return _new_sqlite_file(path)


def _postgres_target(location: str) -> AbstractContextManager[Journal]:
    from store.journal.postgres import PostgresJournal  # psycopg, only for a URL

    return PostgresJournal.atomic(location)


@contextlib.contextmanager
def _new_sqlite_file(path: Path) -> Iterator[Journal]:
    from store.journal.sqlite import make_folder

    make_folder(path.parent)
    remove_stale_copies(path)
    fd, temp = _create_locked(path)
    try:
        with Journal.open(temp) as journal:
            yield journal
        _publish(temp, path)
    finally:
        _remove(temp)  # after the link, only a second name of the copy
        os.close(fd)  # unlocked last: no other copy removes the file while it is ours


def temp_name_pattern(path: Path) -> re.Pattern[str]:
    """The names of temporary files of copies to ``path`` (not their ``-wal`` or ``-shm``)."""
    return re.compile(re.escape(f".{path.name[:_NAME_KEPT]}{TEMP_MARK}") + r"[0-9a-f]{8}\Z")


def _create_locked(path: Path) -> tuple[int, Path]:
    """A new empty temporary file beside ``path``, locked (``flock``) while this copy lives."""
    while True:
        temp = path.with_name(f".{path.name[:_NAME_KEPT]}{TEMP_MARK}{secrets.token_hex(4)}")
        try:
            fd = os.open(temp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
        except FileExistsError:
            continue
        except OSError as exc:
            raise StorageError(f"cannot create a file beside {path}: {exc.strerror}") from None
        fcntl.flock(fd, fcntl.LOCK_EX)  # before SQLite writes a byte (see remove_stale_copies)
        return fd, temp


def _publish(temp: Path, path: Path) -> None:
    """Give the finished copy its name, unless something took that name meanwhile."""
    if journal_file_exists(Path(f"{temp}-wal")):  # the close did not fold the WAL in
        raise StorageError(f"the copy's write-ahead log was left beside {path}: not published")
    try:
        os.link(temp, path)  # never replaces: the one exclusive step
    except FileExistsError:
        raise TargetNotEmptyError(
            f"{path} was created meanwhile (by another copy or command): nothing copied there"
        ) from None
    except OSError as exc:
        raise StorageError(f"cannot create {path}: {exc.strerror}") from None
    folder = os.open(path.parent, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(folder)  # the new name survives a power cut, as the journal's rows do
    finally:
        os.close(folder)


def remove_stale_copies(path: Path) -> list[Path]:
    """Remove what copies to ``path`` that died (SIGKILL, a power cut) left; returns those.

    A live copy holds its file locked from before the file's first byte: a file with content
    that this process can lock belongs to no copy that is still running."""
    pattern, removed = temp_name_pattern(path), []
    with contextlib.suppress(OSError):
        for entry in os.scandir(path.parent):
            if pattern.match(entry.name) and _unowned(Path(entry.path)):
                _remove(Path(entry.path))
                removed.append(Path(entry.path))
    return removed


def _unowned(temp: Path) -> bool:
    try:
        fd = os.open(temp, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return os.fstat(fd).st_size > 0  # empty: its copy has just made it, and locks it next
    except OSError:
        return False  # locked: a live copy's
    finally:
        os.close(fd)


def _remove(temp: Path) -> None:
    for end in _SIDE_FILES:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{temp}{end}")
