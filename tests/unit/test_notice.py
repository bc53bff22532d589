"""What a PostgreSQL command's NOTIFY names (``notice_suffix``) and how a listener reads it
(``read_notice``): a node skips a commit only when the notification names other nodes alone."""

from __future__ import annotations

from store.journal.postgres import NOTICE_NODES_MAX, notice_suffix, read_notice


def test_a_goal_and_its_runs_name_the_goals_node_and_a_move_names_both() -> None:
    assert notice_suffix([("b", "b"), (None, None)]) == " b"
    assert notice_suffix([(None, "b"), (None, None), (None, None)]) == " b"  # created
    assert notice_suffix([("a", "b"), (None, None)]) == " a b"  # reassigned from a to b


def test_a_commit_that_cannot_say_names_no_node() -> None:
    assert notice_suffix([(None, None)]) == ""  # a Run written alone
    assert notice_suffix([]) == ""
    assert notice_suffix([("a b", "a b")]) == ""  # not a node id: never split into two
    assert notice_suffix([("é", "é")]) == ""
    many = [(None, f"node-{i:03d}-{'x' * 50}") for i in range(20)]
    assert len("".join(f" {n}" for _, n in many)) > NOTICE_NODES_MAX
    assert notice_suffix(many) == ""  # too many to name: every node reads it


def test_the_most_a_notice_names_fits_fifteen_nodes_of_the_longest_name() -> None:
    nodes = [(None, f"{i:02d}" + "n" * 62) for i in range(15)]
    assert notice_suffix(nodes).split() == sorted(n for _, n in nodes)
    assert NOTICE_NODES_MAX + 20 < 8000  # NOTIFY's limit, with the last sequence before it


def test_a_listener_reads_the_sequence_and_the_nodes_or_none() -> None:
    assert read_notice("42 a b") == (42, frozenset({"a", "b"}))
    assert read_notice("42") == (42, None)  # an older writer's, or one that cannot say
    assert read_notice("42 ") == (42, None)
    assert read_notice("") == (None, None)
    assert read_notice("x a") == (None, None)  # unreadable: wakes everyone
