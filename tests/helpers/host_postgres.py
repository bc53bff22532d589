"""The tests' PostgreSQL server (helpers/postgres_server.py) run inside a test host (hosts.py).

``HostPostgres.start_in(hosts["server"], allow=hosts.subnet)``: the same cluster, start, stop,
restart and database code as the loopback server, but every server tool runs inside the host
(as ``postgres``), the server listens on the host's address only and lets the subnet in by
password. The test process itself reaches it (``admin()``, ``create_database()``) from inside
the host's network, never through the root namespace.

Nodes get ``client_url(url)`` (no password in it) and ``client_env`` (``PGPASSWORD``), so tests
exercise both and can check the password is never printed. ``restart()`` is ``pg_ctl restart``;
``stop("immediate")`` then ``start_on_same_port()`` is a crash and recovery.
"""

from __future__ import annotations

import tempfile
import urllib.parse
from pathlib import Path

import psycopg

from tests.helpers.hosts import Host
from tests.helpers.postgres_server import PASSWORD, PostgresServer, ServerUnavailable, pg_bin

__all__ = ["PASSWORD", "HostPostgres", "ServerUnavailable"]


class HostPostgres(PostgresServer):
    """A server the tests own, inside ``host``; ``destroy()`` stops it and removes its files."""

    prefetch = False  # its tests stop and restart it mid-test: nothing of ours in flight then

    def __init__(self, base_url: str, *, root: Path, bin_dir: Path, host: Host) -> None:
        super().__init__(base_url, root=root, bin_dir=bin_dir)
        self.host = host
        self.listen = host.addr

    @classmethod
    def start_in(cls, host: Host, *, allow: str) -> HostPostgres:
        """A fresh cluster on ``host.addr``; clients from ``allow`` (a CIDR) need the password."""
        bin_dir = pg_bin()
        if bin_dir is None:
            raise ServerUnavailable("PostgreSQL is not installed (no /usr/lib/postgresql/*/bin)")
        root = Path(tempfile.mkdtemp(prefix="refine-hostpg-"))
        server = cls("", root=root, bin_dir=bin_dir, host=host)
        try:
            server.create_cluster(allow=allow)
        except BaseException:
            server.destroy()
            raise
        return server

    @property
    def client_env(self) -> dict[str, str]:
        return {"PGPASSWORD": PASSWORD, "PGCONNECT_TIMEOUT": "10"}

    def client_url(self, url: str | None = None) -> str:
        """``url`` (default: the server's own database) without its password."""
        dbname = urllib.parse.urlsplit(url or self.base_url).path.lstrip("/")
        return self.url(dbname, user="postgres")

    def command(self, argv: list[str]) -> list[str]:
        return self.host.command(argv, user="postgres", cwd="/")

    def admin(self, dbname: str = "postgres") -> psycopg.Connection:
        # The socket is made inside the host's network and stays there.
        with self.host.net_entered():
            return psycopg.connect(self.url(dbname), autocommit=True, connect_timeout=10)
