"""The README's worked example, pasted into a real shell in a terminal (tmux), line by line.

The test reads the example from the README itself, so it breaks when the README drifts from
what the commands really print. Each command runs in an interactive bash with a real
`refine node` in the background; the terminal's text must match the README line by line,
except for what differs on every run: process ids and worker ids.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROMPT = "$ "
# Differ on every run: `[1] <pid>`, `process group <pid>`, a worker's random id.
VARIABLE = re.compile(
    r"^\[1\] (?P<pid>\d+)$|process group (?P<group>\d+)|n1/(?P<worker>[0-9a-f]{32})"
)
ANY = {"pid": r"\d+", "group": r"\d+", "worker": r"[0-9a-f]{32}"}


def readme_example() -> list[str]:
    """The lines of the console block after "A worked example you can paste"."""
    text = (ROOT / "README.md").read_text()
    start = text.index("A worked example you can paste")
    block = text[text.index("```console\n", start) + len("```console\n") :]
    return block[: block.index("```\n")].rstrip("\n").split("\n")


def commands(lines: list[str]) -> list[list[str]]:
    """Each command as the physical lines typed (a trailing backslash continues it)."""
    found: list[list[str]] = []
    continued = False
    for line in lines:
        if continued:
            found[-1].append(line)
        elif line.startswith(PROMPT):
            found.append([line[len(PROMPT) :]])
        continued = line.endswith("\\") and (continued or line.startswith(PROMPT))
    return found


def shape(line: str) -> re.Pattern[str]:
    """The README line as a pattern: literal, but for the parts that differ on every run."""
    parts, at = [], 0
    for match in VARIABLE.finditer(line):
        for name, value in match.groupdict().items():
            if value is not None:
                parts += [re.escape(line[at : match.start(name)]), ANY[name]]
                at = match.end(name)
    return re.compile("".join([*parts, re.escape(line[at:])]))


def test_shape_keeps_the_fixed_text_strict() -> None:
    assert shape("[1] 10120").fullmatch("[1] 4")
    assert shape("SIGTERM to process group 10185; x").fullmatch("SIGTERM to process group 7; x")
    assert not shape("checked 2 goals, 19 events").fullmatch("checked 2 goals, 18 events")
    assert not shape("build.r1  running  2/5").fullmatch("build.r1  running  1/5")


def test_readme_example_is_parsed() -> None:
    typed = commands(readme_example())
    assert typed[0][0].startswith("export REFINE_NODE=n1")
    # The node's stderr (its start line) to a file: the terminal is compared line by line.
    assert any(c[0].startswith("refine node 2>node.err &") for c in typed)
    assert any(len(c) == 2 for c in typed)  # the goal add continued on a second line
    assert typed[-1][0].startswith("kill %1")


def tmux(server: str, *args: str) -> str:
    done = subprocess.run(["tmux", "-L", server, *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def screen(server: str) -> list[str]:
    text = tmux(server, "capture-pane", "-p", "-J", "-S", "-", "-t", "readme")
    return text.rstrip("\n").split("\n")


def wait_for_prompt(server: str, prompts: int, timeout: float = 90.0) -> list[str]:
    """The screen once the shell shows its ``prompts``-th prompt, ready for input."""
    deadline = time.monotonic() + timeout
    while True:
        lines = [line.rstrip() for line in screen(server)]
        while lines and not lines[-1]:
            lines.pop()
        count = sum(line.startswith(PROMPT.rstrip()) for line in lines)
        if count >= prompts and lines and lines[-1] == PROMPT.rstrip():
            return lines[:-1]
        assert time.monotonic() < deadline, "the shell never came back:\n" + "\n".join(lines)
        time.sleep(0.1)


@pytest.mark.skipif(
    not (shutil.which("tmux") and shutil.which("jq")) and not os.environ.get("CI"),
    reason="needs tmux and jq",
)
def test_readme_worked_example_prints_what_the_readme_shows(tmp_path: Path) -> None:
    expected = readme_example()
    server = f"readme{os.getpid()}"
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "TERM": "xterm",
        "LANG": "C.UTF-8",
        "PYTHONPATH": str(ROOT),
        "PS1": PROMPT,
        "PS2": "",  # a continued line shows as typed, as in the README
    }
    shell = " ".join(
        ["env", "-i", *(f"{k}={v!r}" for k, v in env.items()), "bash --norc --noprofile"]
    )
    tmux(server, "new-session", "-d", "-s", "readme", "-x", "250", "-y", "50", "-c", str(tmp_path))
    try:
        tmux(server, "set-option", "-g", "history-limit", "5000")
        tmux(server, "respawn-pane", "-k", "-t", "readme", "-c", str(tmp_path), shell)
        wait_for_prompt(server, 1)
        for number, lines in enumerate(commands(expected), start=2):
            for line in lines:
                tmux(server, "send-keys", "-t", "readme", "-l", line)
                tmux(server, "send-keys", "-t", "readme", "Enter")
            shown = wait_for_prompt(server, number)
        assert len(shown) == len(expected), "\n".join(shown)
        for want, got in zip(expected, shown, strict=True):
            assert shape(want).fullmatch(got), f"README: {want!r}\nterminal: {got!r}"
    finally:
        subprocess.run(["tmux", "-L", server, "kill-server"], capture_output=True, check=False)
