"""The benchmarks' code paths run (tiny sizes; no timing is asserted: benchmarks are not tests)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import psutil
import pytest

import bench.common
from bench import attempts, bulk, claims, latency, node_cleanup
from bench.common import journal_with, shape_of
from store.journal.sqlite import Journal
from store.model.goals import Goals
from store.ops.check import check_journal
from tests.helpers.postgres_server import PASSWORD, PostgresServer


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench.common, "CACHE", tmp_path / "cache")


def test_built_journal_is_valid_and_has_every_shape(tmp_path: Path) -> None:
    path = journal_with(100, tmp_path)
    with Journal.open(path, read_only=True) as journal:
        assert check_journal(journal).clean
        goals = Goals(journal).list()
    assert len(goals) == 100
    assert {g.status for g in goals} == {
        "queued", "running", "completed", "cancelled", "exhausted", "held"
    }  # fmt: skip
    for goal in goals:  # the shape each id was built as is the status it reads back as
        expected = {"retrying": "queued", "orphan": "running", "running-other": "running"}
        shape = shape_of(int(goal.goal_id[1:]))
        assert goal.status == expected.get(shape, shape)


def test_racing_claims_judged_by_the_journal() -> None:
    result = claims.measure(processes=2, runs=20)
    assert (result["winners"], result["duplicates"], result["unclaimed"]) == (20, 0, 0)
    assert result["check_clean"]


async def test_latency_probe_sees_commits_of_another_process(tmp_path: Path) -> None:
    result = await latency._headless(str(journal_with(100, tmp_path)), samples=2, seed=0)
    assert result["seen"]["n"] == 2


async def test_latency_probe_samples_from_the_whole_list_not_its_first_screen(
    tmp_path: Path,
) -> None:
    """Regression: sampling began once the first screen was shown, whose ≈ 18 queued rows capped
    the samples (n=36 of 100 asked)."""
    journal = str(journal_with(300, tmp_path))
    result = await latency._headless(journal, samples=40, seed=0, gap_s=(0.0, 0.0))
    assert result["seen"]["n"] == 40


async def test_latency_probe_on_postgresql_wakes_on_notify(postgres_server: PostgresServer) -> None:
    """The same probe on a copy of the built journal in PostgreSQL (LISTEN/NOTIFY wake-ups)."""
    from bench import postgres

    with postgres.journal_with_goals(postgres_server, 100) as url:
        with Journal.open(url, read_only=True) as journal:
            assert len(Goals(journal).list()) == 100
        result = await latency._headless(url, samples=2, seed=0)
    assert result["seen"]["n"] == 2
    assert (
        latency.rows({100: result}, "postgresql")[0][0]
        == "commit → row, 100 goals, PostgreSQL (headless)"
    )


def test_million_bench_measures_each_figure_on_postgresql(
    postgres_server: PostgresServer,
) -> None:
    """Tiny journals copied in with ``refine copy``, then every figure but the dashboard's."""
    from bench import million

    r = million.measure(
        60, 20, 20, rounds=1, skip={"dashboard"}, log=lambda _: None, backend="postgresql",
        pg=postgres_server,
    )  # fmt: skip
    assert set(r["long"]["copy"]) == set(r["long"]["check"]) == {20, 60}
    assert r["streamed"]["lines"] == 61  # the header and every Goal
    assert "Execution Time" in r["status"]["plan"]  # EXPLAIN ANALYZE (a scan, at this size)
    figures = [figure for figure, _, _ in million.rows(r)]
    assert "`refine copy`, 60 goals (SQLite → PostgreSQL)" in figures
    assert PASSWORD not in repr((r, million.rows(r)))


def test_the_batch_bench_claims_every_goal_both_ways(tmp_path: Path) -> None:
    from bench import batch

    path = tmp_path / "journal.db"
    m = batch.measure(str(path), 5, 2, synchronous="NORMAL")
    assert {way: len(timings) for way, timings in m.items()} == {"one by one": 2, "batched": 2}
    with Journal.open(path, create=False) as journal:
        assert journal.count("goal", "running") == 20 and journal.count("goal") == 20
        assert check_journal(journal).clean
    assert "×" in batch.rows("SQLite NORMAL", 5, m)[0][1]


def test_the_launch_floor_starts_each_recipe_after_its_goals_commit() -> None:
    r = attempts.measure_floor(3)
    assert r["mode"] == "floor" and r["count"] == 3
    assert 0 < r["launch_p50_ms"] <= r["launch_p95_ms"]  # each stamp after its own commit
    assert attempts.rows([r])[0][1].startswith("launch p50")


def test_the_claim_and_spawn_floor_claims_each_goal_and_starts_its_recipe() -> None:
    r = attempts.measure_claim_spawn(3)  # each recipe writes its start: all three ran
    assert r["mode"] == "claim-spawn" and r["count"] == 3
    assert 0 < r["launch_p50_ms"] <= r["launch_p95_ms"]  # each stamp after its own commit
    assert "no worker, no record" in attempts.rows([r])[0][0]


def test_the_node_cleanup_bench_confirms_every_attempt() -> None:
    r = node_cleanup.measure(3)
    assert r["attempts"] == r["confirmed"] == 3 and r["wall_s"] > 0


def test_lifecycle_runs_every_system_and_counts_pages() -> None:
    from bench import lifecycle

    m = lifecycle.measure("NORMAL", jobs=5, rounds=1, probe_jobs=5)
    assert set(m) == set(lifecycle.SYSTEMS)
    for figures in m.values():  # every job writes pages and spends CPU
        assert figures["pages"] > 0 and figures["cpu_ms"] > 0
    assert len(lifecycle.rows(m, "NORMAL")) == 3


def test_postgres_bench_runs_every_contender_on_its_own_server() -> None:
    from bench import postgres

    m = postgres.measure(jobs=3, rounds=1)
    assert set(m) == set(postgres.CONTENDERS)
    assert all(wall > 0 and server >= 0 for timings in m.values() for wall, _, server in timings)
    assert len(postgres.rows(m, 3, False)) == 2


def test_pages_attributes_every_wal_frame_of_a_command_to_its_b_tree(tmp_path: Path) -> None:
    """bench.pages: an Execution command writes its Run's row, its events and its receipt (and
    page 1 as the file grows), no index: Runs are in no Goal index and events are chained."""
    from bench import pages

    per = pages.attribute("execution", "NORMAL", 20, 1, tmp_path)
    assert set(per) == {"submit", "claim", "complete"}
    trees = {tree for counts in per.values() for tree, _kind in counts}
    assert trees <= {"aggregates", "events", "receipts", "page 1 (header)"}, trees
    for counts in per.values():  # one leaf of each of the three at least, every command
        for tree in ("aggregates", "events", "receipts"):
            assert sum(n for (t, _), n in counts.items() if t == tree) >= 20


def test_raw_command_baseline_writes_exactly_what_ours_writes(tmp_path: Path) -> None:
    """The claim+complete baseline is honest: the same rows, events (and their ``prev`` chain),
    receipts and indexes as ours, byte for byte but for the commit times."""
    from bench import commands

    commands.bench_ours(tmp_path, "NORMAL", 3)
    commands.bench_raw(tmp_path, "NORMAL", 3)

    def dump(name: str) -> dict[str, list[tuple[object, ...]]]:
        with Journal.open(tmp_path / name, read_only=True) as journal:
            assert check_journal(journal).clean
        conn = sqlite3.connect(tmp_path / name)
        try:
            return {
                "events": conn.execute(
                    "SELECT sequence, aggregate_id, version, type, data, command_id, prev"
                    " FROM events ORDER BY sequence"
                ).fetchall(),
                "aggregates": conn.execute("SELECT * FROM aggregates ORDER BY 1").fetchall(),
                "receipts": conn.execute(
                    "SELECT command_id, payload, result FROM receipts ORDER BY 1"
                ).fetchall(),
                "schema": conn.execute("SELECT sql FROM sqlite_master ORDER BY name").fetchall(),
            }
        finally:
            conn.close()

    ours, raw = dump("ours.db"), dump("raw.db")
    assert len(ours["events"]) == 3 * 4 and len(ours["receipts"]) == 3 * 3
    assert raw == ours


async def test_the_probe_notes_each_list_painted_with_its_filter(tmp_path: Path) -> None:
    """bench.scale times a filter to the end of the first frame showing its rows: the probe
    notes a full read's list after the frame that shows it (asked for with the rows, before
    the app's own "painted"), with the filter it was for."""
    path = journal_with(500, tmp_path)
    app = latency.ProbeApp(journal=path, node=bench.common.NODE)
    async with app.run_test(size=latency.SIZE) as pilot:
        await latency.ready(app)
        await latency.listed(app)
        app.lists_painted.clear()
        await pilot.press("slash", *"queued", "enter")
        while not any(f == "queued" for _, f in app.lists_painted):
            await pilot.pause()
        assert app.header_state.filter == "queued" and app.goal_rows
        assert all(app.dashboard.goals.matches(r) for r in app.goal_rows.values())
        assert [f for _, f in app.lists_painted] == ["queued"] * len(app.lists_painted)


@pytest.mark.postgres
def test_scale_bench_feels_the_dashboard_on_postgresql_after_each_settle() -> None:
    from bench import scale

    r = scale.measure(2000, 0, presses=2, log=lambda _: None, postgres=True, settles=(0, 0.5))
    names = [figure for figure, _, _ in scale.rows(r)]
    assert names == [
        f"{what}, 2,000 goals, PostgreSQL, {settle} s after ready (headless)"
        for settle in ("0", "0.5")
        for what in ("scroll", "filter")
    ]
    assert [feel["filters"]["n"] for feel in r["feels"]] == [len(scale.FILTERS)] * 2


def test_server_cpu_never_goes_back_while_backends_come_and_go(
    postgres_server: PostgresServer,
) -> None:
    """A backend reaped while bench.postgres scans /proc was in neither sum, so the clock went
    back and a timed loop read negative server CPU (a CI failure): the scan now repeats."""
    import itertools
    import threading

    import psycopg

    from bench import postgres

    done = threading.Event()

    def churn() -> None:  # short-lived backends that spend CPU, then exit and are reaped
        while not done.is_set():
            with psycopg.connect(postgres_server.url(), connect_timeout=10) as conn:
                conn.execute("SELECT count(*) FROM generate_series(1, 200000)")

    workers = [threading.Thread(target=churn) for _ in range(3)]
    for worker in workers:
        worker.start()
    try:
        readings = [postgres.server_cpu(postgres_server) for _ in range(2000)]
    finally:
        done.set()
        for worker in workers:
            worker.join()
    assert readings[-1] > readings[0]  # the churn was seen
    assert all(b >= a for a, b in itertools.pairwise(readings))


def test_the_servers_interval_clock_counts_a_few_ms_that_ticks_miss(
    postgres_server: PostgresServer,
) -> None:
    """Twenty commits of the fan-out bench once read 0.0 ms of server CPU (a CI failure): a
    tick is 10 ms, and a few ms on each backend rounded away. Counted to the ns, a backend's
    few queries show, and a backend born and gone in between counts too."""
    import psycopg

    from bench import postgres

    with psycopg.connect(postgres_server.url(), autocommit=True) as conn:
        conn.execute("SELECT 1")
        before = postgres.server_reading(postgres_server)
        for _ in range(5):
            conn.execute("SELECT 1")
        few = postgres.server_cpu_since(postgres_server, before)
    assert 0 < few < 0.5
    before = postgres.server_reading(postgres_server)
    with psycopg.connect(postgres_server.url()) as conn:
        conn.execute("SELECT count(*) FROM generate_series(1, 2000000)")
    busy = postgres.server_cpu_since(postgres_server, before)
    assert busy > 0.05  # the two million rows' scan, by a backend reaped before the reading


def test_bulk_bench_cancels_by_selection_on_both_backends() -> None:
    measured = bulk.measure(goals=5, rounds=1, fsync=False)
    assert set(measured) == {
        (backend, name) for backend in ("SQLite", "PostgreSQL") for name in bulk.CONTENDERS
    }
    assert [figure for figure, _, _ in bulk.rows(measured, 5, False)] == [
        "cancel 5 goals by selection, SQLite (synchronous=FULL)",
        "cancel 5 goals by selection, PostgreSQL (fsync off)",
    ]


@pytest.mark.postgres
def test_fleet_bench_runs_nodes_on_its_own_server_within_their_connections() -> None:
    from bench import fleet

    r = fleet.measure(nodes=2, attempts=3, max_connections=20, idle_s=0.5)
    assert r["launched"] == 6
    assert 2 <= r["peak_node"] <= 5  # the node's two, and its workers' when sampled
    assert r["idle_per_node"] == 2
    names = [row[0].split(": ")[1] for row in fleet.rows(r)]
    assert names == ["connections", "launch", "idle CPU", "burst CPU"]
    assert r["burst"].sessions >= 6  # a claim helper's session per launch, at least
    # The box's busy time is read over the window it is set against (it once read "35 of 34
    # core-seconds": the recipes' scan after the burst was in one and not the other).
    assert r["burst"].box <= (r["burst_s"] + 0.1) * psutil.cpu_count()


@pytest.mark.postgres
def test_fanout_bench_commits_at_its_rate_beside_nodes_and_followers() -> None:
    from bench import fanout

    small = fanout.measure(nodes=1, followers=1, rate=20.0, seconds=1.0)
    big = fanout.measure(nodes=2, followers=1, rate=20.0, seconds=1.0)
    assert small["commits"] == big["commits"] == 20
    assert small["server_ms_per_commit"] > 0 and big["node_pct_each"] >= 0
    assert fanout.rows([small, big])[-1][2] == "≤ 2×"
    # Rounds (the layouts in turn): a line per layout with its median, then the ratio of the
    # medians and each round's own.
    again = {**small, "server_ms_per_commit": small["server_ms_per_commit"] * 3}
    lines = fanout.rows([small, big, again, big])
    assert len(lines) == 5 and lines[0][0] == "fan-out 1 nodes + 1 followers"
    middle = (small["server_ms_per_commit"] + again["server_ms_per_commit"]) / 2
    assert f"server {middle:.2f} ms CPU per commit (" in lines[0][1]
    ratios = [big["server_ms_per_commit"] / a["server_ms_per_commit"] for a in (small, again)]
    ratio = big["server_ms_per_commit"] / middle
    assert lines[4][1] == f"{ratio:.2f}× (rounds: {ratios[0]:.2f}×, {ratios[1]:.2f}×)"
    # Whose backend did the work: every process's connection found by its port, the committer's
    # busy with every commit; each node's and each reader's share, then what no client's did.
    for r in (small, big):
        assert set(r["server_ms_by_role"]) == {"node", "follower", "committer"}
        assert r["server_ms_by_role"]["committer"] > 0
    by_role = small["server_ms_by_role"]
    assert fanout.rows([small, big])[1] == (
        "fan-out 1 + 1: server CPU per commit by whose backend",
        f"node {by_role['node']:.2f} ms each, follower {by_role['follower']:.2f} ms each,"
        f" committer {by_role['committer']:.2f} ms, the rest"
        f" {small['server_ms_per_commit'] - sum(by_role.values()):.2f} ms",
        "",
    )
    assert lines[3][0] == "fan-out 2 + 1: server CPU per commit by whose backend"


def test_fanout_bench_times_each_commit_to_its_row_at_real_dashboards() -> None:
    """``--dashboards``: the followers are the real app (headless, a process each); every
    commit's row is painted at every dashboard, timed on the machine's monotonic clock."""
    from bench import fanout

    result = fanout.measure(nodes=1, followers=2, rate=10.0, seconds=1.0, dashboards=True)
    assert result["commits"] == 10 and len(result["rows_ms"]) == 2
    for samples in result["rows_ms"]:
        assert len(samples) == 10 and all(v is not None and 0 < v < 30_000 for v in samples)
    lines = fanout.rows([result])
    assert lines[0][0] == "fan-out 1 nodes + 2 dashboards"
    assert lines[1][0] == "fan-out 1 + 2: server CPU per commit by whose backend"
    assert " ms each, dashboard " in lines[1][1]  # two dashboards' backends, each one's share
    assert lines[2][0] == "fan-out 1 + 2, commit → row painted (round 1)"
    assert lines[2][1].endswith("missed 0") and lines[2][2] == "≤ 50 ms"


def test_the_trees_bench_checks_and_indexes_a_journal_from_each_tree(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The same tree twice, tiny journals: a check line per tree on PostgreSQL (clean), an
    index line per tree on SQLite, every Goal indexed."""
    from bench import trees

    root = str(Path(__file__).parents[2])
    assert trees.main([root, root, "--size", "20", "--index-size", "30", "--rounds", "1"]) == 0
    said = capsys.readouterr().out.splitlines()
    checks = [line for line in said if line.startswith("check, 20 goals, PostgreSQL")]
    indexes = [line for line in said if line.startswith("index build, 30 goals, SQLite")]
    assert len(checks) == 2 and all("checked 20 goals" in c and "clean" in c for c in checks)
    assert len(indexes) == 2 and all("peak RSS" in i for i in indexes)


def test_the_new_rows_bench_times_each_new_goal_at_a_real_dashboard() -> None:
    """A dashboard of this tree, 5 new Goals: its CPU per Goal, every row painted."""
    from bench import new_rows

    root = str(Path(__file__).parents[2])
    result = new_rows.measure(root, rate=10.0, goals=5, size=3)
    assert result["cpu_ms"] > 0 and result["missed"] == 0
    assert 0 < result["p50_ms"] <= result["p95_ms"] < 30_000
    (line,) = new_rows.rows([result, {**result, "cpu_ms": 3 * result["cpu_ms"]}], 10.0)
    assert line[0] == f"dashboard, new Goals at 10/s (SQLite, 4 Goals before), {root}"
    assert f"CPU {2 * result['cpu_ms']:.1f} ms per new Goal (rounds: " in line[1]
    assert line[1].endswith("missed 0")


def test_the_new_rows_bench_lists_its_size_before_the_stream(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from bench import new_rows

    root = str(Path(__file__).parents[2])
    assert new_rows.main(["--trees", root, "--goals", "2", "--size", "2", "--rounds", "1"]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith(f"dashboard, new Goals at 10/s (SQLite, 3 Goals before), {root} | CPU ")


def test_the_textual_floor_ticks_its_labels_in_a_real_terminal() -> None:
    """The floor's app writes its ticking labels once a second in tmux, and an arm's CPU is
    measured from the app's own process."""
    import sys

    from bench import textual_floor
    from bench.common import TmuxDashboard
    from bench.idle import SIZE

    command = [sys.executable, "-m", "bench.textual_floor", "--app", "2"]
    with TmuxDashboard("", SIZE, command=command) as pane:

        def ticked(screen: str) -> bool:
            labels = [line.strip() for line in screen.splitlines()[: textual_floor.LABELS]]
            if len(labels) < 3 or labels[2] != "2":  # not shown yet (the third never ticks)
                return False
            return labels[0] == labels[1] and labels[0] not in ("0", "1")  # both written

        pane.wait_for(ticked, timeout=30)
        assert pane.process.name().startswith("python")
    # A % of one core (its few ms over half a second may round to 0 at the kernel's 10 ms ticks).
    assert 0 <= textual_floor.arm_cpu(command, 0.5, "   6") < 100
