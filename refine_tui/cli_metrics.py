"""`refine metrics`: a read-only Prometheus exporter of one journal (DESIGN §16).

Like postgres_exporter, one per journal (not per node): it opens the journal read-only and
answers ``GET /metrics`` from ``store.metrics.JournalCollector``, in the Prometheus text format
or OpenMetrics as the scraper's ``Accept`` asks. It binds 127.0.0.1 unless told otherwise and
has no token: what it shows (counts per node and status) is for whoever can reach the port.
A scrape while the journal is unusable (a server restart) answers 503 with the reason in one
line, and Prometheus marks the target down for that scrape.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import socket
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from refine_tui.cli import (
    EXIT_OK,
    UsageError,
    bind_host,
    journal_path,
    open_journal,
    port_number,
    printable,
)
from refine_tui.serve import is_loopback, url_host
from store.journal_url import redact
from store.metrics import TEXT, JournalCollector, scrape

DEFAULT_PORT = 9464


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--host", type=bind_host, default="127.0.0.1", help="address to bind (default loopback)"
    )
    parser.add_argument(
        "--port", type=port_number, default=DEFAULT_PORT,
        help=f"port to serve /metrics on (default {DEFAULT_PORT}; 0 picks a free one)",
    )  # fmt: skip


class MetricsServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, host: str, port: int, collector: JournalCollector) -> None:
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.collector = collector
        super().__init__((host, port), MetricsHandler)


class MetricsHandler(BaseHTTPRequestHandler):
    server: MetricsServer

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        if path == "/metrics":
            self._metrics()
        elif path == "/":
            self._send(200, TEXT, b"refine metrics: scrape /metrics\n")
        else:
            self._send(404, TEXT, b"not found: scrape /metrics\n")

    def _metrics(self) -> None:
        status, body, content_type = scrape(self.server.collector, self.headers.get("Accept"))
        self._send(status, content_type, body)

    def _send(self, status: int, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: one line per scrape every few seconds would bury anything worth reading."""


class _Stopped(Exception):
    """SIGTERM: leave serve_forever as Ctrl+C does."""


def cmd_metrics(args: argparse.Namespace) -> int:
    location = journal_path(args)
    open_journal(args, write=False).close()  # refuse a missing or foreign journal now
    collector = JournalCollector(location)
    try:
        collector.refresh()  # the history is folded now, not in the first scrape
        try:
            server = MetricsServer(args.host, args.port, collector)
        except OSError as exc:
            raise UsageError(
                f"cannot serve on {args.host}:{args.port}: {exc.strerror or exc}"
            ) from None
        with server:
            announce(args.host, server.server_address[1], redact(str(location)))
            serve(server)
    finally:
        collector.close()
    return EXIT_OK


def announce(host: str, port: int, shown: str) -> None:
    print(
        printable(f"refine metrics: the journal {shown} at http://{url_host(host)}:{port}/metrics"),
        flush=True,
    )
    if not is_loopback(host):
        print(
            f"refine metrics: WARNING: serving on {host} without a token: anyone who can reach"
            " the port reads the metrics",
            file=sys.stderr,
            flush=True,
        )


def serve(server: MetricsServer) -> None:
    """Until SIGINT or SIGTERM."""

    def stop(signum: int, frame: object) -> None:
        raise _Stopped

    signal.signal(signal.SIGTERM, stop)
    with contextlib.suppress(KeyboardInterrupt, _Stopped):
        server.serve_forever()
