"""The test PostgreSQL server itself: fresh databases, and a restart the fault tests rely on."""

from __future__ import annotations

import psycopg
import pytest

from tests.helpers.postgres_server import PostgresServer


def test_each_test_gets_a_fresh_empty_database(postgres_url: str) -> None:
    with psycopg.connect(postgres_url) as conn:
        tables = conn.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'"
        ).fetchone()
        assert tables == (0,)


def test_the_server_can_be_stopped_and_started_again(
    postgres_server: PostgresServer, postgres_url: str
) -> None:
    if not postgres_server.owned:
        pytest.skip("an external server ($REFINE_TEST_POSTGRES_URL) is not restarted by tests")
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (x int)")
        conn.execute("INSERT INTO t VALUES (1)")
    postgres_server.stop("immediate")
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(postgres_url, connect_timeout=2)
    postgres_server.start_on_same_port()
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT x FROM t").fetchall() == [(1,)]
