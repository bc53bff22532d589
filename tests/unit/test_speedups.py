"""Speed-ups live in ``store.speedups``, one module per concern: each names the benchmark that
justifies it and has a test comparing it with what it replaces; no other module reaches for the
interpreter's or the kernel's internals they wrap."""

from __future__ import annotations

import pkgutil
import re
from pathlib import Path

import pytest

import store
import store.speedups

ROOT = Path(store.__file__).parent.parent
MODULES = [m.name for m in pkgutil.iter_modules(store.speedups.__path__)]
# What each speed-up wraps: found nowhere else in the store or the dashboard.
INTERNALS = re.compile(
    r"c_make_encoder|\b_sha2\b|\b_sha256\b|json\.scanner|inotify_init1|\b_sqlite3\b"
)


def test_there_are_speedups() -> None:
    assert {"frozen_dataclass", "inotify", "json_scan", "sha256", "sqlite"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_each_names_its_benchmark_and_has_its_comparison_test(name: str) -> None:
    module = __import__(f"store.speedups.{name}", fromlist=["_"])
    benches = re.findall(r"bench/\w+\.py", module.__doc__ or "")
    assert benches and all((ROOT / bench).is_file() for bench in benches), benches
    assert (ROOT / "tests" / "unit" / f"test_speedups_{name}.py").is_file()


def test_no_other_module_uses_the_internals_they_wrap() -> None:
    found = [
        path.relative_to(ROOT).as_posix()
        for path in sorted([*ROOT.glob("store/**/*.py"), *ROOT.glob("refine_tui/**/*.py")])
        if "speedups" not in path.parts and INTERNALS.search(path.read_text())
    ]
    assert found == []
