"""A separate process running journal commands on PostgreSQL, for the cross-process tests.

    python tests/helpers/pg_journal_child.py URL SPEC_JSON

SPEC: {"commands": [{"command_id": str, "expected": {aggregate_id: version|null}}, ...],
       "pause": null | "before-commit" | "after-commit",  # SIGSTOP itself at that boundary
       "wait_go": bool}                                   # read a line from stdin first
Each command bumps every aggregate it names (creating it at version 1). "before-commit" stops
inside the first command's transaction with every write done; "after-commit" right after it
returned. Prints {"ready": pid}, then one line per command: {"ok": replayed} or {"error": code}.
"""

from __future__ import annotations

import json
import os
import signal
import sys

import store.journal.postgres as journal_postgres
from store.errors import RefineError
from store.journal.core import Change
from store.journal.postgres import PostgresJournal


def bump(loaded):  # type: ignore[no-untyped-def]
    return [
        Change(agg, {"n": (s.version if s else 0) + 1}, [("bumped", {"agg": agg})])
        for agg, s in loaded.items()
    ]


class _Uncommitted:
    """A command cursor that runs a query string without its final COMMIT, then SIGSTOPs."""

    def __init__(self, cur):  # type: ignore[no-untyped-def]
        self.cur = cur

    def execute(self, query, params=None):  # type: ignore[no-untyped-def]
        self.cur.execute(query.removesuffix("; COMMIT"), params)
        os.kill(os.getpid(), signal.SIGSTOP)  # every row written, COMMIT not sent

    def fetchone(self):  # type: ignore[no-untyped-def]
        return self.cur.fetchone()


def main() -> None:
    url, spec = sys.argv[1], json.loads(sys.argv[2])
    journal = PostgresJournal.connect(url)
    if spec.get("pause") == "before-commit":
        write = journal_postgres._PostgresCommand.write

        def paused(self, writes):  # type: ignore[no-untyped-def]
            # The writes' query string ends with COMMIT: run it without, stop, then commit.
            cur, self.cur = self.cur, _Uncommitted(self.cur)
            try:
                sequences = write(self, writes)
            finally:
                self.cur = cur
            cur.execute("COMMIT")
            return sequences

        journal_postgres._PostgresCommand.write = paused  # type: ignore[method-assign]
    print(json.dumps({"ready": os.getpid()}), flush=True)
    if spec.get("wait_go"):
        sys.stdin.readline()
    for index, command in enumerate(spec["commands"]):
        try:
            out = journal.execute(
                command_id=command["command_id"],
                payload={"op": "bump"},
                expected=command["expected"],
                decide=bump,
            )
            line: dict[str, object] = {"ok": out.replayed}
        except RefineError as exc:
            line = {"error": exc.code}
        if index == 0 and spec.get("pause") == "after-commit":
            os.kill(os.getpid(), signal.SIGSTOP)
        print(json.dumps(line), flush=True)
    journal.close()


if __name__ == "__main__":
    main()
