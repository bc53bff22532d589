"""Where a journal is: its path resolved once, before anything derives a folder from it.

The watch folder, the node folders and the process records all derive from the journal's
path. Reached through a symlink, the journal must still be the same journal: the watcher must
watch the folder where its ``-wal`` changes, and a node's records must be found whichever name
an operator used. So every derivation starts from the real path.
"""

from __future__ import annotations

import os
from pathlib import Path


def resolve_journal_path(path: str | os.PathLike[str]) -> Path:
    """The journal's real path: absolute, symlinks resolved (also for a file not yet there)."""
    return Path(os.path.realpath(os.fspath(path)))
