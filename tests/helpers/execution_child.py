"""A separate process that runs Execution commands, for the cross-process tests.

    python tests/helpers/execution_child.py JOURNAL SPEC_JSON

SPEC: {"commands": [{"op": "claim", "args": {...}}, ...],
       "pause": null | "before-commit" | "after-commit",   # SIGSTOP itself at that boundary
       "wait_go": bool,        # read one line from stdin before the first command
       "hang": bool,           # after reporting, sleep until killed (a silent worker)
       "announce_begin": bool, # print {"begin": true} as the first transaction is about to start
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
from collections.abc import Callable

from store.errors import RefineError
from store.journal.sqlite import Journal
from store.model.execution import Execution


def _trace(spec: dict[str, object]) -> Callable[[str], None]:
    """A statement hook: announce the first BEGIN, or stop just before COMMIT."""
    seen: set[str] = set()

    def hook(statement: str) -> None:
        word = statement.strip().upper()
        if word.startswith("BEGIN") and spec.get("announce_begin") and "begin" not in seen:
            seen.add("begin")
            print(json.dumps({"begin": True}), flush=True)
        if word == "COMMIT" and spec.get("pause") == "before-commit" and "commit" not in seen:
            seen.add("commit")
            os.kill(os.getpid(), signal.SIGSTOP)

    return hook


def main() -> None:
    path, spec = sys.argv[1], json.loads(sys.argv[2])
    journal = Journal.open(path, busy_timeout_ms=spec.get("busy_timeout_ms", 10_000))
    ex = Execution(journal)
    if spec.get("pause") == "before-commit" or spec.get("announce_begin"):
        journal._connection().set_trace_callback(_trace(spec))
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
