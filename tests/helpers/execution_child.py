"""A separate process that runs Execution commands, for the cross-process tests.

    python tests/helpers/execution_child.py JOURNAL SPEC_JSON

SPEC: {"commands": [{"op": "claim", "args": {...}}, ...],
       "pause": null | "before-commit" | "after-commit",   # SIGSTOP itself at that boundary
       "wait_go": bool,        # read one line from stdin before the first command
       "hang": bool,           # after reporting, sleep until killed (a silent worker)
       "busy_timeout_ms": int}

"before-commit" stops the process inside the first command's transaction, when SQLite is about
to run COMMIT (every write done, nothing committed); "after-commit" stops it right after the
first command returned, before anything is reported. The parent then SIGKILLs it.
Prints one JSON line per command: {"ok": run_json, "replayed": bool} or {"error": code}.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

from store.errors import RefineError
from store.execution import Execution
from store.journal import Journal


def _stop_before_commit(statement: str) -> None:
    if statement.strip().upper() == "COMMIT":
        os.kill(os.getpid(), signal.SIGSTOP)


def main() -> None:
    path, spec = sys.argv[1], json.loads(sys.argv[2])
    journal = Journal.open(path, busy_timeout_ms=spec.get("busy_timeout_ms", 10_000))
    ex = Execution(journal)
    if spec.get("pause") == "before-commit":
        journal._connection().set_trace_callback(_stop_before_commit)
    print(json.dumps({"ready": os.getpid()}), flush=True)
    if spec.get("wait_go"):
        sys.stdin.readline()
    for index, command in enumerate(spec["commands"]):
        try:
            result = getattr(ex, command["op"])(**command["args"])
            line = {"ok": result.run.to_json(), "replayed": result.replayed}
        except RefineError as exc:
            line = {"error": exc.code}
        if index == 0 and spec.get("pause") == "after-commit":
            os.kill(os.getpid(), signal.SIGSTOP)
        print(json.dumps(line), flush=True)
    if spec.get("hang"):
        while True:
            time.sleep(60)
    journal.close()


if __name__ == "__main__":
    main()
