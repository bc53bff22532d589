"""Shared fixtures: one real PostgreSQL server per test session, a fresh database per test."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from helpers.postgres_server import PostgresServer, ServerUnavailable, server_from_environment

_server: PostgresServer | None = None
_server_error: str | None = None


def _unavailable(reason: str) -> None:
    """Fail where PostgreSQL is required (CI), skip with the reason elsewhere."""
    if os.environ.get("REFINE_REQUIRE_POSTGRES") == "1":
        pytest.fail(f"PostgreSQL required but unavailable: {reason}", pytrace=False)
    pytest.skip(f"no PostgreSQL server: {reason}")


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
