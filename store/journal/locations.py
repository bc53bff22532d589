"""Where a journal is, and where a node keeps its local files for it (DESIGN §11).

The watch folder, the node folders and the process records all derive from the journal's
location. Reached through a symlink, a SQLite journal must still be the same journal: the
watcher must watch the folder where its ``-wal`` changes, and a node's records must be found
whichever name an operator used. So every derivation starts from the real path.

A node's state dir (process records, logs) is, in this order: the explicit override, else
``$REFINE_STATE_DIR`` (the CLI's ``--state-dir`` sets it for its command and its workers), else
``nodes/<node>/<journal id>/`` beside a SQLite journal (two journals in one folder must not share
records: the same run id and epoch in both would name one file), else
``$XDG_STATE_HOME/refine/<journal id>/<node>/`` (``~/.local/state/...`` without it) for a
PostgreSQL journal, whose machines share nothing. Records written before the journal id named
the folder are in ``nodes/<node>/`` itself: ``legacy_node_dir`` says where to read them.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import quote

from store.errors import StorageUnreachableError
from store.journal.url import is_postgres_url

STATE_DIR_ENV = "REFINE_STATE_DIR"

Location = str | os.PathLike[str]


def resolve_journal_path(path: Location) -> Path:
    """The journal's real path: absolute, symlinks resolved (also for a file not yet there)."""
    return Path(os.path.realpath(os.fspath(path)))


def journal_file_exists(path: Path) -> bool:
    """Whether anything is at ``path``. A path the system cannot look up (a name too long, a
    symlink loop, a folder that may not be searched) is refused in one line, never a crash."""
    try:
        os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as exc:
        raise StorageUnreachableError(f"journal path unusable ({exc.strerror}): {path}") from None
    return True


def file_name(value: str) -> str:
    """One flat, reversible file name for an identifier (ids may hold "/" and ":")."""
    return quote(value, safe="._-")


def state_home() -> Path:
    """``$XDG_STATE_HOME`` when set to an absolute path (the spec ignores others), else
    ``~/.local/state``."""
    xdg = os.environ.get("XDG_STATE_HOME", "")
    return Path(xdg) if os.path.isabs(xdg) else Path.home() / ".local" / "state"


def server_journal_dir(journal_id: str) -> Path:
    """This machine's folder for a server (PostgreSQL) journal: one per journal id."""
    if not journal_id:
        raise ValueError("a server journal's local folder needs its journal id")
    return state_home() / "refine" / file_name(journal_id)


def node_state_dir(
    location: Location,
    node_id: str,
    journal_id: str | None = None,
    override: Location | None = None,
) -> Path:
    """The folder where ``node_id`` keeps its process records and logs for this journal."""
    chosen = override or os.environ.get(STATE_DIR_ENV)
    if chosen:
        return Path(chosen).absolute()
    if is_postgres_url(location):
        return server_journal_dir(journal_id or "") / file_name(node_id)
    shared = _sqlite_node_dir(location, node_id)
    return shared / file_name(journal_id) if journal_id else shared


def legacy_node_dir(
    location: Location,
    node_id: str,
    journal_id: str | None = None,
    override: Location | None = None,
) -> Path | None:
    """Where ``node_state_dir`` was before it named the journal id (``nodes/<node>/``, shared
    by every journal in the folder), when that differs from it now; else None."""
    if journal_id is None or override or os.environ.get(STATE_DIR_ENV):
        return None
    return None if is_postgres_url(location) else _sqlite_node_dir(location, node_id)


def _sqlite_node_dir(location: Location, node_id: str) -> Path:
    return resolve_journal_path(location).parent / "nodes" / file_name(node_id)


def resolve_location(location: Location) -> str | Path:
    """A journal location made canonical once: a file path resolved, a database URL as is."""
    return os.fspath(location) if is_postgres_url(location) else resolve_journal_path(location)
