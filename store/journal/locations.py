"""Where a journal is, and where a node keeps its local files for it (DESIGN §11).

``JournalLocation`` reads what the user gave once: a file path (SQLite) or a server URL
(``postgresql://``; the scheme alone decides, against ``BACKENDS``). Everything that differs
between a file journal and a server journal is asked of it (``is_server``, ``printable``,
``state_dir``, ``open``, ``watch``), never guessed from a type or a prefix elsewhere.

The watch folder, the node folders and the process records all derive from the journal's
location. Reached through a symlink, a SQLite journal must still be the same journal: the
watcher must watch the folder where its ``-wal`` changes, and a node's records must be found
whichever name an operator used. So a file location is resolved to its real path when read.

A node's state dir (process records, logs) is, in this order: the explicit override, else
``$REFINE_STATE_DIR`` (the CLI's ``--state-dir`` sets it for its command and its workers), else
``nodes/<node>/<journal id>/`` beside a SQLite journal (two journals in one folder must not share
records: the same run id and epoch in both would name one file), else
``$XDG_STATE_HOME/refine/<journal id>/<node>/`` (``~/.local/state/...`` without it) for a
PostgreSQL journal, whose machines share nothing. Records written before the journal id named
the folder are in ``nodes/<node>/`` itself: ``legacy_state_dir`` says where to read them.
"""

from __future__ import annotations

import importlib
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

from store.errors import BackendUnavailableError, InvalidInputError, StorageUnreachableError
from store.journal.url import LIBPQ_OPTIONS, UNPARSABLE, parse_url

if TYPE_CHECKING:
    from store.journal.api import Backend, Journal, Synchronous, WakeUps

STATE_DIR_ENV = "REFINE_STATE_DIR"

_URL_SCHEME = r"([A-Za-z][A-Za-z0-9+.-]*)://"  # RFC 3986's scheme, then an authority
_LIBPQ_KEYWORD = r"\s*([A-Za-z_]+)\s*="  # a keyword/value string starts so (libpq's own rule)

# URL scheme → module and class of that backend; a location without one of these is a SQLite path.
BACKENDS: dict[str, tuple[str, str]] = {
    "postgresql": ("store.journal.postgres", "PostgresJournal"),
    "postgres": ("store.journal.postgres", "PostgresJournal"),
}
SQLITE_BACKEND = ("store.journal.sqlite", "SqliteJournal")


def resolve_journal_path(path: str | os.PathLike[str]) -> Path:
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


class JournalLocation:
    """A journal's location, read once from what the user gave: a file or a server.

    Never shows a password: ``str()`` and ``repr()`` are the printable form; ``text`` (what the
    backend opens) is the one place the URL is kept whole.
    """

    __slots__ = ("_given", "_path", "scheme")

    def __init__(self, location: str | os.PathLike[str]) -> None:
        given = location_text(location)
        scheme = given.split("://", 1)[0].lower() if "://" in given else ""
        self.scheme = scheme if scheme in BACKENDS else ""  # "": a SQLite file
        self._given = given
        self._path = None if self.scheme else resolve_journal_path(given)

    @classmethod
    def of(cls, location: Location) -> JournalLocation:
        """``location`` as a JournalLocation (itself when it is one already)."""
        return location if isinstance(location, JournalLocation) else cls(location)

    @property
    def is_server(self) -> bool:
        """A database server's journal (``postgresql://``), not a file on this machine."""
        return self._path is None

    @property
    def path(self) -> Path:
        """A file journal's real path (symlinks resolved). ValueError for a server journal."""
        if self._path is None:
            raise ValueError("a server journal has no file")
        return self._path

    @property
    def text(self) -> str:
        """What the backend opens: the real path, or the URL whole (with its password)."""
        return self._given if self._path is None else str(self._path)

    @property
    def printable(self) -> str:
        """What errors, headers and --json show: a path as given, a URL without its password
        or any option that may hold one."""
        if self._path is not None:
            return str(Path(self._given))
        try:
            return parse_url(self._given).shown()
        except InvalidInputError:
            return UNPARSABLE

    def __str__(self) -> str:
        return self.printable

    def __repr__(self) -> str:
        return f"JournalLocation({self.printable!r})"

    def missing_file(self) -> bool:
        """A file journal with nothing at its path (a server journal is asked by opening it).
        StorageUnreachableError when the path cannot be looked up."""
        return self._path is not None and not journal_file_exists(self._path)

    def state_dir(
        self,
        node_id: str,
        journal_id: str | None = None,
        override: str | os.PathLike[str] | None = None,
    ) -> Path:
        """The folder where ``node_id`` keeps its process records and logs for this journal."""
        chosen = _chosen_state_dir(override)
        if chosen is not None:
            return chosen
        if self._path is None:
            return server_journal_dir(journal_id or "") / file_name(node_id)
        shared = _sqlite_node_dir(self._path, node_id)
        return shared / file_name(journal_id) if journal_id else shared

    def legacy_state_dir(
        self,
        node_id: str,
        journal_id: str | None = None,
        override: str | os.PathLike[str] | None = None,
    ) -> Path | None:
        """Where ``state_dir`` was before it named the journal id (``nodes/<node>/``, shared
        by every journal in the folder), when that differs from it now; else None."""
        if journal_id is None or self._path is None or _chosen_state_dir(override) is not None:
            return None
        return _sqlite_node_dir(self._path, node_id)

    def backend(self) -> Backend:
        """The backend class for this location, imported on first use."""
        module_name, class_name = BACKENDS[self.scheme] if self.scheme else SQLITE_BACKEND
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise BackendUnavailableError(
                f"the {self.scheme or 'sqlite'} journal backend is unavailable here: {exc}"
            ) from exc
        backend: Backend = getattr(module, class_name)
        return backend

    def open(
        self,
        read_only: bool = False,
        *,
        create: bool = True,
        synchronous: Synchronous = "FULL",
        busy_timeout_ms: int = 5000,
        journal_id: str | None = None,
    ) -> Journal:
        """The journal here, opened by its backend (``Journal.open`` says how)."""
        return self.backend().connect(
            self.text,
            read_only,
            create=create,
            synchronous=synchronous,
            busy_timeout_ms=busy_timeout_ms,
            journal_id=journal_id,
        )

    def watch(self, node_id: str | None = None) -> WakeUps:
        """This journal's change source: wake-ups from its backend (a file watcher on the
        folder of a SQLite file, ``LISTEN`` on a server), even while it does not exist.
        ``node_id``: a node's, woken only by commits that may concern it (``Journal.watch``)."""
        return self.backend().wakeups(self.text, node_id)


Location = str | os.PathLike[str] | JournalLocation


def location_text(location: object) -> str:
    """A location as text; anything else is refused as input (typed, never a TypeError).

    Also refused, before anything is created: a URL of another scheme (``postgresql+psycopg://``,
    ``file://``) and a libpq keyword/value string (``host=db password=…``). Taken as file paths,
    ``init`` made a SQLite file or folders named by them, and errors printed them whole, with
    the password they may hold; the refusal names neither."""
    text = os.fspath(location) if isinstance(location, str | os.PathLike) else None
    if not isinstance(text, str) or not text or "\x00" in text:
        raise InvalidInputError(
            "a journal location is a non-empty file path or postgresql:// URL, without NUL"
        )
    scheme = re.match(_URL_SCHEME, text)
    if scheme and scheme[1].lower() not in BACKENDS:
        raise InvalidInputError(
            f"a {scheme[1]}:// URL is not a journal location: a journal is a file path or a"
            " postgresql:// URL (postgresql://user@host:port/dbname)"
        )
    keyword = re.match(_LIBPQ_KEYWORD, text)
    if keyword and keyword[1].lower() in LIBPQ_OPTIONS:
        raise InvalidInputError(
            "a keyword/value connection string is not a journal location: write it as a"
            " postgresql:// URL (postgresql://user@host:port/dbname; a password in ~/.pgpass"
            " or $PGPASSWORD); a file whose name starts so: write ./ before it"
        )
    return text


def _chosen_state_dir(override: str | os.PathLike[str] | None) -> Path | None:
    chosen = override or os.environ.get(STATE_DIR_ENV)
    return Path(os.fspath(chosen)).absolute() if chosen else None


def _sqlite_node_dir(journal: Path, node_id: str) -> Path:
    return journal.parent / "nodes" / file_name(node_id)


def resolve_location(location: Location) -> str | Path:
    """A journal location made canonical once: a file's real path, a server's URL as given
    (for the dashboard's follower, which still tells them apart by type)."""
    where = JournalLocation.of(location)
    return where.text if where.is_server else where.path
