"""PID 1 of a test host's PID namespace (tests/helpers/hosts.py): reap orphans until told to stop.

When this process exits the kernel kills every other process in the namespace, so ending it is
how a host "powers off". It starts nothing itself; commands join the namespace with nsenter.
"""

from __future__ import annotations

import os
import signal

STOP = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}


def main() -> None:
    watched = {signal.SIGCHLD, *STOP}
    signal.pthread_sigmask(signal.SIG_BLOCK, watched)
    print("ready", flush=True)
    while signal.sigwait(watched) not in STOP:
        reap()


def reap() -> None:
    # Orphans of the host (a killed node's workers, a daemonised postmaster) end up here.
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


if __name__ == "__main__":
    main()
