"""Every option and argument of every `refine` command says what it is (issue 24.11)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

from refine_tui.cli import PRINTS_NO_DATA, build_parser


def parsers(
    parser: argparse.ArgumentParser, path: str = "refine"
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:  # argparse keeps no public list of them
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from parsers(sub, f"{path} {name}")


def test_every_option_and_argument_has_help() -> None:
    missing = [
        f"{path}: {'/'.join(action.option_strings) or action.dest}"
        for path, parser in parsers(build_parser())
        for action in parser._actions
        if not isinstance(action, argparse._SubParsersAction) and not action.help
    ]
    assert missing == []


def test_json_is_offered_only_where_a_command_prints_data() -> None:
    for path, parser in parsers(build_parser()):
        has_json = any("--json" in a.option_strings for a in parser._actions)
        command = path.split()[1] if " " in path else None
        if command in PRINTS_NO_DATA:
            assert not has_json, path
        elif command not in (None, "goal") or path == "refine goal add":
            assert has_json, path


def test_tui_no_pulses_turns_them_off() -> None:
    assert build_parser().parse_args(["tui"]).pulses is True
    assert build_parser().parse_args(["tui", "--no-pulses"]).pulses is False
