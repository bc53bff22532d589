"""The commands that run until stopped (node, tui, serve, demo) and the doors to the commands
in modules of their own (events, metrics, logs), each imported only when it runs."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from refine_tui.cli.common import (
    EXIT_OK,
    UsageError,
    journal_path,
    journal_text,
    node_name,
    open_journal,
    printable,
)


def cmd_node(args: argparse.Namespace) -> int:
    from store.journal.slots import named

    with named(f"refine node {node_name(args)}"):  # its connections say so in pg_stat_activity
        return _serve_node(args)


def _serve_node(args: argparse.Namespace) -> int:
    import asyncio

    from store.node.scheduler import Node
    from store.ops.node_start import claim_node_name

    location = journal_path(args)
    open_journal(args, write=True).close()
    # A refusal (a bad node name, a state dir that cannot be made, a node of this name that
    # runs already) ends as every command's does: one line, the exit code of its kind.
    with Node(
        location,
        node_name(args),
        args.capacity,
        heartbeat_s=args.heartbeat,
        connections=args.max_connections,
    ) as node:
        lock = claim_node_name(node.journal, node.node_id, force=args.force)
        try:
            print(
                printable(
                    f"refine node: node {node.node_id} on journal {location.printable}, state dir"
                    f" {node.registry.root}, capacity {node.capacity},"
                    f" heartbeat {node.heartbeat_s:g} s"
                ),
                file=sys.stderr,
                flush=True,
            )
            return asyncio.run(node.serve())
        finally:
            lock.release()


def cmd_tui(args: argparse.Namespace) -> int:
    from store.journal import slots

    if os.environ.get(slots.SLOTS_ENV):  # a tab of `refine serve`: its connections, its wake-ups
        slots.share_from_env(application="refine tui (serve)")
        return _run_tui(args)
    with slots.named("refine tui"):
        return _run_tui(args)


def _run_tui(args: argparse.Namespace) -> int:
    from refine_tui.app import RefineApp

    location = journal_path(args)
    if location.is_server:  # a URL that can never connect is bad input now, not a wait
        from store.journal.postgres import connection_info

        connection_info(location.text)
    RefineApp(
        journal=journal_text(args),
        node=node_name(args),
        read_only=args.read_only,
        quiet=args.quiet,
        pulses=args.pulses,
    ).run()
    return EXIT_OK


def cmd_serve(args: argparse.Namespace) -> int:
    from store.journal.slots import max_connections, named

    with named("refine serve"):
        return _serve(args, max_connections(args.max_connections))


def _serve(args: argparse.Namespace, connections: int) -> int:
    from refine_tui.serve import TokenFileError, serve

    open_journal(args, write=False).close()  # refuse now, not in every tab
    try:
        return serve(
            journal=args.journal,
            node=node_name(args),
            host=args.host,
            port=args.port,
            read_only=args.read_only,
            token_file=Path(args.token_file) if args.token_file else None,
            connections=connections,
            location=journal_text(args),
        )
    except TokenFileError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:  # the address is taken or cannot be bound
        raise UsageError(
            f"cannot serve on {args.host}:{args.port}: {exc.strerror or exc}"
        ) from None


def cmd_events(args: argparse.Namespace) -> int:
    from refine_tui.cli.events import cmd_events as events

    return events(args)


def cmd_metrics(args: argparse.Namespace) -> int:
    from refine_tui.cli.metrics import cmd_metrics as metrics

    return metrics(args)


def cmd_logs(args: argparse.Namespace) -> int:
    from refine_tui.cli.logs import cmd_logs as logs

    return logs(args)


def cmd_demo(args: argparse.Namespace) -> int:
    from refine_tui.demo import run_demo

    # The demo makes its own SQLite journal and node: `--journal URL` was ignored in silence
    # (a demo on a file, where a server was asked for). The environment's defaults are not
    # refused: they are an operator's everyday settings, not asked of the demo.
    given = [
        f"--{k.replace('_', '-')}" for k in ("journal", "node", "state_dir") if getattr(args, k)
    ]
    if given:
        verb = "is" if len(given) == 1 else "are"
        raise UsageError(
            f"refine demo makes its own journal and node (in --dir); {', '.join(given)} {verb}"
            " not used: watch a journal with `refine --journal PATH|URL tui`"
        )
    return run_demo(Path(args.dir) if args.dir else None, quiet=args.quiet)
