"""`refine goals` at scale (issue 27): printed a page at a time as it is read, and
`--status S[,S]` answered over the status indexes, on both backends."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

import refine_tui.cli as cli
from refine_tui.cli import main
from store.journal.api import Journal
from store.journal.sqlite import SqliteJournal
from store.model.goals import Goals

STATUSES = ("running", "queued", "completed", "cancelled", "held", "exhausted")


def fill(location: str, count: int) -> None:
    """``count`` Goals in every status, their ids interleaved so each page mixes them."""
    with Journal.open(location, synchronous="NORMAL") as journal:
        goals = Goals(journal)
        for n in range(count):
            gid, status = f"g{n:03d}", STATUSES[n % len(STATUSES)]
            redelivery = "operator" if status == "held" else "safe"
            goals.create(
                goal_id=gid, title=f"goal {n}", node_id=f"n{n % 2}", argv=["true"],
                max_attempts=2 if status == "held" else 1, redelivery=redelivery,
            )  # fmt: skip
            if status in ("running", "completed", "held", "exhausted"):
                goals.start(goal_id=gid, node_id=f"n{n % 2}", worker="w", token=f"t{n}")
            run = f"{gid}.r1"
            if status == "completed":
                goals.settle(goal_id=gid, run_id=run, epoch=1, outcome="completed")
            elif status == "exhausted":
                goals.settle(goal_id=gid, run_id=run, epoch=1, outcome="failed", reason="x")
            elif status == "held":
                goal = goals.read(gid)
                current = goals.current_run(goal)  # type: ignore[arg-type]
                assert goal is not None and current is not None
                goals.interrupt(
                    goal_id=gid, run_id=run, epoch=1, goal_version=goal.version,
                    run_version=current.version, confirmed_by="t@n0", method="sigterm",
                    command_id=f"op:stop:{gid}",
                )  # fmt: skip
            elif status == "cancelled":
                goals.cancel(goal_id=gid, reason="no", command_id=f"op:cancel:{gid}")


def listed(capsys: pytest.CaptureFixture[str], location: str, *args: str) -> list[dict]:
    capsys.readouterr()
    assert main(["--journal", location, "goals", "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("page", [4, 1000])
def test_status_lists_exactly_the_goals_in_those_statuses(
    journal_location: str, capsys: pytest.CaptureFixture[str], monkeypatch, page: int
) -> None:
    monkeypatch.setattr(cli.reads, "GOALS_PAGE", page)
    fill(journal_location, 30)
    everything = listed(capsys, journal_location)
    assert [g["goal_id"] for g in everything] == [f"g{n:03d}" for n in range(30)]
    assert {g["status"] for g in everything} == set(STATUSES)
    for wanted in ("running", "queued,held", "completed", "cancelled,exhausted,running"):
        chosen = set(wanted.split(","))
        expected = [g for g in everything if g["status"] in chosen]
        assert listed(capsys, journal_location, "--status", wanted) == expected, wanted
        by_node = [g for g in expected if g["node_id"] == "n1"]
        assert listed(capsys, journal_location, "--status", wanted, "--only-node", "n1") == by_node


def test_an_unknown_status_is_bad_usage(
    journal_location: str, capsys: pytest.CaptureFixture[str]
) -> None:
    fill(journal_location, 1)
    for bad in ("runing", "running,nope", "", ","):
        capsys.readouterr()
        assert main(["--journal", journal_location, "goals", "--status", bad]) == 2, bad
        out, err = capsys.readouterr()
        assert out == "" and err.startswith("refine: USAGE: ") and err.count("\n") == 1


class Reads:
    """Counts the pages of Goals the real journal was asked for, and how many had been read
    when the first row reached standard output."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.pages = 0
        self.at_first_row: int | None = None
        original = SqliteJournal.aggregates

        def counted(journal: SqliteJournal, kind: str, **options: object) -> list:
            self.pages += 1
            return original(journal, kind, **options)  # type: ignore[arg-type]

        monkeypatch.setattr(SqliteJournal, "aggregates", counted)


class Watched(io.StringIO):
    """Standard output that notes how many pages were read when a goal's row arrived."""

    def __init__(self, reads: Reads) -> None:
        super().__init__()
        self.reads = reads

    def write(self, text: str) -> int:
        if self.reads.at_first_row is None and "g000" in text:
            self.reads.at_first_row = self.reads.pages
        return super().write(text)


@pytest.mark.parametrize("as_json", [False, True])
def test_the_first_rows_are_printed_before_the_rest_is_read(
    tmp_path: Path, monkeypatch, as_json: bool
) -> None:
    """Streamed: the first page is on standard output when only one page has been read, and
    the listing has the cells `table` / `json.dumps` print all at once (the JSON byte for byte)."""
    location = str(tmp_path / "journal.db")
    fill(location, 25)
    monkeypatch.setattr(cli.reads, "GOALS_PAGE", 4)
    reads = Reads(monkeypatch)
    out = Watched(reads)
    monkeypatch.setattr(sys, "stdout", out)
    code = main(["--journal", location, "goals", *(["--json"] if as_json else [])])
    monkeypatch.undo()
    assert code == 0
    assert reads.at_first_row == 1 and reads.pages == 8  # 7 pages of goals, then an empty one
    with Journal.open(location, read_only=True) as journal:
        goals = Goals(journal).list_readable()
    if as_json:
        assert (
            out.getvalue()
            == json.dumps([g.to_json() for g in goals], indent=2, sort_keys=True) + "\n"
        )
    else:
        # Cells as the whole table has them; a later page may widen a column (never narrow).
        whole = cli.table(cli.GOAL_HEADERS, cli.goal_rows(goals)).split("\n")
        lines = out.getvalue().split("\n")
        assert [line.split() for line in lines] == [line.split() for line in [*whole, ""]]
        first_page = cli.table(cli.GOAL_HEADERS, cli.goal_rows(goals[:4])).split("\n")
        assert lines[:5] == first_page


def test_an_empty_journal_lists_the_header_or_an_empty_array(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    location = str(tmp_path / "journal.db")
    Journal.open(location).close()
    assert main(["--journal", location, "goals"]) == 0
    assert capsys.readouterr().out == cli.table(cli.GOAL_HEADERS, []) + "\n"
    assert main(["--journal", location, "goals", "--json"]) == 0
    assert capsys.readouterr().out == "[]\n"
