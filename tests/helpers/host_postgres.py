"""A real PostgreSQL server inside a test host (tests/helpers/hosts.py), reached by TCP + password.

``HostPostgres.start_new(hosts["server"], allow=hosts.subnet)`` initdb's a cluster in a temp dir
owned by ``postgres`` (PostgreSQL refuses root), listens on the host's address only, lets the
subnet in with scram passwords, and creates role and database ``refine``. Clients on the other
hosts use ``server.url`` (no password in it) with ``server.client_env`` (``PGPASSWORD``), so tests
can check the password is never printed. ``restart()``, ``stop("immediate")`` + ``start()``.

Method names follow tests/helpers/postgres_server.py (the loopback fixture); the only
differences are where commands run (inside the host) and where the server listens.
"""

from __future__ import annotations

import contextlib
import glob
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.helpers.hosts import Host

PASSWORD = "pw-Hn4-never-printed"  # tests assert this text never appears in any output
ROLE = DATABASE = "refine"
PORT = 5432  # the server host has its own network: the standard port is free there


class ServerUnavailable(RuntimeError):
    """The server could not be started or stopped; the message says why."""


def pg_bin() -> Path:
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4])
    )
    if not found:
        raise ServerUnavailable("PostgreSQL is not installed (no /usr/lib/postgresql/*/bin)")
    return Path(found[-1]).parent


class HostPostgres:
    """One cluster in one host; ``destroy()`` stops it and removes its files."""

    def __init__(self, host: Host, root: Path, bin_dir: Path) -> None:
        self.host, self.root, self.bin_dir = host, root, bin_dir
        self.data = root / "data"
        self.url = f"postgresql://{ROLE}@{host.addr}:{PORT}/{DATABASE}"
        self.client_env = {"PGPASSWORD": PASSWORD, "PGCONNECT_TIMEOUT": "10"}

    @classmethod
    def start_new(cls, host: Host, *, allow: str) -> HostPostgres:
        """A fresh cluster on ``host.addr``; clients from ``allow`` (a CIDR) need the password."""
        root = Path(tempfile.mkdtemp(prefix="refine-hostpg-"))
        server = cls(host, root, pg_bin())
        try:
            (root / "sock").mkdir()
            (root / "pwfile").write_text(PASSWORD + "\n")
            for path in (root, root / "sock", root / "pwfile"):
                shutil.chown(path, "postgres", "postgres")
            server._run(
                "initdb", "-D", str(server.data), "-U", "postgres",
                "--pwfile", str(root / "pwfile"),
                "--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8", "--no-sync",
            )  # fmt: skip
            (root / "pwfile").unlink()
            with open(server.data / "pg_hba.conf", "a") as hba:
                hba.write(f"host all all {allow} scram-sha-256\n")
            with open(server.data / "postgresql.conf", "a") as conf:
                conf.write(
                    f"listen_addresses = '{host.addr}'\nport = {PORT}\n"
                    f"unix_socket_directories = '{root / 'sock'}'\n"
                    "fsync = off\nmax_connections = 200\n"
                )
            server.start()
            server.psql(f"CREATE ROLE {ROLE} LOGIN PASSWORD '{PASSWORD}'")
            server.psql(f"CREATE DATABASE {DATABASE} OWNER {ROLE}")
        except BaseException:
            server.destroy()
            raise
        return server

    def start(self) -> None:
        self._run(
            "pg_ctl", "-D", str(self.data), "-l", str(self.root / "log"), "-w", "-t", "60", "start"
        )

    def stop(self, mode: str = "fast") -> None:
        """``pg_ctl stop -m MODE``: ``immediate`` is a crash (recovery on the next start)."""
        self._run("pg_ctl", "-D", str(self.data), "-w", "-t", "60", "-m", mode, "stop")

    def restart(self, mode: str = "fast") -> None:
        """``pg_ctl restart``: same address and port, so clients reconnect to the same URL."""
        self._run(
            "pg_ctl", "-D", str(self.data), "-l", str(self.root / "log"), "-w", "-t", "60",
            "-m", mode, "restart",
        )  # fmt: skip

    def psql(self, sql: str) -> str:
        """Run SQL as the superuser over the server's Unix socket (inside the server host)."""
        return self._run(
            "psql", "-h", str(self.root / "sock"), "-U", "postgres", "-d", "postgres",
            "-X", "-v", "ON_ERROR_STOP=1", "-At", "-c", sql,
        )  # fmt: skip

    def destroy(self) -> None:
        with contextlib.suppress(ServerUnavailable, subprocess.SubprocessError):
            if (self.data / "postmaster.pid").exists():
                self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)

    def log_tail(self, lines: int = 10) -> str:
        log = self.root / "log"
        text = log.read_text(errors="replace") if log.exists() else ""
        return " | ".join(text.splitlines()[-lines:])

    def _run(self, tool: str, *args: str) -> str:
        done = self.host.run(
            [str(self.bin_dir / tool), *args], user="postgres", cwd="/", timeout=120
        )
        if done.returncode != 0:
            why = (done.stderr or done.stdout).strip()
            raise ServerUnavailable(f"{tool} failed: {why} {self.log_tail(5)}")
        return done.stdout
