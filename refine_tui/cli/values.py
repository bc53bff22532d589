"""The command line's value types: each refuses a bad value as usage (exit 2), naming why."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from refine_tui.cli.common import MAX_CAPACITY
from store.errors import InvalidInputError


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text!r}")
    return value


def port_number(text: str) -> int:
    if not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"not a port number (0-65535): {text!r}")
    return int(text)


def bind_host(text: str) -> str:
    # An empty host (an unset `--host "$HOST"`) would make aiohttp bind every interface.
    if not text.strip():
        raise argparse.ArgumentTypeError("empty; name an address (0.0.0.0 for every interface)")
    return text


def capacity(text: str) -> int:
    value = positive_int(text)
    if value > MAX_CAPACITY:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_CAPACITY}: {text!r}")
    return value


def non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value <= 3600:
        raise argparse.ArgumentTypeError(f"must be between 0 and 3600 seconds: {text!r}")
    return value


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of seconds (0 or more): {text!r}")
    return value


def heartbeat_seconds(text: str) -> float:
    from store.journal.presence import heartbeat_interval

    try:
        return heartbeat_interval(float(text))
    except (ValueError, InvalidInputError):
        raise argparse.ArgumentTypeError(f"must be 0.05 to 3600 seconds: {text!r}") from None


def goal_statuses(text: str) -> frozenset[str]:
    from store.model.goals import GOAL_STATUSES

    return _among(text, GOAL_STATUSES, "statuses")


def node_states(text: str) -> frozenset[str]:
    from store.journal.presence import STATES

    return _among(text, STATES, "states")


def _among(text: str, allowed: Sequence[str], what: str) -> frozenset[str]:
    """``a`` or ``a,b``: each one of ``allowed``."""
    wanted = frozenset(s.strip() for s in text.split(","))
    if not text.strip() or not wanted <= set(allowed):
        raise argparse.ArgumentTypeError(
            f"{text!r}: give {what} among {', '.join(allowed)}, separated by commas"
        )
    return wanted


def non_empty(text: str) -> str:
    if not text:
        raise argparse.ArgumentTypeError("must not be empty")
    return text


def node_names(text: str) -> tuple[str, ...]:
    """``a`` or ``a,b,c``: the nodes goals move to (each name checked by the store)."""
    names = tuple(name.strip() for name in text.split(","))
    if not all(names):
        raise argparse.ArgumentTypeError(f"{text!r}: give node names separated by commas")
    return names
