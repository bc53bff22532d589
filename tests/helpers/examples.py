"""How many examples a property test draws: all of them in CI, a fifth in the inner loop.

``python -m pytest tests/unit`` is the loop a developer runs after each change (about 30 s);
the properties' full counts (thousands of generated journals, URLs, JSON texts) run where
``$CI`` is set, as ``.ci/run`` sets it, so nothing is checked less before a change lands.
"""

from __future__ import annotations

import os


def examples(full: int) -> int:
    """``full`` in CI (``$CI`` set and not empty), else a fifth of it (at least 20)."""
    return full if os.environ.get("CI") else max(20, full // 5)
