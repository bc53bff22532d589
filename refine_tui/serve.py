"""`refine serve`: the real dashboard in a browser, through textual-serve (DESIGN §13).

Each websocket (one per browser tab) runs its own `refine tui` process. Every request must carry
the access token, as `?token=` (the index then sets it as an HttpOnly cookie and redirects to a
URL without it) or as that cookie; anything else gets 403 before any process starts. The token
is compared in constant time and never logged (aiohttp's access log is off: it prints queries).

Browsers send a host's cookies to every port of it, so each server has a random id: its pages
live under ``/refine-<id>/`` and its cookie, ``refine_token_<id>``, is sent only there. Two
servers on one host keep their own cookies, and no other service on the host receives one.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import hmac
import ipaddress
import json
import os
import secrets
import signal
import sys
import tempfile
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp_jinja2
from aiohttp import WSMsgType, web
from textual_serve.app_service import AppService
from textual_serve.server import Server, to_int

if TYPE_CHECKING:
    from store.ops.metrics import JournalCollector

MIN_TOKEN_CHARS = 16
MAX_TOKEN_FILE_BYTES = 4096  # a token is a line: more is not a token file (/dev/zero never ends)
QUIT_GRACE_S = 5.0  # a tab's app gets this long to quit before SIGTERM, then as long to SIGKILL
FORBIDDEN = "403: Forbidden: open the URL with the token that `refine serve` printed\n"
FORBIDDEN_METRICS = "403: Forbidden: send the token as `Authorization: Bearer <token>`\n"
PR_SET_PDEATHSIG = 1
# A terminal larger than any screen's only use is to exhaust memory: 100000x100000 cells made
# one tab's app take 1.1 GB and a whole core.
MAX_COLUMNS, MAX_ROWS = 1000, 500
# xterm.js takes keys only while its hidden textarea has focus, which a click gives: focus it as
# soon as textual-serve has made it, so a key pressed after load reaches the dashboard.
FOCUS_ON_LOAD = """<script>
window.addEventListener("load", () => {
  const focus = () => {
    const input = document.querySelector("#terminal .xterm-helper-textarea");
    if (input) input.focus();
    return input !== null;
  };
  if (!focus()) {
    const watch = new MutationObserver(() => focus() && watch.disconnect());
    watch.observe(document.body, {childList: true, subtree: true});
  }
});
</script>
"""


class TokenFileError(Exception):
    """The --token-file is missing, unreadable, too large or too short to be a secret."""


def read_token_file(path: Path) -> str:
    try:
        with path.open("rb") as file:  # at most one byte past the limit: a device never ends
            data = file.read(MAX_TOKEN_FILE_BYTES + 1)
    except OSError as exc:
        raise TokenFileError(f"cannot read token file {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_TOKEN_FILE_BYTES:
        raise TokenFileError(
            f"token file {path} holds more than {MAX_TOKEN_FILE_BYTES} bytes: not a token file"
        )
    try:
        token = data.decode("utf-8").strip()
    except UnicodeError:
        raise TokenFileError(f"token file {path} is not UTF-8 text") from None
    if len(token) < MIN_TOKEN_CHARS or not token.isprintable() or " " in token:
        raise TokenFileError(
            f"token file {path} must hold one token of at least {MIN_TOKEN_CHARS} printable"
            " characters without spaces"
        )
    return token


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False


def cells(value: object, default: int, most: int) -> int:
    """A terminal dimension from the browser, kept between 1 and `most` (else the default)."""
    try:
        number: int = int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError, OverflowError):
        return default
    return min(max(number, 1), most)


def envelope(text: str) -> tuple[str, Any] | None:
    """A websocket message `[type, data]`, or None when it is not one (never a traceback)."""
    try:
        message = json.loads(text)
    except ValueError:
        return None
    if not isinstance(message, list) or not message or not isinstance(message[0], str):
        return None
    return message[0], (message[1] if len(message) > 1 else None)


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when `refine serve` dies, even by SIGKILL (Linux)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class TuiService(AppService):
    """One tab's `refine tui`: started without a shell, stopped for sure (no orphans)."""

    def __init__(self, argv: Sequence[str], env: dict[str, str], **kwargs: Any) -> None:
        super().__init__(" ".join(argv), **kwargs)
        self.argv, self.env = list(argv), env
        self._stopping = asyncio.Lock()

    async def _open_app_process(self, width: int = 80, height: int = 24) -> Any:
        width, height = cells(width, 80, MAX_COLUMNS), cells(height, 24, MAX_ROWS)
        env = {**self._build_environment(width=width, height=height), **self.env}
        process = await asyncio.create_subprocess_exec(
            *self.argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )
        self._process = process
        self._stdin = process.stdin
        return process

    async def stop(self) -> None:
        """Ask the app to quit; SIGTERM then SIGKILL if it does not, and reap it."""
        async with self._stopping:
            process, task = self._process, self._task
            if process is None or task is None:
                return
            self._task = None
            await self._download_manager.cancel_app_downloads(app_service_id=self.app_service_id)
            if process.returncode is None:
                await self.send_meta({"type": "quit"})
            for last_resort in (process.terminate, process.kill):
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(process.wait(), QUIT_GRACE_S)
                    break
                with contextlib.suppress(ProcessLookupError):
                    last_resort()
            await process.wait()
            with contextlib.suppress(Exception):
                await task


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class RefineServer(Server):
    """textual-serve's server with an access token, our own `refine tui` processes and shutdown."""

    def __init__(
        self, tui_argv: Sequence[str], tui_env: dict[str, str], *, host: str, port: int, token: str
    ) -> None:
        super().__init__(" ".join(tui_argv), host=host, port=port, title="refine")
        self.tui_argv, self.tui_env = list(tui_argv), tui_env
        self._token = token.encode()
        server_id = secrets.token_hex(4)
        self.prefix = f"/refine-{server_id}/"  # every page, socket and file of this server
        self.cookie = f"refine_token_{server_id}"
        self.services: set[TuiService] = set()
        self.sockets: set[web.WebSocketResponse] = set()

    # --- access ------------------------------------------------------------------------------

    def token_ok(self, candidate: str | None) -> bool:
        try:  # a header's undecodable bytes arrive as surrogates: no token, never a 500
            given = candidate.encode() if candidate is not None else None
        except UnicodeEncodeError:
            return False
        return given is not None and hmac.compare_digest(given, self._token)

    @web.middleware
    async def require_token(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        from_query = request.query.get("token")
        if not (self.token_ok(from_query) or self.token_ok(request.cookies.get(self.cookie))):
            return web.Response(status=403, text=FORBIDDEN)
        origin = request.headers.get("Origin")
        if origin and origin.split("://", 1)[-1] != request.host:  # cross-site page or socket
            return web.Response(status=403, text=FORBIDDEN)
        index = request.path in ("/", self.prefix)  # "/": a URL printed before the prefix
        if from_query is not None and index and request.method == "GET":
            # Keep the token out of the address bar, history and Referer: cookie, then redirect.
            query = request.rel_url.query.copy()
            query.popall("token")
            location = str(request.rel_url.with_path(self.prefix).with_query(query))
            redirect = web.Response(status=302, headers={"Location": location})
            if self.token_ok(from_query):  # a wrong one beside the right cookie must not replace it
                redirect.set_cookie(
                    self.cookie, from_query, httponly=True, samesite="Strict", path=self.prefix
                )
            return redirect
        response = await handler(request)
        if not response.prepared:
            response.headers["Referrer-Policy"] = "no-referrer"
        return response

    metrics: JournalCollector | None = None  # made at the first scrape

    @web.middleware
    async def serve_metrics(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """`/metrics` for Prometheus (DESIGN §16): the same token, sent as a bearer token (a
        scraper has no cookie; Prometheus' `authorization` setting sends it), checked here
        before the browser's rules. The journal is read in a thread, never on this loop."""
        if request.path != "/metrics":
            return await handler(request)
        scheme, _, candidate = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not self.token_ok(candidate.strip()):
            return web.Response(status=403, text=FORBIDDEN_METRICS)
        if self.metrics is None:
            from refine_tui.cli import DEFAULT_JOURNAL
            from store.ops.metrics import JournalCollector

            journal = self.tui_env.get("REFINE_JOURNAL") or os.environ.get("REFINE_JOURNAL")
            self.metrics = JournalCollector(journal or DEFAULT_JOURNAL)
        from store.ops.metrics import scrape

        accept = request.headers.get("Accept")
        status, body, content_type = await asyncio.to_thread(scrape, self.metrics, accept)
        return web.Response(status=status, body=body, headers={"Content-Type": content_type})

    async def on_startup(self, app: web.Application) -> None:
        """Quiet: `serve` prints the one URL to open (textual-serve's banner names the bind)."""

    async def _make_app(self) -> web.Application:
        """textual-serve's routes under this server's prefix, behind the token."""
        app = web.Application(middlewares=[self.serve_metrics, self.require_token])
        app.add_subapp(self.prefix, await super()._make_app())
        return app

    # --- pages and sockets ---------------------------------------------------------------------

    async def handle_index(self, request: web.Request) -> web.StreamResponse:
        """textual-serve's page, with URLs of the host the browser asked for (not the bind)."""
        forwarded_https = request.headers.get("X-Forwarded-Proto") == "https"
        secure = request.secure or forwarded_https
        base = f"{'https' if secure else 'http'}://{request.host}{self.prefix}"
        context = {
            "font_size": to_int(request.query.get("fontsize", "16"), 16),
            "app_websocket_url": f"{'wss' if secure else 'ws'}://{request.host}{self.prefix}ws",
            "config": {"static": {"url": f"{base}static/"}},
            "application": {"name": self.title},
        }
        page = aiohttp_jinja2.render_template("app_index.html", request, context)
        page.text = (page.text or "").replace("</body>", FOCUS_ON_LOAD + "</body>", 1)
        return page

    async def handle_websocket(self, request: web.Request) -> web.WebSocketResponse:
        websocket = web.WebSocketResponse(heartbeat=15)
        width = to_int(request.query.get("width", "80"), 80)
        height = to_int(request.query.get("height", "24"), 24)
        await websocket.prepare(request)
        service = TuiService(
            self.tui_argv,
            self.tui_env,
            write_bytes=websocket.send_bytes,
            write_str=websocket.send_str,
            close=websocket.close,
            download_manager=self.download_manager,
        )
        self.sockets.add(websocket)
        self.services.add(service)
        try:
            await service.start(width, height)
            await self._process_messages(websocket, service)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:  # the tab closed (or we are stopping): its app goes with it
            await service.stop()
            self.services.discard(service)
            self.sockets.discard(websocket)
            await websocket.close()
        return websocket

    async def _process_messages(
        self, websocket: web.WebSocketResponse, app_service: AppService
    ) -> None:
        """textual-serve's loop, but a malformed message is ignored instead of a traceback."""
        async for message in websocket:
            parsed = envelope(message.data) if message.type == WSMsgType.TEXT else None
            if parsed is None:
                continue
            kind, data = parsed
            if kind == "stdin" and isinstance(data, str):
                await app_service.send_bytes(data.encode("utf-8", "replace"))
            elif kind == "resize" and isinstance(data, dict):
                width = cells(data.get("width"), 80, MAX_COLUMNS)
                await app_service.set_terminal_size(width, cells(data.get("height"), 24, MAX_ROWS))
            elif kind == "ping":
                await websocket.send_json(["pong", data])
            elif kind == "blur":
                await app_service.blur()
            elif kind == "focus":
                await app_service.focus()

    async def stop_all(self) -> None:
        await asyncio.gather(*(s.stop() for s in list(self.services)), return_exceptions=True)
        await asyncio.gather(*(w.close() for w in list(self.sockets)), return_exceptions=True)

    # --- running -----------------------------------------------------------------------------

    async def run(self, announce: Callable[[int], None]) -> None:
        """Serve until SIGINT/SIGTERM, then end every tab's app before returning."""
        runner = web.AppRunner(
            await self._make_app(), access_log=None, handle_signals=False, shutdown_timeout=5
        )
        await runner.setup()
        try:
            site = web.TCPSite(runner, self.host, self.port)
            await site.start()
            server = site._server
            sockets = getattr(server, "sockets", None) or ()
            announce(sockets[0].getsockname()[1] if sockets else self.port)
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(signum, stop.set)
            await stop.wait()
            await self.stop_all()
        finally:
            await runner.cleanup()


@contextlib.contextmanager
def shared_connections(journal: str | None, limit: int) -> Iterator[dict[str, str]]:
    """For a PostgreSQL journal, what makes every tab share ``limit`` connections with this
    server (DESIGN §14): the environment naming their slots and the file that wakes them (this
    server relays its one LISTEN there, ``relay_wakeups``); a private folder, gone after."""
    from store.journal.locations import JournalLocation
    from store.journal.slots import KEPT, SLOTS_ENV, WAKE_FILE_ENV, ConnectionSlots

    if journal is None or not JournalLocation(journal).is_server:
        yield {}  # a file journal: no server connections to bound
        return
    with tempfile.TemporaryDirectory(prefix="refine-serve-") as folder:
        slots = ConnectionSlots(Path(folder) / "connections", limit - KEPT)  # LISTEN, /metrics
        wake = Path(folder) / "wake"
        wake.write_text("0\n")
        yield {SLOTS_ENV: slots.to_env(), WAKE_FILE_ENV: str(wake)}


async def relay_wakeups(journal: str, wake_file: Path) -> None:
    """This server's one LISTEN, relayed to its tabs: each batch rewrites ``wake_file``, whose
    change each tab's watcher sees (a hint: the tab then reads what changed)."""
    from store.journal.api import Journal

    watcher = Journal.watch(journal)
    batches = 0
    try:
        async for _ in watcher:
            batches += 1
            with contextlib.suppress(OSError):
                wake_file.write_text(f"{batches}\n")
    finally:
        watcher.stop()


def tui_command(
    journal: str | None, node: str, read_only: bool
) -> tuple[list[str], dict[str, str]]:
    """The `refine tui` each tab runs: this Python, so the same install and PYTHONPATH.

    The journal goes by $REFINE_JOURNAL, not argv: a postgresql:// URL may hold a password, and
    argv is visible to every user in the process list.
    """
    argv = [sys.executable, "-m", "refine_tui.cli", "--node", node, "tui"]
    env = {"REFINE_JOURNAL": journal} if journal is not None else {}
    return ([*argv, "--read-only"] if read_only else argv), env


def url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def serve(
    *,
    journal: str | None,
    node: str,
    host: str,
    port: int,
    read_only: bool,
    token_file: Path | None,
    connections: int = 5,
    location: str | None = None,
) -> int:
    """``location``: where the journal is (``journal``, else the environment's): a server
    journal's tabs share ``connections`` with this process."""
    token = read_token_file(token_file) if token_file else secrets.token_urlsafe(32)
    argv, env = tui_command(journal, node, read_only)
    location = location or journal
    with shared_connections(location, connections) as shared:
        server = RefineServer(argv, {**env, **shared}, host=host, port=port, token=token)
        return _serve(server, shared, location, node, host, read_only, token, token_file)


def _serve(
    server: RefineServer,
    shared: dict[str, str],
    journal: str | None,
    node: str,
    host: str,
    read_only: bool,
    token: str,
    token_file: Path | None,
) -> int:

    def announce(bound_port: int) -> None:
        base = f"http://{url_host(host)}:{bound_port}{server.prefix}"
        shown = f"<the token in {token_file}>" if token_file else token
        mode = " (read-only)" if read_only else ""
        print(f"refine serve: the dashboard{mode} for node {node} at", flush=True)
        print(f"    {base}?token={shown}", flush=True)
        if not is_loopback(host):
            print(
                f"refine serve: WARNING: serving on {host} in clear text: anyone on the path can"
                " read the token and the dashboard; put TLS (a reverse proxy) in front",
                file=sys.stderr,
                flush=True,
            )
        print("refine serve: Ctrl+C stops it and every tab's dashboard", flush=True)

    async def run() -> None:
        from store.journal.slots import WAKE_FILE_ENV

        relay = None
        if journal is not None and WAKE_FILE_ENV in shared:
            relay = asyncio.create_task(relay_wakeups(journal, Path(shared[WAKE_FILE_ENV])))
        try:
            await server.run(announce)
        finally:
            if relay is not None:
                relay.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await relay

    asyncio.run(run())
    return 0
