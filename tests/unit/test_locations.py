"""A journal location is read once (``JournalLocation``): a file or a server, what it shows,
where its node files live, which backend opens and watches it. No caller sniffs types or URL
prefixes (``isinstance(location, str)``, ``is_postgres_url``) to tell them apart."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import store
from store.errors import InvalidInputError
from store.journal import api
from store.journal.locations import STATE_DIR_ENV, UNPARSABLE, JournalLocation, resolve_location
from store.journal.url import redact

URL = "postgresql://ann:s3cret@db.example:5432/refine?sslmode=require"


@pytest.fixture(autouse=True)
def no_state_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(STATE_DIR_ENV, raising=False)


def test_a_server_url_is_a_server_shown_without_its_password() -> None:
    where = JournalLocation(URL)
    assert where.is_server and where.scheme == "postgresql"
    assert where.text == URL  # what the backend connects with: whole
    shown = "postgresql://ann@db.example:5432/refine?sslmode=require"
    assert where.printable == str(where) == shown
    assert "s3cret" not in repr(where) and "s3cret" not in f"{where}"
    assert not where.missing_file()
    with pytest.raises(ValueError, match="no file"):
        _ = where.path
    assert JournalLocation("postgres://h/db").is_server


def test_an_upper_case_scheme_is_still_a_server_and_never_shows_its_password() -> None:
    where = JournalLocation("POSTGRESQL://ann:s3cret@db/refine")
    assert where.is_server  # its backend refuses it as bad input, not a file named so
    assert where.printable == UNPARSABLE
    assert redact("PostgreSQL://ann:s3cret@db/refine") == UNPARSABLE


def test_a_path_is_a_file_resolved_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = tmp_path / "real" / "journal.db"
    real.parent.mkdir()
    (tmp_path / "link.db").symlink_to(real)
    monkeypatch.chdir(tmp_path)

    where = JournalLocation("./link.db")
    assert not where.is_server and where.scheme == ""
    assert where.path == real and where.text == str(real)
    assert where.printable == "link.db"  # as given (a Path's spelling)
    assert where.missing_file()
    real.write_bytes(b"")
    assert not where.missing_file()
    assert resolve_location("link.db") == real
    assert resolve_location(URL) == URL
    assert JournalLocation("a/b://c").path == tmp_path / "a" / "b:" / "c"  # no backend's scheme


def test_of_keeps_a_location_and_bad_input_is_refused() -> None:
    where = JournalLocation(URL)
    assert JournalLocation.of(where) is where
    for bad in ("", "a\x00b", 3, None):
        with pytest.raises(InvalidInputError):
            JournalLocation.of(bad)  # type: ignore[arg-type]


def test_state_dirs_derive_from_the_location(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    file = JournalLocation(tmp_path / "journal.db")
    assert file.state_dir("n/1", "j-1") == tmp_path / "nodes" / "n%2F1" / "j-1"
    assert file.legacy_state_dir("n/1", "j-1") == tmp_path / "nodes" / "n%2F1"
    assert file.legacy_state_dir("n1") is None  # no journal id: nothing older to read
    server = JournalLocation(URL)
    assert server.state_dir("n1", "j-1") == tmp_path / "xdg" / "refine" / "j-1" / "n1"
    assert server.legacy_state_dir("n1", "j-1") is None
    assert server.state_dir("n1", "j-1", override=tmp_path / "s") == tmp_path / "s"
    monkeypatch.setenv(STATE_DIR_ENV, str(tmp_path / "env"))
    assert file.state_dir("n1", "j-1") == tmp_path / "env"
    assert file.legacy_state_dir("n1", "j-1") is None


def test_the_backend_comes_from_the_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    from store.journal.sqlite import SqliteJournal

    assert JournalLocation("journal.db").backend() is SqliteJournal
    assert api.backend_for("journal.db") is SqliteJournal
    monkeypatch.setitem(api.BACKENDS, "other", ("store.journal.sqlite", "SqliteJournal"))
    assert JournalLocation("Other://x").is_server  # a registered scheme names a server


def test_no_module_sniffs_the_backend_from_a_type_or_a_prefix() -> None:
    """Only store.journal.locations (and url.py's own parser) read a location's text."""
    root = Path(store.__file__).parent.parent
    allowed = {"store/journal/locations.py", "store/journal/url.py"}
    # The dashboard's follower still asks isinstance(location, str): it is being rebuilt.
    allowed |= {"refine_tui/follow.py"}
    found = []
    for path in sorted([*root.glob("store/**/*.py"), *root.glob("refine_tui/**/*.py")]):
        name = path.relative_to(root).as_posix()
        if name in allowed:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Name) and node.id == "is_postgres_url":
                found.append(name)
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", None) == "isinstance"
                and any(w in ast.unparse(node.args[0]) for w in ("location", "journal_path"))
            ):
                found.append(name)
    assert found == []
