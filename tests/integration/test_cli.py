"""The `refine` command line: DESIGN §11's commands, --json shapes, exit codes, one-line errors."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from refine_tui.cli import main
from store.journal.sqlite import Journal
from store.model.goals import Goals
from tests.helpers.cli import dump, refine


@pytest.fixture
def journal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    path = tmp_path / "state" / "journal.db"
    assert refine(capsys, path, "init")[0] == 0
    return path


def test_init_of_an_empty_file_says_it_created_the_journal(tmp_path: Path, capsys) -> None:
    path = tmp_path / "made-by-mktemp.db"
    path.write_bytes(b"")
    code, out, _ = refine(capsys, path, "init", "--json")
    assert code == 0 and json.loads(out) == {"journal": str(path), "created": True}
    code, out, _ = refine(capsys, path, "init", "--json")
    assert code == 0 and json.loads(out) == {"journal": str(path), "created": False}


def test_init_creates_file_and_folder_idempotently(tmp_path: Path, capsys) -> None:
    path = tmp_path / "deep" / "dir" / "journal.db"
    code, out, _ = refine(capsys, path, "init", "--json")
    assert code == 0 and json.loads(out) == {"journal": str(path), "created": True}
    code, out, _ = refine(capsys, path, "init", "--json")
    assert code == 0 and json.loads(out)["created"] is False


@pytest.mark.postgres
def test_init_on_postgresql_says_created_once_even_for_an_empty_journal(
    postgres_url: str, capsys
) -> None:
    first = refine(capsys, postgres_url, "init", "--json")  # type: ignore[arg-type]
    again = refine(capsys, postgres_url, "init", "--json")  # type: ignore[arg-type]
    assert first[0] == again[0] == 0
    assert json.loads(first[1])["created"] is True
    assert json.loads(again[1])["created"] is False  # it exists, though no event was written


def test_goal_add_list_show_json_shapes(journal: Path, capsys) -> None:
    code, out, _ = refine(
        capsys,
        journal,
        "goal",
        "add",
        "--title",
        "Build",
        "--id",
        "build",
        "--max-attempts",
        "5",
        "--redelivery",
        "operator",
        "--json",
        "--",
        "python",
        "-c",
        "print(1)",
    )
    assert code == 0
    goal = json.loads(out)
    assert goal["goal_id"] == "build" and goal["recipe"]["argv"] == ["python", "-c", "print(1)"]
    code, out, _ = refine(capsys, journal, "goals", "--json")
    [listed] = json.loads(out)
    for key in (
        "goal_id",
        "title",
        "node_id",
        "status",
        "round",
        "run_id",
        "redelivery",
        "version",
    ):
        assert key in listed
    assert listed["status"] == "queued" and listed["node_id"] == "n1"
    assert listed["redelivery"] == "operator"
    code, out, _ = refine(capsys, journal, "runs", "build", "--json")
    [run] = json.loads(out)
    assert run["run_id"] == "build.r1" and run["budget"]["max_attempts"] == 5
    assert run["attempts"] == [] and run["status"] == "queued"
    code, out, _ = refine(capsys, journal, "show", "build", "--json")
    shown = json.loads(out)
    assert set(shown) == {"goal", "runs", "events"}
    assert [e["type"] for e in shown["events"]] == ["goal.created", "run.submitted"]
    code, out, _ = refine(capsys, journal, "show", "build.r1", "--json")
    assert set(json.loads(out)) == {"run", "events"}


def test_goal_add_repeated_exactly_replays(journal: Path, capsys) -> None:
    args = ("goal", "add", "--title", "Build", "--id", "build", "--", "true")
    assert refine(capsys, journal, *args)[0] == 0
    code, out, _ = refine(capsys, journal, *args)
    assert code == 0 and "replayed" in out
    code, _, err = refine(
        capsys, journal, "goal", "add", "--title", "Other", "--id", "build", "--", "true"
    )
    assert code == 1 and "GOAL_EXISTS" in err


def test_cancel_queued_goal_is_terminal_and_release_refuses(journal: Path, capsys) -> None:
    refine(capsys, journal, "goal", "add", "--title", "Build", "--id", "build", "--", "true")
    code, out, _ = refine(capsys, journal, "cancel", "build", "--reason", "not wanted", "--json")
    assert code == 0
    assert json.loads(out)["action"] == "cancel"
    code, out, _ = refine(capsys, journal, "goals", "--json")
    [goal] = json.loads(out)
    assert goal["status"] == "cancelled" and goal["cancel_reason"] == "not wanted"
    before = dump(journal)
    code, _, err = refine(capsys, journal, "release", "build")
    assert code == 1 and err.count("\n") == 1 and "refine:" in err
    code, _, err = refine(capsys, journal, "cancel", "build", "--reason", "again")
    assert code == 1
    assert dump(journal) == before
    assert refine(capsys, journal, "check")[0] == 0


def _running_with_a_process(journal: Path, goal_id: str) -> subprocess.Popen[bytes]:
    """``goal_id`` running on n1 as attempt 1, its recorded process a real group leader."""
    from tests.helpers.registry import record_worker

    with Journal.open(journal) as j:
        Goals(j).start(goal_id=goal_id, node_id="n1", worker="n1/w1", token="t1")
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    record_worker(journal, "n1", f"{goal_id}.r1", proc, worker="n1/w1")
    return proc


def test_stop_and_cancel_say_each_fact_once(journal: Path, capsys, monkeypatch) -> None:
    """The one-line report said "requeued; signals SIGTERM; SIGTERM to process group …;
    … the goal is queued again": the outcome and the signal each twice."""
    monkeypatch.setenv("REFINE_OPERATOR", "dana")
    add = ("goal", "add", "--title", "Build", "--id", "build", "--max-attempts", "5", "--")
    assert refine(capsys, journal, *add, "sleep", "60")[0] == 0
    proc = _running_with_a_process(journal, "build")
    try:
        code, out, _ = refine(capsys, journal, "stop", "build", "--grace", "5")
        assert code == 0
        assert out == (
            f"stop build: SIGTERM to process group {proc.pid}, exited within the grace;"
            " attempt 1 interrupted (sigterm by dana@n1); the goal is requeued"
            " (attempt 2 of 5 next)\n"
        )
    finally:
        proc.kill()
        proc.wait()
    code, out, _ = refine(capsys, journal, "cancel", "build", "--reason", "not needed")
    assert code == 0 and out == "cancel build: run build.r1 is cancelled; nothing was running\n"
    refine(capsys, journal, "goal", "add", "--title", "Other", "--id", "other", "--", "true")
    with Journal.open(journal) as j:
        Goals(j).start(goal_id="other", node_id="n1", worker="n1/w2", token="t2")
    code, out, _ = refine(capsys, journal, "cancel", "other", "--reason", "r", "--json")
    report = json.loads(out)  # the --json shape is unchanged: the same facts as fields
    assert code == 0 and report["outcome"] == "cancel-requested" and report["signals"] == []
    assert set(report) == {
        "action", "goal_id", "run_id", "epoch", "node_id", "signals", "process",
        "requeued", "held", "outcome", "why", "recorded_by",
    }  # fmt: skip
    assert report["why"] == (
        "the goal is cancelled; no process record for attempt 1 on node n1:"
        " confirm cleanup once its work has ended"
    )


@pytest.mark.parametrize(
    "args",
    [
        ("goal", "add", "--title", "No recipe"),
        ("goal", "add", "--title", "T", "--id", "bad id!", "--", "true"),
        ("goal", "add", "--title", "T", "--max-attempts", "0", "--", "true"),
        ("goal", "add", "--title", "T", "--max-attempts", "21", "--", "true"),
        ("goal", "add", "--title", "T", "--redelivery", "sometimes", "--", "true"),
        ("cleanup", "build.r1"),
        ("cleanup", "build.r1", "--epoch", "x"),
        ("cancel", "build"),
        ("cancel", "build", "--reason", ""),
        ("stop",),
        ("frobnicate",),
        ("node", "--capacity", "100000000000000000000"),
        ("--journal", "", "goals"),  # an unset variable is not "the default journal"
        ("--node", "", "goals"),
    ],
)
def test_bad_input_exits_2_and_changes_nothing(journal: Path, capsys, args) -> None:
    refine(capsys, journal, "goal", "add", "--title", "Build", "--id", "build", "--", "true")
    before = dump(journal)
    code, _, err = refine(capsys, journal, *args)
    assert code == 2, err
    assert err.startswith("refine: ") and err.count("\n") == 1
    assert dump(journal) == before


def test_model_refusals_exit_1_with_the_code(journal: Path, capsys) -> None:
    refine(capsys, journal, "goal", "add", "--title", "Build", "--id", "build", "--", "true")
    before = dump(journal)
    code, _, err = refine(capsys, journal, "stop", "build")
    assert code == 1 and err.startswith("refine: ")
    code, _, err = refine(capsys, journal, "show", "nope")
    assert code == 1 and "NOT_FOUND" in err
    code, _, err = refine(capsys, journal, "cleanup", "build.r1", "--epoch", "1")
    assert code == 1
    assert dump(journal) == before


def test_missing_or_foreign_journal_exits_3_and_is_never_created(tmp_path: Path, capsys) -> None:
    missing = tmp_path / "nowhere" / "journal.db"
    for args in (
        ("goals",),
        ("show", "x"),
        ("check",),
        ("cancel", "x", "--reason", "r"),
        ("goal", "add", "--title", "T", "--", "true"),
    ):
        code, _, err = refine(capsys, missing, *args)
        assert code == 3, (args, err)
        assert "journal missing" in err
    assert not missing.parent.exists()
    foreign = tmp_path / "notes.txt"
    foreign.write_text("plain text, not a journal\n" * 50)
    code, _, err = refine(capsys, foreign, "goals")
    assert code == 3 and err.count("\n") == 1
    assert foreign.read_text() == "plain text, not a journal\n" * 50
    other_db = tmp_path / "other.db"
    with sqlite3.connect(other_db) as conn:
        conn.execute("CREATE TABLE t (x)")
    assert refine(capsys, other_db, "goals")[0] == 3
    assert refine(capsys, other_db, "cancel", "x", "--reason", "r")[0] == 3


def test_a_damaged_journal_is_named_in_its_one_line_refusal(tmp_path: Path, capsys) -> None:
    """SQLite's own words ("file is not a database") say what, the path says which."""
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(bytes(range(256)) * 20)
    truncated = tmp_path / "truncated.db"
    with Journal.open(truncated) as j:
        for n in range(50):
            Goals(j).create(goal_id=f"g{n}", title="T", node_id="n1", argv=["true"])
    with truncated.open("r+b") as f:
        f.truncate(truncated.stat().st_size // 2)
    for path in (garbage, truncated):
        before = path.read_bytes()
        for args in (("goals",), ("check",), ("init",), ("cancel", "g1", "--reason", "r")):
            code, out, err = refine(capsys, path, *args)
            assert code == 3 and out == "", (path, args, err)
            assert err.startswith("refine: STORAGE: ") and err.rstrip().endswith(str(path))
            assert err.count("\n") == 1
        assert path.read_bytes() == before


def test_even_a_bug_is_one_visible_line(
    journal: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unexpected exception (a bug) may carry journal text: its line shows escapes too."""
    import refine_tui.cli as cli

    def broken(args: object) -> int:
        raise ValueError("from a record: \x1b[2J\nnext")

    monkeypatch.delenv("REFINE_DEBUG", raising=False)
    monkeypatch.setattr(cli, "cmd_goals", broken)
    code, _, err = refine(capsys, journal, "goals")
    assert code == 1 and err.startswith("refine: INTERNAL: ValueError: ")
    assert "\\x1b[2J\\nnext" in err and "\x1b" not in err and err.count("\n") == 1


def test_console_script_never_prints_a_traceback(tmp_path: Path) -> None:
    env_journal = tmp_path / "j.db"
    for args in (["goals"], ["show"], ["cleanup", "r", "--epoch", "-1"]):
        proc = subprocess.run(
            [sys.executable, "-m", "refine_tui.cli", "--journal", str(env_journal), *args],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert proc.returncode in (2, 3), proc.stderr
        assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("title", "expected"),
    [
        ("Déploiement du site", "deploiement-du-site"),
        ("Straße", "strasse"),
        ("x²", "x2"),
        ("日本語", None),  # no ASCII form: a short digest of the title
    ],
)
def test_goal_add_derives_an_id_from_any_title_and_says_so(
    journal: Path, capsys, title: str, expected: str | None
) -> None:
    code, out, err = refine(capsys, journal, "goal", "add", "--title", title, "--", "true")
    assert code == 0, err
    goal_id = out.split()[2]
    assert out.startswith(f"added goal {goal_id} on node n1") and "derived from the title" in out
    if expected is not None:
        assert goal_id == expected
    else:
        assert goal_id.startswith("goal-") and len(goal_id) == len("goal-") + 8
    code, out, _ = refine(capsys, journal, "show", goal_id, "--json")
    assert code == 0 and json.loads(out)["goal"]["title"] == title


def test_goal_add_refuses_an_empty_id(journal: Path, capsys) -> None:
    before = dump(journal)
    code, _, err = refine(capsys, journal, "goal", "add", "--title", "T", "--id", "", "--", "true")
    assert code == 2 and "goal_id must be" in err and err.count("\n") == 1
    assert dump(journal) == before


def test_path_errors_exit_3_in_one_line_and_create_nothing(tmp_path: Path, capsys) -> None:
    (tmp_path / "afile").write_text("")
    bad_name = Path(os.fsdecode(b"not-utf8-\xff"))
    for journal in (
        tmp_path / "afile" / "j.db",
        tmp_path / "afile" / "sub" / "j.db",
        tmp_path / bad_name / "j.db",
    ):
        for args in (("init",), ("goals",), ("goal", "add", "--title", "T", "--", "true")):
            code, out, err = refine(capsys, journal, *args)
            assert code == 3, (journal, args, err)
            assert err.startswith("refine: STORAGE: ") and err.count("\n") == 1
            assert "INTERNAL" not in err and out == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def test_input_is_refused_before_the_goals_state(journal: Path, capsys) -> None:
    """The seed's refusal order: a bad reason or method is bad input (exit 2) even for a goal
    that is cancelled or missing, never the goal's state (exit 1)."""
    refine(capsys, journal, "goal", "add", "--title", "Build", "--id", "build", "--", "true")
    assert refine(capsys, journal, "cancel", "build", "--reason", "not needed")[0] == 0
    before = dump(journal)
    for args in (
        ("cancel", "build", "--reason", ""),
        ("cleanup", "build.r1", "--epoch", "1", "--method", ""),
        ("cleanup", "build.r1", "--epoch", "1", "--method", "x" * 501),
        ("cleanup", "nope.r1", "--epoch", "1", "--method", " "),
    ):
        code, _, err = refine(capsys, journal, *args)
        assert code == 2 and err.startswith("refine: INVALID_INPUT: "), (args, err)
    assert dump(journal) == before


def test_unusable_journal_paths_exit_3_in_one_line_and_create_nothing(
    tmp_path: Path, capsys
) -> None:
    """A name too long for the system, or a symlink loop: STORAGE, never INTERNAL."""
    (tmp_path / "loop1").symlink_to("loop2")
    (tmp_path / "loop2").symlink_to("loop1")
    source = tmp_path / "source.db"
    Journal.open(source).close()
    made = ["loop1", "loop2", "source.db"]
    for journal in (tmp_path / ("a" * 300) / "j.db", tmp_path / ("a" * 5000), tmp_path / "loop1"):
        for args in (
            ("init",),
            ("goals",),
            ("check",),
            ("goal", "add", "--title", "T", "--", "true"),
            ("copy", str(source), str(journal)),
        ):
            code, out, err = refine(capsys, journal, *args)
            assert code == 3, (args, err)
            assert err.startswith("refine: STORAGE: journal path unusable") and err.count("\n") == 1
            assert out == ""
    assert sorted(p.name for p in tmp_path.iterdir() if "-" not in p.name) == made  # no -wal


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://dana:pw-secret@[::1/refine",  # an unclosed IPv6 host
        "postgresql://dana:pw-secret@127.0.0.1:1/refine?schema=",  # an empty schema
    ],
)
def test_unusable_postgres_urls_are_bad_input_without_the_password(
    tmp_path: Path, capsys, url: str
) -> None:
    source = tmp_path / "source.db"
    Journal.open(source).close()
    for args in (
        ["--journal", url, "goals"],
        ["--journal", url, "init"],
        ["copy", str(source), url],
    ):
        capsys.readouterr()
        code = main(args)
        out, err = capsys.readouterr()
        assert code == 2 and err.startswith("refine: INVALID_INPUT: "), (args, err)
        assert "pw-secret" not in out + err and err.count("\n") == 1


def test_the_dashboard_refuses_a_url_that_can_never_work(tmp_path: Path) -> None:
    """`refine tui` waits for a journal that may appear, but a URL that cannot be parsed (or
    names an invalid schema) never will: bad input now, not a dashboard left at "opening…"."""
    for url in (
        "postgresql://dana:pw-secret@[::1/refine",
        "postgresql://dana:pw-secret@127.0.0.1:1/refine?schema=Bad",
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "refine_tui.cli", "--journal", url, "tui", "--read-only"],
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=60,
        )
        assert proc.returncode == 2 and proc.stderr.startswith("refine: INVALID_INPUT: ")
        assert "pw-secret" not in proc.stdout + proc.stderr


@pytest.mark.parametrize(
    "location",
    [
        "host=127.0.0.1 port=1 dbname=refine password=pw-secret",  # libpq's keyword/value form
        " dbname = refine password=pw-secret",
        "postgresql+psycopg://dana:pw-secret@127.0.0.1:1/refine",  # SQLAlchemy's
        "file:///tmp/pw-secret/journal.db",
        "mysql://dana:pw-secret@127.0.0.1/refine",
    ],
)
@pytest.mark.parametrize("command", [("init",), ("goals", "--json"), ("node",), ("tui",)])
def test_a_location_that_is_neither_a_path_nor_a_postgresql_url_is_refused_and_never_shown(
    tmp_path: Path, location: str, command: tuple[str, ...]
) -> None:
    """Taken as a file path, `init` made a SQLite file (or folders) named by the string, and
    every error printed it whole: its password too. Now bad input, naming neither, and nothing
    made."""
    proc = subprocess.run(
        [sys.executable, "-m", "refine_tui.cli", "--journal", location, *command],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        cwd=tmp_path,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("refine: INVALID_INPUT: ") and proc.stderr.count("\n") == 1
    assert "is not a journal location" in proc.stderr
    assert "pw-secret" not in proc.stdout + proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_paths_that_only_look_like_keywords_are_still_paths(
    tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder named `date=2026-12-05` (partitioned data) is a path, as is `./dbname=x`."""
    monkeypatch.chdir(tmp_path)
    for name in ("date=2026-12-05/journal.db", "./dbname=x/journal.db"):
        assert main(["--journal", name, "init"]) == 0, capsys.readouterr().err
        assert (tmp_path / name).is_file()


def test_a_closed_pipe_ends_the_output_quietly(tmp_path: Path) -> None:
    """`refine goals | head`: the reader goes away; no message, the SIGPIPE-like status."""
    path = tmp_path / "journal.db"
    with Journal.open(path) as j:
        goals = Goals(j)
        for n in range(600):  # far more than a pipe holds: the writes must meet the close
            goals.create(goal_id=f"g{n}", title=f"goal {n}", node_id="n1", argv=["true"])
    for args in (["goals", "--json"], ["goals"]):
        proc = subprocess.Popen(
            [sys.executable, "-m", "refine_tui.cli", "--journal", str(path), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        os.read(proc.stdout.fileno(), 10)  # like `head -c 10`
        proc.stdout.close()
        code = proc.wait(timeout=60)  # the table may fit in the pipe's buffer: then it is 0
        assert code == 141 or (code == 0 and args == ["goals"])
        assert proc.stderr.read() == b""
        proc.stderr.close()


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs Linux's /dev/full")
def test_output_that_cannot_be_written_is_one_line_not_internal(journal: Path) -> None:
    """A full disk or a closed stdout: the command ran, its report is lost; stderr says so."""
    command = [sys.executable, "-m", "refine_tui.cli", "--journal", str(journal)]
    shell = " ".join(f"'{part}'" for part in command)
    for args, redirect in ((["goals"], ">/dev/full"), (["goals", "--json"], ">&-")):
        proc = subprocess.run(
            ["sh", "-c", f"exec {shell} {' '.join(args)} {redirect}"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 1, proc.stderr
        assert proc.stderr.startswith("refine: OUTPUT: ") and proc.stderr.count("\n") == 1


def test_one_corrupt_goal_spoils_its_row_not_the_listing(journal: Path, capsys) -> None:
    for goal_id in ("a", "b", "c"):
        refine(
            capsys, journal, "goal", "add", "--title", f"T{goal_id}", "--id", goal_id, "--", "true"
        )
    with sqlite3.connect(journal) as db:  # fixture: break one stored record
        db.execute("UPDATE aggregates SET state = '{\"oops\": 1}' WHERE aggregate_id = 'goal:b'")
    code, out, err = refine(capsys, journal, "goals")
    assert code == 0
    rows = {line.split()[0]: line.split()[3] for line in out.splitlines()[1:]}
    assert rows == {"a": "queued", "b": "corrupt", "c": "queued"}
    assert "1 corrupt goal record(s): b" in err
    code, out, _ = refine(capsys, journal, "goals", "--json")
    listed = {g["goal_id"]: g for g in json.loads(out)}
    assert code == 0 and listed["b"]["status"] == "corrupt" and listed["a"]["status"] == "queued"
    assert set(listed["b"]) >= {"goal_id", "title", "node_id", "status", "round", "run_id"}
    code, out, _ = refine(capsys, journal, "runs")
    assert code == 0 and "a.r1" in out and "c.r1" in out and "b (runs)  corrupt" in out
    for args in (("show", "a"), ("runs", "c"), ("show", "c.r1")):
        assert refine(capsys, journal, *args)[0] == 0, args
    for args in (("show", "b"), ("runs", "b")):  # the corrupt one, asked for by id
        code, _, err = refine(capsys, journal, *args)
        assert code == 1 and "CORRUPT_GOAL" in err, args


def test_unreadable_events_are_shown_literally_and_fail_check(journal: Path, capsys) -> None:
    """A stored event whose data is not a JSON object: `show` lists it as it is stored and
    `check` reports it (exit 1); neither ends INTERNAL."""
    refine(capsys, journal, "goal", "add", "--title", "A", "--id", "a", "--", "true")
    with sqlite3.connect(journal) as db:
        db.execute("UPDATE events SET data = '{bad' WHERE sequence = 1")
        db.execute("UPDATE events SET data = '[1]' WHERE sequence = 2")
    code, out, err = refine(capsys, journal, "show", "a", "--json")
    assert code == 0, err
    assert [e["data"] for e in json.loads(out)["events"]] == [
        {"unreadable": "{bad"},
        {"unreadable": "[1]"},
    ]
    assert refine(capsys, journal, "show", "a")[0] == 0
    code, out, err = refine(capsys, journal, "check")
    assert code == 1 and "event data is not a JSON object" in out and err == ""


def test_goal_ids_that_read_as_run_ids_are_refused(journal: Path, capsys) -> None:
    refine(capsys, journal, "goal", "add", "--title", "X", "--id", "x", "--", "true")
    before = dump(journal)
    for goal_id in ("x.r1", "y.r25"):
        code, _, err = refine(
            capsys, journal, "goal", "add", "--title", "T", "--id", goal_id, "--", "true"
        )
        assert code == 2 and "INVALID_INPUT" in err and "run id" in err
    assert dump(journal) == before
    for goal_id in ("x.r0", "x.rev1", "v1.2"):  # not a run id: fine
        assert (
            refine(capsys, journal, "goal", "add", "--title", "T", "--id", goal_id, "--", "true")[0]
            == 0
        )


def test_show_says_which_it_shows_when_a_goal_and_a_run_share_a_name(journal: Path, capsys) -> None:
    """A journal from before the rule may hold goal x.r1 beside run 1 of goal x."""
    refine(capsys, journal, "goal", "add", "--title", "Legacy", "--id", "q", "--", "true")
    refine(capsys, journal, "goal", "add", "--title", "X", "--id", "x", "--", "true")
    with sqlite3.connect(journal) as db:  # fixture: rename goal q (and its run) to x.r1
        for table, column in (("aggregates", "state"), ("events", "data")):
            db.execute(
                f"UPDATE {table} SET {column} = replace({column}, '\"q.r1\"', '\"x.r1.r1\"')"
            )
            db.execute(f"UPDATE {table} SET {column} = replace({column}, '\"q\"', '\"x.r1\"')")
        for old, new in (("goal:q", "goal:x.r1"), ("run:q.r1", "run:x.r1.r1")):
            for table in ("aggregates", "events"):
                db.execute(
                    f"UPDATE {table} SET aggregate_id = ? WHERE aggregate_id = ?", (new, old)
                )
    code, out, err = refine(capsys, journal, "show", "x.r1", "--json")
    assert code == 0 and json.loads(out)["goal"]["title"] == "Legacy"
    assert "x.r1 names a goal and also a run of goal x: this is the goal" in err
    assert "refine runs x" in err
    code, out, _ = refine(capsys, journal, "runs", "x", "--json")
    assert code == 0 and [r["run_id"] for r in json.loads(out)] == ["x.r1"]


def test_demo_help_says_what_dir_is(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["demo", "--help"])
    out = capsys.readouterr().out
    assert exit_.value.code == 0
    assert "--dir DIR" in out and "where the demo journal is made" in " ".join(out.split())


def test_demo_refuses_a_journal_it_would_not_use(
    capsys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`refine demo --journal URL` made a demo on a temporary file in silence: the server the
    operator named was never used. Refused, before anything is made, without the password."""
    monkeypatch.chdir(tmp_path)
    for argv, named in (
        (["demo", "--journal", "postgresql://dana:s3cret@db.example/refine"], "--journal is"),
        (["--journal", "x.db", "demo", "--node", "n5"], "--journal, --node are"),
        (["demo", "--state-dir", "st", "--dir", "d"], "--state-dir is"),
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("refine: USAGE: refine demo makes its own journal") and named in err
        assert "s3cret" not in err and len(err.splitlines()) == 1
    assert list(tmp_path.iterdir()) == []  # nothing made


def test_goal_add_takes_a_relative_cwd_from_where_it_is_typed(
    journal: Path, capsys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--cwd build` names the folder `build` here, not wherever the node was started."""
    (tmp_path / "project" / "build").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "project")
    code, _, err = refine(capsys, journal, "goal", "add", "--id", "g", "--title", "T",
                          "--cwd", "build", "--", "make")  # fmt: skip
    assert code == 0, err
    code, out, _ = refine(capsys, journal, "show", "g", "--json")
    assert json.loads(out)["goal"]["recipe"]["cwd"] == str(tmp_path / "project" / "build")
    before = dump(journal)  # an empty one is still refused, not taken as "here"
    code, _, err = refine(capsys, journal, "goal", "add", "--id", "h", "--title", "T",
                          "--cwd", "", "--", "make")  # fmt: skip
    assert code == 2 and "cwd must be" in err and err.count("\n") == 1
    assert dump(journal) == before
