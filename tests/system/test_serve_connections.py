"""`refine serve` on PostgreSQL (issue 22 item 1, DESIGN §14): all its tabs together hold at
most five journal connections, and every tab still follows commits from other processes (serve
relays its one LISTEN to them). Real server, real `refine serve`, real tab processes over
websockets (what a browser tab opens)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from store.journal.api import Journal
from store.model.goals import Goals
from tests.helpers.browser import read_url
from tests.helpers.pg_activity import ConnectionSampler
from tests.helpers.postgres_server import PASSWORD

pytestmark = pytest.mark.postgres
TABS = 6
SERVE = ("refine serve", "refine tui (serve)")


def _serve_group(application: str) -> str | None:
    return "serve" if application in SERVE else None


@pytest.fixture
def served(postgres_url: str, tmp_path: Path) -> Iterator[tuple[str, list[str]]]:
    env = {**os.environ, "REFINE_JOURNAL": postgres_url, "XDG_STATE_HOME": str(tmp_path)}
    env.pop("REFINE_MAX_CONNECTIONS", None)  # the default limit is the one tested
    refine = [sys.executable, "-m", "refine_tui.cli", "--node", "n1"]
    subprocess.run([*refine, "init"], env=env, check=True, capture_output=True, timeout=60)
    proc = subprocess.Popen(
        [*refine, "serve", "--port", "0"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    try:
        yield read_url(proc, lines), lines
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=90)
        assert proc.stderr is not None
        lines.append(proc.stderr.read())
        proc.stderr.close()


async def _tab(session: aiohttp.ClientSession, url: str, screen: bytearray) -> None:
    """One browser tab's websocket: everything its `refine tui` paints goes into ``screen``."""
    base, token = url.split("?", 1)[0], url.split("token=", 1)[1]
    ws = base.replace("http://", "ws://") + "ws?width=160&height=40"
    # This server's own cookie: ``refine_token_<id>`` for its pages under ``/refine-<id>/``.
    server_id = urllib.parse.urlsplit(base).path.strip("/").removeprefix("refine-")
    cookie = f"refine_token_{server_id}={token}"
    async with session.ws_connect(ws, headers={"Cookie": cookie}) as socket:
        async for message in socket:
            if message.type == aiohttp.WSMsgType.BINARY:
                screen += message.data


async def _until(condition: object, timeout: float = 90.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():  # type: ignore[operator]
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.1)


async def test_tabs_share_five_connections_and_follow_commits(
    served: tuple[str, list[str]], postgres_url: str
) -> None:
    url, lines = served
    screens = [bytearray() for _ in range(TABS)]
    with ConnectionSampler(postgres_url, group_of=_serve_group) as sampler:
        async with aiohttp.ClientSession() as session:
            tabs = [asyncio.create_task(_tab(session, url, s)) for s in screens]
            try:
                await _until(lambda: all(b"Goals" in s for s in screens))
                # A commit from another process: every tab shows it (relayed wake-ups).
                with Journal.open(postgres_url) as journal:
                    Goals(journal).create(
                        goal_id="fresh-goal", title="fresh", node_id="n1", argv=["true"]
                    )
                await _until(lambda: all(b"fresh-goal" in s for s in screens))
            finally:
                for tab in tabs:
                    tab.cancel()
                await asyncio.gather(*tabs, return_exceptions=True)
    assert not sampler.errors
    assert sampler.samples > 10
    assert 0 < sampler.peak_by_node["serve"] <= 5, sampler.peak_by_node
    assert PASSWORD not in "".join(lines)
