"""The README's PostgreSQL walk-through, pasted: its steps run in order against a real server.

Step 1's configuration lines belong to Debian's packaged cluster (`/etc/postgresql/15/main`,
`pg_ctlcluster`), which the tests do not own: the test checks they use it and leave no server on
the terminal, and runs the step's SQL as the server's superuser. Every later line runs as
written in bash, with `db:5432` pointing at the test server.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

from tests.helpers.postgres_server import PostgresServer

ROOT = Path(__file__).resolve().parents[2]


def steps() -> list[str]:
    """The bash blocks of the README's "Several machines" section, in order."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Several machines") :]
    section = section[: section.index("\n## ", 1)]
    return re.findall(r"```bash\n(.*?)```", section, flags=re.S)


def sql_of(step: str) -> list[str]:
    """The SQL a step hands to psql as the postgres user (``-c "..."`` or a here-document)."""
    found = re.findall(r'psql -c "(.*?)"', step)
    here = re.search(r"<<'SQL'\n(.*?)\nSQL", step, flags=re.S)
    if here:
        found += [s.strip() for s in here.group(1).split(";") if s.strip()]
    return found


def test_the_postgresql_walk_through_runs_in_order(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    server, journal, viewer, nodes = steps()
    assert "pg_ctlcluster 15 main restart" in server and "/etc/postgresql/15/main/" in server
    assert "pg_ctl " not in server  # pg_ctl -D … would keep the server on the terminal
    host = postgres_server.url().split("@")[-1].split("/")[0]
    with postgres_server.admin() as admin:
        admin.execute("DROP DATABASE IF EXISTS refine")
        admin.execute("DROP ROLE IF EXISTS refine_viewer")
        admin.execute("DROP ROLE IF EXISTS refine")
        for sql in sql_of(server):
            admin.execute(sql)
    try:
        pgpass = tmp_path / "pgpass"  # the README's ~/.pgpass: a line per role
        address, port = host.rsplit(":", 1)
        pgpass.write_text(
            f"{address}:{port}:refine:refine:change-me\n"
            f"{address}:{port}:refine:refine_viewer:change-me-too\n"
        )
        pgpass.chmod(0o600)
        env = {
            **os.environ,
            "PGPASSFILE": str(pgpass),
            "XDG_STATE_HOME": str(tmp_path / "state"),
            "REFINE_OPERATOR": "dana",
        }
        for name in ("REFINE_JOURNAL", "PGPASSWORD"):
            env.pop(name, None)
        pasted = lambda step: step.replace("db:5432", host)  # noqa: E731
        first = [line for line in pasted(journal).splitlines() if "refine copy" not in line]
        done = subprocess.run(
            ["bash", "-e", "-c", "\n".join(first)], env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        with postgres_server.admin("refine") as admin:
            for sql in sql_of(viewer):
                admin.execute(sql)
        lines = pasted(nodes).splitlines()
        watching = [line for line in lines if line.startswith("refine tui")]
        read_only = [line for line in lines if "refine tui --read-only" in line]
        script = [
            line for line in lines if not line.startswith("refine tui") and line not in read_only
        ]
        script += [
            line.replace("refine tui --read-only", "refine goals --json") for line in read_only
        ]
        script.insert(0, "trap 'kill $(jobs -p) 2>/dev/null; wait' EXIT")  # the nodes end
        done = subprocess.run(
            ["bash", "-e", "-m", "-c", "\n".join(script)],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert watching, "the walk-through opens a dashboard"
        assert done.returncode == 0, done.stderr
        assert "test-b completed" in done.stdout
        viewed = json.loads(done.stdout[done.stdout.index("[") :])
        assert {g["goal_id"]: g["status"] for g in viewed}["test-b"] == "completed"
        assert "change-me" not in done.stdout + done.stderr
    finally:
        with postgres_server.admin() as admin:
            admin.execute("DROP DATABASE IF EXISTS refine WITH (FORCE)")
            admin.execute("DROP ROLE IF EXISTS refine_viewer")
            admin.execute("DROP ROLE IF EXISTS refine")
