"""What a PostgreSQL command's NOTIFY names (``notice_suffix``), the channels it goes to
(``node_channel``), and how a listener reads it (``read_notice``): a node skips a commit only
when the notification names other nodes alone."""

from __future__ import annotations

import string

from store.journal.postgres import (
    NAME_MAX,
    NOTICE_NODES_MAX,
    channel_for,
    node_channel,
    notice_suffix,
    read_notice,
)
from store.names import MAX_NAME


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


def test_a_nodes_channel_is_the_journals_and_its_name_where_that_fits() -> None:
    assert node_channel("refine_journal", "n1") == "refine_journal:n1"
    assert node_channel("refine_journal", None) == "refine_journal:*"  # every node's
    assert node_channel(channel_for("team_b"), "a.b-c") == "refine_journal_team_b:a.b-c"


def test_every_nodes_channel_fits_for_any_schema_and_node_name() -> None:
    schemas = ["refine", "team_b", "s" * 48, "s" * 49, "s" * 63, "p" * 60 + "_aa", "p" * 60 + "_bb"]
    nodes = [None, "a", "A", "n" * MAX_NAME, "m" * MAX_NAME, "0" + string.ascii_letters + "._-"]
    names = {(s, n): node_channel(channel_for(s), n) for s in schemas for n in nodes}
    assert all(len(name.encode()) <= NAME_MAX for name in names.values())
    assert len(set(names.values())) == len(names)  # a channel of its own each
    shared = {channel_for(s) for s in schemas}
    assert not shared & set(names.values())  # never a journal's channel (every commit)


def test_a_long_name_is_told_apart_by_its_digest() -> None:
    long = node_channel(channel_for("s" * 63), "n" * MAX_NAME)
    assert long.startswith(channel_for("s" * 63)[:45] + ":#") and len(long) == NAME_MAX
    assert node_channel("refine_journal", "n" * 48) == "refine_journal:" + "n" * 48  # 63 bytes
    assert ":#" in node_channel("refine_journal", "n" * 49)  # 64: a digest
