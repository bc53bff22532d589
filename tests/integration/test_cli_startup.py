"""A quick CLI: the read commands never import the dashboard stack (DESIGN §9, CLI start-up).

Nor Rich (ASCII text is laid out without it), nor asyncio (only wake-ups and `wait` need it),
nor socket (only a node without a name asks the host's), nor uuid (it loads `platform`), nor
hashlib (a write's digest uses CPython's own SHA-256, without OpenSSL), nor dataclasses and
inspect (store.records builds the records), nor signal (only a stop that reaches a process).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from refine_tui.cli import COMMANDS, build_parser, parse_quickly
from store.journal.sqlite import Journal
from store.model.goals import Goals

# Run the CLI in a fresh interpreter, then list which heavy packages it imported.
PROBE = """
import contextlib, io, sys
from refine_tui.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    code = main(["--journal", sys.argv[1], *sys.argv[2:]])
heavy = ("textual", "psutil", "rich", "asyncio", "socket", "uuid", "platform", "hashlib",
         "dataclasses", "inspect", "signal", "shutil",  # argparse's width asks shutil
         "store.journal.presence", "store.journal.copy_chain")  # a node's, a copy's
print(code, sorted({m for m in sys.modules if m in heavy or m.split(".")[0] in heavy}))
"""


@pytest.fixture
def journal(tmp_path: Path) -> Path:
    path = tmp_path / "journal.db"
    with Journal.open(path) as j:
        Goals(j).create(goal_id="g1", title="one", node_id="n1", argv=["true"])
    return path


def probe(journal: Path, command: list[str]) -> list[str]:
    """The command's exit code and the heavy packages it imported, run in a fresh interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(journal), *command],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.split()


@pytest.mark.parametrize(
    "command", [["goals"], ["goals", "--json"], ["runs"], ["show", "g1"], ["show", "g1.r1"]]
)
def test_read_commands_import_no_dashboard_process_tools_rich_or_asyncio(
    journal: Path, command: list[str]
) -> None:
    assert probe(journal, command) == ["0", "[]"]


@pytest.mark.parametrize(
    ("command", "code"),
    [
        (["--node", "n1", "stop", "g1"], "1"),  # refused: the goal is queued, nothing to stop
        (["--node", "n1", "cancel", "g1", "--reason", "r"], "0"),  # nothing was running
    ],
)
def test_stop_and_cancel_load_process_tools_only_for_a_process(
    journal: Path, command: list[str], code: str
) -> None:
    assert probe(journal, command) == [code, "[]"]


def test_the_quick_parse_knows_every_command() -> None:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert tuple(sub.choices) == COMMANDS


@pytest.mark.parametrize(
    "argv",
    [
        ["goals"],
        ["--json", "goals", "--status", "queued"],
        ["--journal", "stop", "stop", "g1"],  # a journal file named like a command
        ["--node", "n1", "--jour", "j.db", "stop", "g1", "--grace", "0"],  # an abbreviation
        ["cancel", "g1", "--reason", "stop", "--node", "n2"],
        ["goal", "add", "--title", "T", "--", "make", "cancel"],
        ["show", "g1", "--state-dir", "/tmp/s"],
        ["runs"],
        ["wait", "g1", "--status", "running,held", "--timeout", "1"],
    ],
)
def test_the_quick_parse_parses_as_the_whole_parser(argv: list[str]) -> None:
    quick = parse_quickly(argv)
    assert quick is not None
    assert vars(quick) == vars(build_parser().parse_args(argv))


@pytest.mark.parametrize(
    "argv",
    [
        ["stop", "--help"],
        ["-h", "goals"],
        ["--node", "stop", "goals"],  # "stop" is the node: only the whole parser sees `goals`
        ["stop", "--grace", "soon"],  # a mistake: the whole parser words it
        # (`stop` alone parses since stop takes goals or --status; cli.bulk refuses it, exit 2)
        ["cancel", "g1"],
        ["nothing"],
        [],
    ],
)
def test_help_mistakes_and_lookalikes_go_to_the_whole_parser(argv: list[str]) -> None:
    assert parse_quickly(argv) is None


def test_an_operator_command_id_is_a_uuid4() -> None:
    import uuid

    from store.ops.operator import uuid4_text

    texts = {uuid4_text() for _ in range(200)}
    assert len(texts) == 200
    for text in texts:
        parsed = uuid.UUID(text)
        assert (str(parsed), parsed.version, parsed.variant) == (text, 4, uuid.RFC_4122)


@pytest.mark.parametrize("text", ["", "{}", "déjà vu 日本語 🙂", "x" * 100_000, "\udc80"])
def test_a_receipt_digest_is_hashlib_sha256(text: str) -> None:
    import hashlib

    from store.journal.core import key_digest

    try:
        expected = hashlib.sha256(text.encode()).hexdigest()[:32]
    except UnicodeEncodeError:  # a lone surrogate: refused alike
        with pytest.raises(UnicodeEncodeError):
            key_digest(text)
        return
    assert key_digest(text) == expected


def test_a_receipt_digest_looks_for_its_sha256_once() -> None:
    """Each command hashes its key: a failed ``import _sha2`` (3.11 has none) searched sys.path
    again on every call, ≈ 30 µs a command. Counted by a finder that notes every search."""
    import sys

    from store.journal.core import key_digest

    key_digest("warm")  # found here, once
    searched: list[str] = []

    class Noting:
        @staticmethod
        def find_spec(name: str, *args: object) -> None:
            searched.append(name)

    sys.meta_path.insert(0, Noting)
    try:
        for n in range(20):
            key_digest(str(n))
    finally:
        sys.meta_path.remove(Noting)
    assert searched == []


# The CLI's exit freezes the heap before the interpreter's last collections (an earlier atexit
# handler runs later, so this one sees what the CLI left).
EXIT_PROBE = """
import atexit, gc, sys
atexit.register(lambda: print("frozen at exit:", gc.get_freeze_count() > 0))
from refine_tui.cli import main
code = main(["--journal", sys.argv[1], "goals"])
print("frozen before exit:", gc.get_freeze_count() > 0)
sys.exit(code)
"""


def test_the_cli_exits_without_collecting_garbage(journal: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", EXIT_PROBE, str(journal)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-2:] == ["frozen before exit: False", "frozen at exit: True"]


# Collections counted while the console scripts' entry loads the command line, then a command.
LOAD_PROBE = """
import gc, sys
started = []
gc.callbacks.append(lambda phase, info: phase == "start" and started.append(info["generation"]))
from refine_tui import launch
main, _ = launch.load()
print("collections while loading:", len(started))
print("frozen:", gc.get_freeze_count() > 5000, "collecting:", gc.isenabled())
sys.exit(main(["--journal", sys.argv[1], "goals", "--json"]))
"""


def test_the_console_scripts_load_the_command_line_without_collecting(
    journal: Path, tmp_path: Path
) -> None:
    """The modules a command loads live as long as it: no collection walks them while they
    load (a bare import made 11 young and 1 middle one), they are frozen out of the collector's
    way, and it is on again for the command itself. Bytecode cached, as installed (compiling a
    module can collect whatever the setting)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(tmp_path / "pycache")
    for _ in range(2):  # the first run caches the bytecode
        done = subprocess.run(
            [sys.executable, "-c", LOAD_PROBE, str(journal)], capture_output=True, text=True,
            env=env,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:2] == ["collections while loading: 0", "frozen: True collecting: True"]
    assert '"goal_id": "g1"' in done.stdout  # the command ran as `python -m refine_tui.cli`'s
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    assert pyproject["project"]["scripts"] == {
        "refine": "refine_tui.launch:main",
        "refine-tui": "refine_tui.launch:tui_main",
    }
    same = subprocess.run(
        [sys.executable, "-m", "refine_tui.launch", "--journal", str(journal), "goals"],
        capture_output=True,
        text=True,
    )
    direct = subprocess.run(
        [sys.executable, "-m", "refine_tui.cli", "--journal", str(journal), "goals"],
        capture_output=True,
        text=True,
    )
    assert (same.returncode, same.stdout) == (0, direct.stdout) and "g1" in same.stdout
