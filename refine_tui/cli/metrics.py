"""`refine metrics`: a read-only Prometheus exporter of one journal (DESIGN §16).

Like postgres_exporter, one per journal (not per node): it opens the journal read-only and
answers ``GET /metrics`` from ``store.ops.metrics.JournalCollector``, in the Prometheus text format
or OpenMetrics as the scraper's ``Accept`` asks (``refine_tui.metrics_http``). It binds
127.0.0.1 unless told otherwise and has no token: what it shows (counts per node and status)
is for whoever can reach the port. A scrape while the journal is unusable (a server restart)
answers 503 with the reason in one line, and Prometheus marks the target down for that scrape.
"""

from __future__ import annotations

import argparse
import sys

from refine_tui.cli.common import EXIT_OK, UsageError, journal_path, open_journal, printable
from refine_tui.cli.values import bind_host, port_number

DEFAULT_PORT = 9464


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--host", type=bind_host, default="127.0.0.1", help="address to bind (default loopback)"
    )
    parser.add_argument(
        "--port", type=port_number, default=DEFAULT_PORT,
        help=f"port to serve /metrics on (default {DEFAULT_PORT}; 0 picks a free one)",
    )  # fmt: skip


def cmd_metrics(args: argparse.Namespace) -> int:
    from refine_tui.metrics_http import MetricsServer
    from store.ops.metrics import JournalCollector

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
            announce(args.host, server.server_address[1], location.printable)
            server.serve_until_stopped()
    finally:
        collector.close()
    return EXIT_OK


def announce(host: str, port: int, shown: str) -> None:
    from refine_tui.serve import is_loopback, url_host

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
