"""Shared fixtures: journals on every backend, one real PostgreSQL server per test session.

A backend registers in ``JOURNAL_BACKENDS`` with a generator that yields a fresh, empty journal
location for one test and cleans up after it; every test using ``journal``,
``journal_factory`` or ``journal_location`` then runs once per registered backend (the contract
suite), the way eventsourcing reuses one recorder test case per backend.
"""

from __future__ import annotations

import contextlib
import os
import signal
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from store.journal.api import Journal
from tests.helpers.node_env import Env
from tests.helpers.postgres_server import (
    PostgresServer,
    ServerUnavailable,
    server_from_environment,
)

_server: PostgresServer | None = None
_server_error: str | None = None


def _unavailable(reason: str) -> None:
    """Fail where PostgreSQL is required (CI), skip with the reason elsewhere."""
    if os.environ.get("REFINE_REQUIRE_POSTGRES") == "1":
        pytest.fail(f"PostgreSQL required but unavailable: {reason}", pytrace=False)
    pytest.skip(f"no PostgreSQL server: {reason}")


@contextlib.contextmanager
def own_server(max_connections: int) -> Iterator[PostgresServer]:
    """A server of a test module's own (a connection limit of its own), destroyed after."""
    try:
        server = PostgresServer.start_new(max_connections=max_connections)
    except ServerUnavailable as exc:
        _unavailable(str(exc))
    try:
        yield server
    finally:
        server.destroy()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """The session's server (started once, on first use; stopped at the end)."""
    global _server, _server_error
    if _server is None and _server_error is None:
        try:
            _server = server_from_environment()
        except ServerUnavailable as exc:
            _server_error = str(exc)
    if _server is None:
        _unavailable(_server_error or "unknown")
    assert _server is not None
    yield _server
    _server.destroy()


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    """A fresh, empty database on the session's server (dropped after the test)."""
    url = postgres_server.create_database()
    yield url
    postgres_server.drop_database(url)


# (request, tmp_path) -> yields a location; ``request.getfixturevalue`` reaches session fixtures
# such as a database server.
LocationFactory = Callable[[pytest.FixtureRequest, Path], Iterator[str]]
JournalFactory = Callable[..., Journal]


def sqlite_location(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield str(tmp_path / "journal.db")


def postgres_location(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh database (a template copy) on the session's server, dropped after the test.

    The password also goes by ``$PGPASSWORD`` (libpq's convention), so a test can hand a
    journal's printable location (``journal.location``, no password) to a child process; node
    files go under the test's own ``$XDG_STATE_HOME``."""
    server: PostgresServer = request.getfixturevalue("postgres_server")
    monkeypatch: pytest.MonkeyPatch = request.getfixturevalue("monkeypatch")
    url = server.create_database()
    monkeypatch.setenv("PGPASSWORD", urllib.parse.urlsplit(url).password or "")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))
    yield url
    server.drop_database(url)


JOURNAL_BACKENDS: dict[str, LocationFactory] = {
    "sqlite": sqlite_location,
    "postgresql": postgres_location,
}


@pytest.fixture(params=list(JOURNAL_BACKENDS))
def backend(request: pytest.FixtureRequest) -> str:
    """The backend a contract test runs on (one run per entry of ``JOURNAL_BACKENDS``)."""
    return str(request.param)


@pytest.fixture
def journal_location(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty journal location on ``backend``."""
    yield from JOURNAL_BACKENDS[backend](request, tmp_path)


@pytest.fixture
def journal_factory(journal_location: str) -> Iterator[JournalFactory]:
    """Opens handles on the test's journal (``factory(read_only=False, **options)``); every
    handle opened is closed at the end."""
    opened: list[Journal] = []

    def open_journal(read_only: bool = False, **options: object) -> Journal:
        journal = Journal.open(journal_location, read_only, **options)  # type: ignore[arg-type]
        opened.append(journal)
        return journal

    yield open_journal
    for journal in opened:
        journal.close()


@pytest.fixture
def journal(journal_factory: JournalFactory) -> Journal:
    """A writable journal on the test's backend (durability NORMAL: tests don't cut power)."""
    return journal_factory(synchronous="NORMAL")


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    """A journal in tmp_path for node tests; every process the test started is killed after."""
    e = Env(tmp_path)
    try:
        yield e
    finally:
        e.cleanup()


@pytest.fixture
def journal_path(tmp_path: Path) -> Path:
    """The demo's journal (no live goals, so nothing moves) for node n1, for dashboard tests."""
    from refine_tui.demo import populate  # only the tests that use it import the dashboard

    return populate(tmp_path / "journal.db", node="n1", live=False)


TIERS = ("unit", "integration", "system")


def pytest_configure(config: pytest.Config) -> None:
    """Processes the tests start take SIGINT as a terminal's Ctrl-C, however pytest was started:
    a shell's background job ignores SIGINT and its children inherit that (an exec keeps an
    ignored signal ignored), so `refine events --follow` and `refine logs -f` would not end on
    the SIGINT their tests send. A handler of ours is reset to the default at a child's exec."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Each test is marked by its tier's folder, so ``-m unit`` (or the path) selects a tier."""
    for item in items:
        tier = next((t for t in TIERS if f"/tests/{t}/" in str(item.path)), None)
        if tier is not None:
            item.add_marker(tier)
