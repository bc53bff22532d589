"""An attempt's log, as the node writes it: its last lines, for evidence shown to people."""

from __future__ import annotations

import os


def log_tail(path: str | os.PathLike[str], lines: int = 20) -> list[str]:
    """The last ``lines`` lines of a log (decoded leniently, each as printed: carriage returns
    and all, up to its newline); [] when it is missing."""
    if lines <= 0:
        return []
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            end = f.tell()
            block, data = 8192, b""
            while end > 0 and data.count(b"\n") <= lines:
                start = max(0, end - block)
                f.seek(start)
                data = f.read(end - start) + data
                end = start
    except OSError:
        return []
    text = data.decode("utf-8", errors="replace")
    printed = text.split("\n")  # a line ends at its newline: a progress bar's \r is within it
    if printed[-1] == "":
        printed.pop()
    return printed[-lines:]
