"""SHA-256 without ``hashlib``: CPython's own implementation, the one hashlib falls back to.

Justified by ``bench/cli.py`` (a write command's start-up: `refine cancel`): importing hashlib
loads OpenSSL and every algorithm, ≈ 3 ms CPU of a command that hashes one receipt key, against
≈ 0.25 ms for the built-in module (measured in issue 28 on 3.11, 3.12 and 3.13, on a loaded
machine). The digest is the same (``tests/unit/test_speedups_sha256.py``). Another Python gets
hashlib's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol


class Hash(Protocol):
    def hexdigest(self) -> str: ...


def sha256(data: bytes) -> Hash:
    """``hashlib.sha256(data)``."""
    global _SHA256
    if _SHA256 is None:  # found once: a failed import searches sys.path again on every try
        _SHA256 = _find()
    return _SHA256(data)


_SHA256: Callable[[bytes], Hash] | None = None


def _find() -> Callable[[bytes], Hash]:
    try:
        from _sha2 import sha256  # type: ignore[import-not-found,unused-ignore]  # CPython ≥ 3.12
    except ImportError:
        try:
            from _sha256 import sha256  # type: ignore[import-not-found,unused-ignore]  # 3.11
        except ImportError:  # another Python
            from hashlib import sha256
    found: Callable[[bytes], Hash] = sha256
    return found
