"""Ids checked as sets of characters (``store.names.spelled``) accept exactly what the patterns
they replace accept: ``[A-Za-z0-9][<alphabet>]*`` matched whole."""

from __future__ import annotations

import re

import pytest

from store.errors import InvalidInputError
from store.model.goal import _ACTOR, _IDENT, check_title
from store.model.run_rules import _CONFIRMER, _ID, Invalid, digest
from store.names import NAME_CHARS, spelled

ALPHABETS = {
    "name": (NAME_CHARS, r"[A-Za-z0-9][A-Za-z0-9._-]*"),
    "goal identifier": (_IDENT, r"[A-Za-z0-9][A-Za-z0-9._:/-]*"),
    "goal actor": (_ACTOR, r"[A-Za-z0-9][A-Za-z0-9._:/@-]*"),
    "run identifier": (_ID, r"[A-Za-z0-9][A-Za-z0-9._:/-]*"),
    "run confirmer": (_CONFIRMER, r"[A-Za-z0-9][A-Za-z0-9._:/@-]*"),
}
# Every character of the first plane's first blocks (ASCII, Latin-1, look-alikes, full-width),
# first and later in an id, and a few whole ids.
CHARS = [chr(c) for c in range(0x0530)] + ["\u2024", "\u2215", "\uff0e", "\uff41", "𝟘"]
SAMPLES = ["", "a", "a.b", "-a", "a-", "a@b", "a/b:c", "a b", "a\n", "A_9.z", "é", "aé"]


@pytest.mark.parametrize("alphabet", ALPHABETS)
def test_an_id_is_spelled_in_its_alphabet_exactly_when_its_pattern_matches(alphabet: str) -> None:
    chars, pattern = ALPHABETS[alphabet]
    texts = SAMPLES + CHARS + [f"a{c}" for c in CHARS] + [f"{c}a" for c in CHARS]
    wrong = [t for t in texts if spelled(t, chars) != bool(re.fullmatch(pattern, t))]
    assert wrong == []


def test_a_digest_is_sha256_and_64_lowercase_hex_characters() -> None:
    good = "sha256:" + "0123456789abcdef" * 4
    assert digest(good, "d") == good
    for bad in [good[:-1], good + "0", good.upper(), "sha255:" + good[7:], good[:-1] + "g", 5]:
        with pytest.raises(Invalid, match="sha256: followed by 64 lowercase hex"):
            digest(bad, "d")


def test_a_title_with_a_control_or_a_lone_surrogate_is_refused_and_other_text_kept() -> None:
    for title in ["café ☕", "a\u00a0b", "東京", "a\u202eb"]:  # Cf is not Cc: kept, shown escaped
        assert check_title(title) == title
    for title in ["a\x1bb", "a\x85b", "a\ud800b", "\x7f"]:
        with pytest.raises(InvalidInputError, match="control characters"):
            check_title(title)
