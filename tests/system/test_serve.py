"""`refine serve` (DESIGN §13): the real dashboard in real Chromium, behind a token, no orphans.

Debian's Chromium (/usr/bin/chromium) is driven by Playwright with no browser download. The page
draws on a canvas (xterm.js), so the tests read the terminal's own buffer: an init script keeps
textual-serve's terminal object when its constructor assigns ``fitAddon``.
"""

from __future__ import annotations

import http.cookiejar
import http.server
import os
import signal
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import aiohttp
import psutil  # type: ignore[import-untyped]
import pytest

from store.journal.sqlite import Journal
from store.model.goals import Goals
from tests.helpers.browser import READ_SCREEN, launch, read_url, wait_for

WAIT_S = 90.0


def browser_required() -> bool:
    return any(
        os.environ.get(name) == "1"
        for name in ("REFINE_REQUIRE_BROWSER", "REFINE_REQUIRE_POSTGRES", "CI")
    )


def refine(journal: Path, *args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "refine_tui.cli", "--journal", str(journal), "--node", "n1"]
    return subprocess.run([*argv, *args], capture_output=True, text=True, timeout=60, **kwargs)


def goal(journal: Path, goal_id: str) -> Any:
    with Journal.open(journal, read_only=True, create=False) as j:
        return Goals(j).read(goal_id)


def tui_processes(journal: Path) -> list[psutil.Process]:
    """Every live `refine tui` on this journal, whoever its parent is now."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status", "environ"]):
        cmdline, environ = proc.info["cmdline"] or [], proc.info["environ"] or {}
        if proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        if "tui" in cmdline and environ.get("REFINE_JOURNAL") == str(journal):
            found.append(proc)
    return found


@pytest.fixture
def journal(tmp_path: Path) -> Path:
    path = tmp_path / "journal.db"
    assert refine(path, "init").returncode == 0
    add = refine(path, "goal", "add", "--id", "build-docs", "--title", "build docs", "--", "true")
    assert add.returncode == 0, add.stderr
    return path


@dataclass
class Served:
    proc: subprocess.Popen[str]
    url: str  # with the token
    journal: Path
    lines: list[str] = field(default_factory=list)

    @property
    def base(self) -> str:
        return self.url.split("?", 1)[0]

    @property
    def token(self) -> str:
        return self.url.split("token=", 1)[1]

    @property
    def cookie(self) -> str:
        """This server's cookie name: ``refine_token_<id>`` for its path ``/refine-<id>/``."""
        server_id = urllib.parse.urlsplit(self.base).path.strip("/").removeprefix("refine-")
        return f"refine_token_{server_id}"

    def children(self) -> list[psutil.Process]:
        return psutil.Process(self.proc.pid).children(recursive=True)


def stop_served(served: Served) -> None:
    """SIGTERM `refine serve`; it must exit 0 and leave no `refine tui` behind."""
    if served.proc.poll() is None:
        served.proc.send_signal(signal.SIGTERM)
    try:
        code = served.proc.wait(timeout=WAIT_S)
    except subprocess.TimeoutExpired:
        served.proc.kill()
        raise
    assert code in (0, -signal.SIGKILL)
    wait_for(lambda: not tui_processes(served.journal), "no refine tui left after serve exits")


@pytest.fixture
def serve(journal: Path) -> Iterator[Callable[..., Served]]:
    started: list[Served] = []

    def start(*extra: str) -> Served:
        argv = [sys.executable, "-m", "refine_tui.cli", "--journal", str(journal)]
        proc = subprocess.Popen(
            [*argv, "--node", "n1", "serve", "--port", "0", *extra],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        lines: list[str] = []
        served = Served(proc, read_url(proc, lines), journal, lines)
        started.append(served)
        return served

    yield start
    for served in started:
        stop_served(served)


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    """A fresh headless Chromium context; FAILS (never skips) where a browser is required."""
    try:
        from playwright.sync_api import sync_playwright

        manager = sync_playwright()
        playwright = manager.start()
    except Exception as exc:
        if browser_required():
            pytest.fail(f"Playwright cannot start: {exc}")
        pytest.skip(f"Playwright cannot start: {exc}")
    try:
        context = launch(playwright, tmp_path / "chromium-profile")
    except Exception as exc:
        manager.__exit__(None, None, None)
        if browser_required():
            pytest.fail(f"Chromium cannot start: {exc}")
        pytest.skip(f"Chromium cannot start: {exc}")
    try:
        yield context
    finally:
        context.close()
        manager.__exit__(None, None, None)


def open_dashboard(browser: Any, served: Served) -> Any:
    page = browser.new_page()
    page.goto(served.url)
    assert "token" not in page.url  # the token moved to a cookie; out of history and Referer
    wait_for(lambda: "Goals" in screen(page), "the Goals table in the page")
    page.focus(".xterm-helper-textarea")
    return page


def screen(page: Any) -> str:
    return str(page.evaluate(READ_SCREEN))


def test_page_shows_goals_and_follows_a_commit_from_another_process(browser, serve) -> None:
    served = serve()
    page = open_dashboard(browser, served)
    wait_for(lambda: "build-docs" in screen(page), "the goal row")
    assert "live" in screen(page)
    assert len(served.children()) == 1  # this tab's refine tui
    assert len(tui_processes(served.journal)) == 1  # the journal by environment, not argv
    assert str(served.journal) not in served.children()[0].cmdline()
    added = refine(
        served.journal, "goal", "add", "--id", "lint", "--title", "lint it", "--", "true"
    )
    assert added.returncode == 0, added.stderr
    wait_for(lambda: "lint it" in screen(page), "a goal committed by another process")


def test_cancel_from_the_browser_commits_to_the_journal(browser, serve) -> None:
    served = serve()
    page = open_dashboard(browser, served)
    wait_for(lambda: "build-docs" in screen(page), "the goal row")
    page.keyboard.press("c")
    wait_for(lambda: "reason" in screen(page).lower(), "the Cancel modal")
    page.keyboard.type("wrong branch")
    page.keyboard.press("Enter")
    cancelled = wait_for(
        lambda: (g := goal(served.journal, "build-docs")).status == "cancelled" and g,
        "the cancel in the journal",
    )
    assert cancelled.cancel_reason == "wrong branch"
    wait_for(lambda: "cancelled" in screen(page), "the cancelled status in the page")


def test_keys_reach_the_dashboard_without_a_click(browser, serve) -> None:
    """Issue 24.7: keys were lost until the terminal was clicked (the page body had focus)."""
    served = serve()
    page = browser.new_page()
    page.goto(served.url)
    wait_for(lambda: "build-docs" in screen(page), "the goal row")
    page.keyboard.press("c")  # no click, no page.focus: the terminal has it from the load
    wait_for(lambda: "reason" in screen(page).lower(), "the Cancel modal")
    assert page.evaluate("document.activeElement.className").startswith("xterm-helper-textarea")


def test_read_only_refuses_actions_in_words(browser, serve) -> None:
    served = serve("--read-only")
    assert "(read-only)" in served.lines[0]
    page = open_dashboard(browser, served)
    wait_for(lambda: "read-only" in screen(page), "the read-only hint")
    page.keyboard.press("c")
    wait_for(lambda: "open read-only" in screen(page), "the refusal in words")
    assert goal(served.journal, "build-docs").status == "queued"


def test_closing_the_tab_ends_its_process_and_stopping_serve_ends_the_rest(browser, serve) -> None:
    served = serve()
    first, second = open_dashboard(browser, served), open_dashboard(browser, served)
    wait_for(lambda: len(served.children()) == 2, "one refine tui per tab")
    for page in (first, second):  # each has read the journal (it showed "opening…" at first)
        wait_for(lambda page=page: "build-docs" in screen(page), "the goal row in each tab")
    pids = {p.pid for p in served.children()}
    first.close()
    wait_for(lambda: len(served.children()) == 1, "the closed tab's refine tui to end")
    added = refine(
        served.journal, "goal", "add", "--id", "lint", "--title", "lint it", "--", "true"
    )
    assert added.returncode == 0, added.stderr
    wait_for(lambda: "lint it" in screen(second), "the open tab following a commit")
    stop_served(served)  # with a tab still open
    assert not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]


def test_the_browser_without_the_token_gets_403(browser, serve) -> None:
    served = serve()
    page = browser.new_page()
    for url in (served.base, served.base + "?token=wrong" + served.token[5:]):
        response = page.goto(url)
        assert response is not None and response.status == 403
        assert "token" in page.inner_text("body")
    assert served.children() == []


# --- plain HTTP: the 403s, without a browser -----------------------------------------------------


def http_status(url: str, headers: dict[str, str] | None = None) -> int:
    request = urllib.request.Request(url, headers=headers or {})
    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(request, timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


async def ws_status(url: str, headers: dict[str, str] | None = None) -> int:
    async with aiohttp.ClientSession() as session:
        try:
            async with session.ws_connect(url, headers=headers or {}) as ws:
                await ws.close()
                return 101
        except aiohttp.WSServerHandshakeError as exc:
            return exc.status


async def test_requests_without_the_right_token_get_403_and_start_nothing(serve) -> None:
    served = serve()
    base, token = served.base, served.token
    wrong = token[:-1] + ("A" if token[-1] != "A" else "B")
    for path in ("", "static/js/textual.js", "download/x", "nope"):
        assert http_status(base + path) == 403
        assert http_status(f"{base}{path}?token={wrong}") == 403
        assert http_status(base + path, {"Cookie": f"{served.cookie}={wrong}"}) == 403
    ws = base.replace("http://", "ws://") + "ws"
    assert await ws_status(ws) == 403
    assert await ws_status(f"{ws}?token={wrong}") == 403
    assert await ws_status(ws, {"Cookie": f"{served.cookie}={wrong}"}) == 403
    # The right token from a foreign page (cross-site websocket hijacking): refused too.
    foreign = {"Cookie": f"{served.cookie}={token}", "Origin": "http://evil.example"}
    assert await ws_status(ws, foreign) == 403
    assert served.children() == []
    # The right token: the index sets the cookie and drops the token from the URL.
    assert http_status(served.url) == 302
    # A wrong token in the URL beside the right cookie: no cookie of the wrong token is set.
    request = urllib.request.Request(
        f"{base}?token={wrong}", headers={"Cookie": f"{served.cookie}={token}"}
    )
    with pytest.raises(urllib.error.HTTPError) as redirected:
        urllib.request.build_opener(NoRedirect).open(request, timeout=30)
    assert redirected.value.code == 302 and "Set-Cookie" not in redirected.value.headers
    assert http_status(base + "static/js/textual.js", {"Cookie": f"{served.cookie}={token}"}) == 200
    stop_served(served)
    assert "".join(served.lines).count(token) == 1  # printed once in the URL, never logged
    assert token not in served.proc.stderr.read()  # type: ignore[union-attr]


async def test_the_right_token_starts_one_app_per_websocket(serve) -> None:
    served = serve()
    ws = served.base.replace("http://", "ws://") + "ws"
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(ws, headers={"Cookie": f"{served.cookie}={served.token}"}) as socket,
    ):
        assert (await socket.receive(timeout=WAIT_S)).type == aiohttp.WSMsgType.BINARY
        assert len(served.children()) == 1
    wait_for(lambda: served.children() == [], "the app to end with its websocket")


def test_token_file_is_not_printed_and_is_required(tmp_path: Path, serve) -> None:
    secret = "team-secret-0123456789abcdef"
    token_file = tmp_path / "token"
    token_file.write_text(secret + "\n")
    served = serve("--token-file", str(token_file))
    assert secret not in "".join(served.lines)
    assert http_status(f"{served.base}?token={secret}") == 302
    assert http_status(f"{served.base}?token={secret[:-1]}") == 403


def test_serve_refusals_are_one_line(tmp_path: Path, journal: Path) -> None:
    short = tmp_path / "short"
    short.write_text("abc")
    binary = tmp_path / "binary"
    binary.write_bytes(b"\xff\xfe" * 20)
    for extra, code, words in (
        (["--token-file", str(short)], 2, "at least 16"),
        (["--token-file", "/dev/zero"], 2, "not a token file"),  # it read forever
        (["--token-file", str(binary)], 2, "not UTF-8 text"),
        (["--token-file", str(tmp_path / "missing")], 2, "cannot read token file"),
        (["--port", "70000"], 2, "not a port number"),
        (["--host", ""], 2, "0.0.0.0 for every interface"),  # not every interface silently
    ):
        result = refine(journal, "serve", *extra)
        assert result.returncode == code and words in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
    missing = refine(tmp_path / "nope.db", "serve")
    assert missing.returncode == 3 and "journal missing" in missing.stderr


def test_a_non_loopback_host_warns_to_put_tls_in_front(serve) -> None:
    served = serve("--host", "0.0.0.0")
    served.proc.send_signal(signal.SIGTERM)
    served.proc.wait(timeout=WAIT_S)
    err = served.proc.stderr.read()  # type: ignore[union-attr]
    assert "WARNING" in err and "TLS" in err and "reverse proxy" in err


async def test_a_killed_serve_takes_its_apps_with_it(serve) -> None:
    """Even SIGKILL (no shutdown code runs): each app dies with its parent (PR_SET_PDEATHSIG)."""
    served = serve()
    ws = served.base.replace("http://", "ws://") + "ws"
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(ws, headers={"Cookie": f"{served.cookie}={served.token}"}) as socket,
    ):
        assert (await socket.receive(timeout=WAIT_S)).type == aiohttp.WSMsgType.BINARY
        assert len(tui_processes(served.journal)) == 1
        served.proc.kill()
        served.proc.wait(timeout=WAIT_S)
        wait_for(lambda: not tui_processes(served.journal), "the app to die with refine serve")


async def test_malformed_messages_and_huge_sizes_are_refused_quietly(serve) -> None:
    """A socket's bad JSON or shapes are ignored (no traceback); its size is capped (memory)."""
    served = serve()
    ws = served.base.replace("http://", "ws://") + "ws?width=100000&height=100000"
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(ws, headers={"Cookie": f"{served.cookie}={served.token}"}) as socket,
    ):
        assert (await socket.receive(timeout=WAIT_S)).type == aiohttp.WSMsgType.BINARY
        env = served.children()[0].environ()
        assert (env["COLUMNS"], env["ROWS"]) == ("1000", "500")
        for bad in ("not json", '{"a": 1}', "[]", '["stdin", 5]', '["resize", {}]', "[7]"):
            await socket.send_str(bad)
        await socket.send_str('["resize", {"width": -5, "height": 10000000}]')
        await socket.send_str('["ping", "still-there"]')
        while (reply := await socket.receive(timeout=WAIT_S)).type == aiohttp.WSMsgType.BINARY:
            pass  # the app's screen updates
        assert reply.type == aiohttp.WSMsgType.TEXT and reply.json() == ["pong", "still-there"]
        assert len(served.children()) == 1
    stop_served(served)
    assert "Traceback" not in served.proc.stderr.read()  # type: ignore[union-attr]


# --- cookies: undecodable bytes, and two servers on one host --------------------------------------


def raw_status(base: str, path: str, cookie: bytes) -> int:
    """One request with the Cookie header's bytes as given (no client would encode them)."""
    parts = urllib.parse.urlsplit(base)
    host, port = parts.hostname or "", parts.port or 80
    with socket.create_connection((host, port), timeout=30) as conn:
        conn.sendall(
            b"GET " + path.encode() + b" HTTP/1.1\r\nHost: " + parts.netloc.encode()
            + b"\r\nCookie: " + cookie + b"\r\nConnection: close\r\n\r\n"
        )  # fmt: skip
        reply = b""
        while chunk := conn.recv(4096):
            reply += chunk
    return int(reply.split(b" ", 2)[1])


def test_an_undecodable_cookie_or_token_gets_403_quietly(serve) -> None:
    """Raw bytes in the Cookie header were a 500 with a traceback (UnicodeEncodeError)."""
    served = serve()
    path = urllib.parse.urlsplit(served.base).path
    for name in (served.cookie, "refine_token"):
        for where in (path, path + "static/js/textual.js", path + "ws", "/"):
            assert raw_status(served.base, where, name.encode() + b"=\xff\xfe\xfd") == 403
    assert http_status(f"{served.base}?token=%ff%fe%fd") == 403
    assert served.children() == []
    stop_served(served)
    err = served.proc.stderr.read()  # type: ignore[union-attr]
    assert "Traceback" not in err and "Error" not in err


class CookieEcho(http.server.BaseHTTPRequestHandler):
    """Another web service on this host: it records the cookies browsers send it."""

    seen: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        self.seen.append(self.headers.get("Cookie") or "")
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def test_two_servers_on_one_host_keep_their_cookies_and_send_them_nowhere_else(serve) -> None:
    """Cookies ignore the port: with one cookie name at path /, the second server's token
    replaced the first's in the browser (a 403 there) and went to every service on the host."""
    first, second = serve(), serve()
    jar = http.cookiejar.CookieJar()  # a browser's rules: one jar per host, whatever the port
    browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    for served in (first, second):
        with browser.open(served.url, timeout=30) as page:  # sets the cookie, then the page
            assert page.status == 200 and page.url == served.base
    for served in (first, second):  # each still opens with its own cookie
        with browser.open(served.base + "static/js/textual.js", timeout=30) as page:
            assert page.status == 200
    names = {(c.name, c.path) for c in jar}
    assert names == {(s.cookie, urllib.parse.urlsplit(s.base).path) for s in (first, second)}
    other = http.server.ThreadingHTTPServer(("127.0.0.1", 0), CookieEcho)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    try:
        for path in ("/", "/static/js/textual.js", "/ws"):
            with browser.open(f"http://127.0.0.1:{other.server_address[1]}{path}", timeout=30):
                pass
    finally:
        other.shutdown()
    assert CookieEcho.seen == ["", "", ""]  # no token of either server
