"""Trouble: a step that keeps failing is said once per reason, and once when it passes."""

from __future__ import annotations

from store.node.trouble import MAX_SAID, Trouble


def test_each_reason_once_then_one_line_when_it_passes_and_a_new_spell_is_said_again() -> None:
    said: list[str] = []
    trouble = Trouble(said.append)
    trouble.passed("the journal answers")  # it never failed: nothing to say
    for _ in range(50):
        trouble.failed("journal unreachable: shutting down")
        trouble.failed("journal unreachable: refused")
    assert trouble.failing
    assert said == [
        "journal unreachable: shutting down (trying again; said once until it passes)",
        "journal unreachable: refused (trying again; said once until it passes)",
    ]
    trouble.passed("the journal answers")
    trouble.passed("the journal answers")
    assert said[2:] == ["the journal answers again, after under a second"] and not trouble.failing
    trouble.failed("journal unreachable: refused")  # a second outage is news
    assert len(said) == 4


def test_a_reason_that_varies_is_said_at_most_max_said_times_a_spell() -> None:
    said: list[str] = []
    trouble = Trouble(said.append)
    for n in range(100):
        trouble.failed(f"journal unreachable: attempt {n}")
    assert len(said) == MAX_SAID
