"""The HTTP side of `refine metrics`: ``GET /metrics`` on a small threaded server.

Each scrape runs the collector in the request's thread (the collector serializes them); a
journal that is unusable answers 503 (``store.ops.metrics.scrape``). Requests are not logged: a
line per scrape every few seconds would bury anything worth reading.
"""

from __future__ import annotations

import signal
import socket
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from store.ops.metrics import TEXT, JournalCollector, scrape


class MetricsServer(ThreadingHTTPServer):
    # Request threads are not daemons: the interpreter waits for them as it exits rather than
    # stopping one mid-answer, which crashed it once (SIGSEGV, exit -11, CI on 1edc442, Python
    # 3.11.2). Nothing lists them (``block_on_close``): a signal landing between a thread's
    # creation and its start left one in the list that ``server_close`` could not join.
    daemon_threads = False
    block_on_close = False

    def __init__(self, host: str, port: int, collector: JournalCollector) -> None:
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.collector = collector
        super().__init__((host, port), MetricsHandler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A connection that failed mid-answer (a scrape that timed out and went away, or one
        cut as the exporter exits) is no error of the exporter's; anything else is one line on
        stderr, never a traceback."""
        exc = sys.exc_info()[1]
        if isinstance(exc, OSError):
            return
        print(f"refine metrics: a request failed: {exc!r}"[:300], file=sys.stderr)

    timeout = 0.5  # handle_request's wait for a connection: how soon a stop is seen

    def serve_until_stopped(self) -> None:
        """Until SIGINT or SIGTERM (either ends it quietly). The requests in flight are then
        answered before the process exits (each waits on its client at most
        ``MetricsHandler.timeout``), and a second signal meanwhile is ignored: the stop it
        asks for is under way.

        The signal only notes the stop; the loop sees it within ``timeout``. An exception
        raised from the handler instead lands wherever the main thread is, and once, while it
        was starting a request's thread, the exporter did not end (CI on 00de926).
        """
        stops: list[int] = []

        def stop(signum: int, frame: object) -> None:
            stops.append(signum)

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        while not stops:
            self.handle_request()
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)


class MetricsHandler(BaseHTTPRequestHandler):
    server: MetricsServer
    timeout = 10  # seconds a silent client may hold its thread (and the exporter's stop)

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        if path == "/metrics":
            status, body, content_type = scrape(self.server.collector, self.headers.get("Accept"))
            self._send(status, content_type, body)
        elif path == "/":
            self._send(200, TEXT, b"refine metrics: scrape /metrics\n")
        else:
            self._send(404, TEXT, b"not found: scrape /metrics\n")

    def _send(self, status: int, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet (see the module's note)."""
