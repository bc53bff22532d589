"""``json.loads`` for the journal's stored texts: json's own scanner, called directly.

A stored state or event is exactly one JSON value, so the wrappers of ``json.loads`` (the type
checks, and the two whitespace searches around the value) are skipped and its scanner
(``json.scanner.make_scanner``: the C one where there is one) is called at offset 0. Anything
else (whitespace around the value, bytes, an error) goes to ``json.loads`` itself, so values and
errors are the same (``tests/unit/test_speedups_json_scan.py``).

Justified by the reads of many states: ``bench/scale.py`` (the dashboard on many Goals: first
paint and filters read a state per row). Measured in issue 28: 0.5–1 µs of 2.1–3 µs a Goal or
Run state on 3.11, 3.12 and 3.13 (17–42 %); reading 1,000 Goals with their Runs (the dashboard's
first screen, ``reads.goals_with_runs``) took 37 ms CPU against 54 ms with ``json.loads`` (3.11);
``bench.scale --size 20000``, one run each on a loaded machine: a filter's process CPU p50 89 ms
against 102 ms with ``json.loads``.
"""

from __future__ import annotations

import json
import json.scanner
from typing import Any

_SCAN = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[arg-type]


def loads(text: Any) -> Any:
    """``json.loads(text)``: text that is exactly one JSON value is scanned directly, anything
    else (whitespace around it, bytes, an error) goes to json.loads itself."""
    if type(text) is str:
        try:
            value, end = _SCAN(text, 0)
            if end == len(text):
                return value
        except (StopIteration, ValueError):
            pass
    return json.loads(text)
