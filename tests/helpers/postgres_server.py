"""A real PostgreSQL server for tests: Debian's package, a temp dir, a free loopback port.

PostgreSQL refuses to run as root, so as root every server command runs as the ``postgres``
user (``runuser``) and the temp dir belongs to it. Host connections need a password (scram), so
the tests can check that a password is never printed and that a wrong one is refused in type.
``$REFINE_TEST_POSTGRES_URL`` (a superuser's URL) points the tests at an existing server instead;
such a server cannot be stopped or restarted by the tests.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import glob
import itertools
import os
import shutil
import socket
import subprocess
import tempfile
import urllib.parse
from pathlib import Path

import psycopg
import psycopg.sql

PASSWORD = "pw-Xq7-never-printed"  # tests assert this text never appears in any output
TEMPLATE = "refine_test_template"
_names = itertools.count(1)
_prefetcher = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="pg-prefetch")


class ServerUnavailable(RuntimeError):
    """No PostgreSQL server could be started or reached; the message says why."""


def pg_bin() -> Path | None:
    """The newest installed PostgreSQL's bin folder (Debian layout), or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=_major)
    return Path(found[-1]).parent if found else None


def _major(path: str) -> int:
    try:
        return int(Path(path).parts[-3])
    except ValueError:
        return 0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PostgresServer:
    """A server the tests own (``owned``) or an existing one named by a URL."""

    listen = "127.0.0.1"  # where an owned server listens (a test host's address: host_postgres)
    prefetch = True  # make the next database in the background (see create_database)

    def __init__(self, base_url: str, *, root: Path | None = None, bin_dir: Path | None = None):
        self.base_url = base_url
        self.root = root
        self.bin_dir = bin_dir
        self.owned = root is not None
        self.prefix = f"rt{os.getpid()}_"
        self._spare: concurrent.futures.Future[str] | None = None  # the next fresh database

    # --- URLs and databases ------------------------------------------------------------------

    def url(
        self, dbname: str = "postgres", *, user: str | None = None, password: str | None = None
    ) -> str:
        """The base URL with another database (and optionally another role and password)."""
        parts = urllib.parse.urlsplit(self.base_url)
        netloc = parts.netloc
        if user is not None:
            host = netloc.rsplit("@", 1)[-1]
            auth = urllib.parse.quote(user, safe="")
            if password is not None:
                auth += ":" + urllib.parse.quote(password, safe="")
            netloc = f"{auth}@{host}"
        return urllib.parse.urlunsplit((parts.scheme, netloc, "/" + dbname, parts.query, ""))

    def url_with_userinfo(self, dbname: str, userinfo: str, query: str = "") -> str:
        """A URL to this server whose user info and query are ``userinfo`` and ``query`` verbatim
        (not percent-encoded): how an operator may write them."""
        host = urllib.parse.urlsplit(self.base_url).netloc.rsplit("@", 1)[-1]
        auth = f"{userinfo}@" if userinfo else ""
        return f"postgresql://{auth}{host}/{dbname}{'?' + query if query else ''}"

    def create_login(self, name: str, password: str) -> None:
        """A superuser role that logs in with ``password`` (any text: quoted as SQL)."""
        with self.admin() as conn:
            conn.execute(
                psycopg.sql.SQL("CREATE ROLE {} SUPERUSER LOGIN PASSWORD {}").format(
                    psycopg.sql.Identifier(name), psycopg.sql.Literal(password)
                )
            )

    def drop_login(self, name: str) -> None:
        with self.admin() as conn:
            conn.execute(
                psycopg.sql.SQL("DROP ROLE IF EXISTS {}").format(psycopg.sql.Identifier(name))
            )

    def admin(self, dbname: str = "postgres") -> psycopg.Connection:
        return psycopg.connect(self.url(dbname), autocommit=True, connect_timeout=10)

    def create_database(self) -> str:
        """A fresh, empty database copied from the prepared template; returns its URL.

        On a server the tests own, the next one is made meanwhile in a thread: a CREATE
        DATABASE takes ≈ 0.2-0.4 s, which the test that gets this one overlaps."""
        spare, self._spare = self._spare, None
        name = None
        if spare is not None:
            with contextlib.suppress(Exception):  # made while the server was down, say
                name = spare.result()
        if name is None:
            name = self._new_database()
        if self.prefetch and self.owned:
            self._spare = _prefetcher.submit(self._new_database)
        return self.url(name)

    def _new_database(self) -> str:
        name = f"{self.prefix}{next(_names)}"
        with self.admin() as conn:
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE {TEMPLATE}')
        return name

    def settle(self) -> None:
        """Let a database being made in the background finish (before the server stops)."""
        if self._spare is not None:
            with contextlib.suppress(Exception):
                self._spare.result()

    def drop_database(self, url: str) -> None:
        name = urllib.parse.urlsplit(url).path.lstrip("/")
        with self.admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def prepare(self) -> None:
        with self.admin() as conn:
            exists = conn.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", (TEMPLATE,)
            ).fetchone()
            if not exists:
                conn.execute(f"CREATE DATABASE {TEMPLATE} TEMPLATE template0")

    # --- the server process (owned servers only) ---------------------------------------------

    @classmethod
    def start_new(cls, *, fsync: bool = False, max_connections: int = 200) -> PostgresServer:
        """initdb a fresh cluster in a temp dir and start it; ServerUnavailable if impossible.
        ``max_connections``: the server's limit (a small one: a fleet at the server's limit)."""
        bin_dir = pg_bin()
        if bin_dir is None:
            raise ServerUnavailable("PostgreSQL is not installed (no /usr/lib/postgresql/*/bin)")
        server = cls("", root=Path(tempfile.mkdtemp(prefix="refine-pg-")), bin_dir=bin_dir)
        server.create_cluster(fsync=fsync, max_connections=max_connections)
        return server

    def create_cluster(
        self, *, fsync: bool = False, allow: str | None = None, max_connections: int = 200
    ) -> None:
        """initdb in ``self.root``, start, prepare; ``allow``: a CIDR also let in by password."""
        root = self.root
        assert root is not None
        (root / "sock").mkdir()
        (root / "pwfile").write_text(PASSWORD + "\n")
        if os.geteuid() == 0:
            shutil.chown(root, "postgres", "postgres")
            for child in root.iterdir():
                shutil.chown(child, "postgres", "postgres")
        self._run(
            "initdb", "-D", str(root / "data"), "-U", "postgres", "--pwfile", str(root / "pwfile"),
            "--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8", "--no-sync",
        )  # fmt: skip
        if allow:
            with open(root / "data" / "pg_hba.conf", "a") as hba:
                hba.write(f"host all all {allow} scram-sha-256\n")
        settings = [
            "-k", str(root / "sock"), "-c", f"listen_addresses={self.listen}",
            "-c", f"max_connections={max_connections}", "-c", "fsync=" + ("on" if fsync else "off"),
        ]  # fmt: skip
        (root / "options").write_text("\n".join(settings))
        self.start()
        self.prepare()

    def start(self) -> None:
        """Start (again) on a free port; the URL follows the port."""
        assert self.root is not None, "only a server the tests started can be started"
        settings = (self.root / "options").read_text().split("\n")
        for _ in range(5):
            port = free_port()
            try:
                self._run(
                    "pg_ctl", "-D", str(self.root / "data"), "-l", str(self.root / "log"),
                    "-w", "-t", "60", "-o", " ".join([*settings, "-p", str(port)]), "start",
                )  # fmt: skip
            except ServerUnavailable:
                continue
            self.port = port
            pw = urllib.parse.quote(PASSWORD, safe="")
            self.base_url = f"postgresql://postgres:{pw}@{self.listen}:{port}/postgres"
            return
        raise ServerUnavailable(f"pg_ctl start failed: {self.log_tail()}")

    def start_on_same_port(self) -> None:
        """Start again where clients expect it (after :meth:`stop`)."""
        assert self.root is not None
        settings = (self.root / "options").read_text().split("\n")
        self._run(
            "pg_ctl", "-D", str(self.root / "data"), "-l", str(self.root / "log"),
            "-w", "-t", "60", "-o", " ".join([*settings, "-p", str(self.port)]), "start",
        )  # fmt: skip

    def stop(self, mode: str = "fast") -> None:
        """``pg_ctl stop -m MODE``: ``immediate`` is a crash (recovery on the next start)."""
        assert self.root is not None, "only a server the tests started can be stopped"
        self.settle()
        self._run("pg_ctl", "-D", str(self.root / "data"), "-w", "-m", mode, "stop")

    def restart(self, mode: str = "fast") -> None:
        """``pg_ctl restart -m MODE``: down and up again on the same port."""
        assert self.root is not None
        self.settle()
        settings = (self.root / "options").read_text().split("\n")
        self._run(
            "pg_ctl", "-D", str(self.root / "data"), "-l", str(self.root / "log"), "-w", "-t", "60",
            "-m", mode, "-o", " ".join([*settings, "-p", str(self.port)]), "restart",
        )  # fmt: skip

    def destroy(self) -> None:
        if self.root is None:
            return
        with contextlib.suppress(ServerUnavailable):
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)
        self.root = None

    def log_tail(self, lines: int = 10) -> str:
        if self.root is None or not (self.root / "log").exists():
            return ""
        return " | ".join((self.root / "log").read_text(errors="replace").splitlines()[-lines:])

    def command(self, argv: list[str]) -> list[str]:
        """How a server tool runs: as ``postgres`` when we are root (PostgreSQL refuses root)."""
        return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv

    def _run(self, tool: str, *args: str) -> None:
        assert self.bin_dir is not None
        argv = self.command([str(self.bin_dir / tool), *args])
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd="/")
        if done.returncode != 0:
            raise ServerUnavailable(f"{tool} failed: {(done.stderr or done.stdout).strip()}")


def server_from_environment() -> PostgresServer:
    """The server named by ``$REFINE_TEST_POSTGRES_URL``, else a fresh one started here."""
    url = os.environ.get("REFINE_TEST_POSTGRES_URL")
    if not url:
        return PostgresServer.start_new()
    server = PostgresServer(url)
    try:
        server.prepare()
    except psycopg.Error as exc:
        raise ServerUnavailable(f"$REFINE_TEST_POSTGRES_URL unreachable: {exc}") from exc
    return server
