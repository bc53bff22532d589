"""``store.speedups.sha256`` is ``hashlib.sha256``: the same digests, from CPython's own module
(no hashlib, no OpenSSL) on the running Python."""

from __future__ import annotations

import hashlib
import subprocess
import sys

import pytest

from store.journal.core import key_digest
from store.speedups.sha256 import sha256

SAMPLES = [b"", b"abc", b"a" * 55, b"a" * 56, b"a" * 64, bytes(range(256)) * 40, "é✓".encode()]


@pytest.mark.parametrize("data", SAMPLES, ids=lambda d: f"{len(d)}-bytes")
def test_the_same_digest_as_hashlib(data: bytes) -> None:
    assert sha256(data).hexdigest() == hashlib.sha256(data).hexdigest()


def test_a_receipt_key_is_sha256_of_its_text() -> None:
    text = '{"expected":{},"payload":{"a":1}}'
    assert key_digest(text) == hashlib.sha256(text.encode()).hexdigest()[:32]


def test_it_is_cpythons_own_module_and_imports_no_hashlib() -> None:
    probe = (
        "import sys; from store.speedups.sha256 import sha256; sha256(b'x');"
        " from store.speedups import sha256 as m;"
        " print(m._SHA256.__module__, 'hashlib' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    module = "_sha2" if sys.version_info >= (3, 12) else "_sha256"
    assert done.stdout.split() == [module, "False"], done.stdout + done.stderr
