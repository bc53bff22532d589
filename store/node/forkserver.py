"""A warm forkserver: the node forks light workers from a zygote instead of starting Pythons.

``python -m store.node.forkserver ROOM`` is started by ``refine node`` (the scheduler) with
``$REFINE_JOURNAL`` set, as a worker would be. It imports the worker (and the journal's backend),
freezes those objects out of the collector (``gc.freeze``: collections then never write to
their pages, which stay shared), says ``ready`` and forks one worker per request. A forked
worker costs a few unshared pages instead of a fresh interpreter (≈ 16 MB USS, ≈ 150 ms).

Lines on the zygote's stdin / stdout:

- node → zygote: a JSON list, the argv ``python -m store.worker ...`` would get;
- zygote → node: ``ready``, then per request ``started PID CREATE_TIME`` or ``failed WHY``,
  and ``exited PID CODE`` once it reaped a worker (no zombies; the code says a refused start).

The child is what ``subprocess.Popen(argv, start_new_session=True)`` would start: its own
session (it outlives the node and is stopped as a group), default signals, stdin from
/dev/null, output to the node log, ``$REFINE_JOURNAL`` inherited (never argv: a URL may hold a
password), and ``/proc/PID/cmdline`` rewritten to that argv (``ps``, records and
``live_worker`` see ``store.worker --token ...``). It opens its journal only after the fork: no
connection is ever shared. The zygote ends when its stdin closes (the node exited); workers
run on. Anything wrong with the zygote makes the node start the worker the usual way.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import json
import math
import os
import select
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Mapping, Sequence
from typing import IO

# Imported first, as the claim helper needs it (ProcessRecord.for_current_process): imported
# later (by the rehearsal) it left each worker ≈ 0.1–0.2 MB more unshared memory, growing with
# the launches (issue 14; 30 one after another: median 3.98 → 3.81 MB).
import psutil  # noqa: F401

from store.host.processes import create_time

READY_S = 30.0  # a zygote not ready by then (a loaded box) is given up for the usual path
REPLY_S = 5.0  # how long a fork request may take before the zygote is given up
BATCH = 200  # fork requests sent at once (their replies, ≈ 40 bytes each, fit a pipe's buffer)
EXIT_CRASHED = 70  # the worker raised out of main (its traceback is in the node log)


def cmdline(argv: Sequence[str]) -> bytes:
    """``argv`` as ``/proc/PID/cmdline`` holds it."""
    return b"".join(os.fsencode(a) + b"\0" for a in argv)


def _zygote_argv(room: int) -> list[str]:
    """The zygote's command line: at least ``room`` bytes, for its workers' to be written over
    (a shorter one leaves empty arguments at the end: only the tail of the zygote's ``-``)."""
    head = [sys.executable, "-m", "store.node.forkserver"]
    return [*head, "-" * max(1, room - len(cmdline(head)) - 1)]


# --- the node's side -------------------------------------------------------------------------


class Forkserver:
    """The node's handle on its zygote (started on first use, restarted after it died)."""

    def __init__(self, env: Mapping[str, str], log: IO[bytes], room: int) -> None:
        """``room``: the longest worker command line (``cmdline``) it will be asked for."""
        self._env = dict(env)
        self._room = room
        self._log = log
        self._proc: subprocess.Popen[bytes] | None = None
        self._buffer = b""
        self._exits: dict[int, int] = {}
        self._failures = 0  # zygotes that would not start: after 3, the usual path only

    def start(self) -> bool:
        """Have a ready zygote; False when there is none (start workers the usual way)."""
        if self._proc is not None and self._proc.poll() is None:
            return True
        self._drop()
        if self._failures >= 3:
            return False
        self._proc = subprocess.Popen(
            _zygote_argv(self._room),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            env=self._env,
        )
        if self._line(time.monotonic() + READY_S) != "ready":
            self._failures += 1
            self._drop()
            return False
        self._failures = 0
        return True

    def launch(self, argv: Sequence[str]) -> tuple[int, float] | None:
        """Fork a worker with ``argv``: its (pid, create time), or None when the zygote
        cannot (nothing was started then, or the zygote is broken and its child is on its own:
        the journal refuses a second claim either way)."""
        return self.launch_all([argv])[0]

    def launch_all(self, argvs: Sequence[Sequence[str]]) -> list[tuple[int, float] | None]:
        """``launch`` for each, the requests pipelined: many Goals at once wait for one round
        trip per batch, not one per worker (``BATCH`` keeps the replies within a pipe's buffer)."""
        results: list[tuple[int, float] | None] = []
        for at in range(0, len(argvs), BATCH):
            results += self._batch(argvs[at : at + BATCH])
        return results

    def _batch(self, argvs: Sequence[Sequence[str]]) -> list[tuple[int, float] | None]:
        fits = [len(cmdline(argv)) <= self._room for argv in argvs]
        if not any(fits) or not self.start():
            return [None] * len(argvs)
        assert self._proc is not None and self._proc.stdin is not None
        requests = b"".join(
            json.dumps(list(argv)).encode() + b"\n"
            for argv, ok in zip(argvs, fits, strict=True)
            if ok
        )
        try:
            self._proc.stdin.write(requests)
            self._proc.stdin.flush()
        except OSError:
            self._drop()
            return [None] * len(argvs)
        deadline = time.monotonic() + REPLY_S * len(argvs)
        results: list[tuple[int, float] | None] = []
        for ok in fits:
            reply = self._line(deadline) if ok and self._proc is not None else None
            if ok and reply is None:
                self._drop()  # no word in time: the zygote is given up (and restarted)
            if reply is None or not reply.startswith("started "):
                results.append(None)
                continue
            _, pid, create_time = reply.split()
            results.append((int(pid), float(create_time)))
        return results

    def exit_code(self, pid: int, wait_s: float = 0.0) -> int | None:
        """The exit code of a worker this zygote forked, once it reaped it (None: not yet, or
        the zygote died and cannot tell)."""
        deadline = time.monotonic() + wait_s
        while pid not in self._exits and self._line(deadline, want=False) is not None:
            pass
        return self._exits.pop(pid, None)

    def close(self) -> None:
        """End the zygote (its stdin closes); the workers it forked run on."""
        self._drop(grace_s=2.0)

    def _line(self, deadline: float, *, want: bool = True) -> str | None:
        """The next line that is not an exit report (``want``), recording exit reports on the
        way; or, with ``want=False``, after one read that found anything. None: timed out, or
        the zygote ended."""
        proc = self._proc
        if proc is None or proc.stdout is None:
            return None
        fd = proc.stdout.fileno()
        while True:
            while b"\n" in self._buffer:
                raw, self._buffer = self._buffer.split(b"\n", 1)
                line = raw.decode(errors="replace")
                kind, _, rest = line.partition(" ")
                if kind == "exited":
                    pid, code = rest.split()
                    self._exits[int(pid)] = int(code)
                    if not want:
                        return line
                elif want:
                    return line
            left = deadline - time.monotonic()
            poller = select.poll()  # not select: the node's descriptors may pass 1024
            poller.register(fd, select.POLLIN)
            if not poller.poll(max(0, math.ceil(left * 1000))):
                return None
            data = os.read(fd, 65536)
            if not data:
                return None
            self._buffer += data

    def _drop(self, grace_s: float = 0.0) -> None:
        proc, self._proc, self._buffer = self._proc, None, b""
        if proc is None:
            return
        with contextlib.suppress(OSError):
            assert proc.stdin is not None
            proc.stdin.close()
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


# --- the zygote ------------------------------------------------------------------------------


def serve() -> int:
    """Fork workers on request until stdin closes."""
    parser = _warm()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the node ends us, by closing our stdin
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes select through wake_w
    gc.collect()
    gc.freeze()
    _say("ready")
    room = _argv_area()[1]
    pending = b""
    while True:
        ready = select.select([0, wake_r], [], [])[0]
        if wake_r in ready:
            os.read(wake_r, 4096)
        replies = _reap()
        data = os.read(0, 65536) if 0 in ready else None
        if data is not None:
            pending += data
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            replies.append(_fork(json.loads(line), room, parser, (wake_r, wake_w)))
        # One write for all the requests read at once: a reply each would wake the node (and
        # switch to it) once per fork, which with 1,000 at once took a quarter of our time.
        if replies:
            _say(*replies)
        if data == b"":
            return 0


def _warm() -> argparse.ArgumentParser:
    """Import what every worker needs and build its parser, so the children share them."""
    from store.errors import RefineError
    from store.journal.api import backend_for
    from store.node import worker

    parser = worker.parser()
    parser.parse_args(["--journal", "j", "--node", "n", "--goal", "g", "--token", "t"])
    with contextlib.suppress(RefineError):  # the journal's backend (and its driver)
        backend_for(os.environ.get(worker.JOURNAL_ENV, ""))
    worker.rehearse()  # its first run's writes happen here, once, not in every child
    return parser


def _reap() -> list[str]:
    """``exited PID CODE`` for each worker that exited (reaped now)."""
    said: list[str] = []
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return said
        if pid == 0:
            return said
        said.append(f"exited {pid} {os.waitstatus_to_exitcode(status)}")


def _fork(
    argv: list[str], room: int, parser: argparse.ArgumentParser, private: tuple[int, int]
) -> str:
    """Fork the worker ``argv`` names; the reply: ``started PID CREATE_TIME`` or ``failed WHY``."""
    if len(cmdline(argv)) > room:
        return "failed the command line does not fit"
    try:
        pid = os.fork()
    except OSError as exc:
        return f"failed {exc}"
    if pid == 0:
        _child(argv, parser, private)
    # Unreaped until we wait for it, so the pid is still this child's (a zombie has one too).
    created = create_time(pid)
    if created is None:
        return "failed the worker is gone"  # never: it is our unreaped child
    return f"started {pid} {created!r}"


def _child(argv: list[str], parser: argparse.ArgumentParser, private: tuple[int, int]) -> None:
    """Become the worker ``argv`` names, as if started by Popen; never returns."""
    code = EXIT_CRASHED
    try:
        os.setsid()
        signal.set_wakeup_fd(-1)
        for fd in private:
            os.close(fd)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        os.dup2(2, 1)  # the protocol pipe is the zygote's, not ours: output goes to the log
        _show_argv(argv)
        from store.node.worker import main

        code = main(argv[3:], parser)
    except SystemExit as exc:  # argparse
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _show_argv(argv: list[str]) -> None:
    """Write ``argv`` over our inherited command line (the zygote's, room checked)."""
    start, room = _argv_area()
    text = cmdline(argv)
    if len(text) <= room:
        ctypes.memmove(start, text, len(text))
        ctypes.memset(start + len(text), 0, room - len(text))


def _argv_area() -> tuple[int, int]:
    """Where our command line is in memory, and its size (``/proc/self/stat`` fields 48, 49)."""
    with open("/proc/self/stat", "rb") as f:
        fields = f.read().rpartition(b")")[2].split()
    start, end = int(fields[45]), int(fields[46])
    return start, end - start


def _say(*lines: str) -> None:
    data = "".join(line + "\n" for line in lines).encode()
    while data:
        data = data[os.write(1, data) :]


if __name__ == "__main__":
    sys.exit(serve())
