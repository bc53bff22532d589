"""`store` is the durable model: it never imports Textual or the dashboard (DESIGN §1)."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import store


def test_store_imports_nothing_from_textual_or_refine_tui() -> None:
    modules = [m.name for m in pkgutil.walk_packages(store.__path__, "store.")]
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'refine_tui')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert len(modules) >= 25
    assert out.stdout.strip() == "[]"
