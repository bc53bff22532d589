"""The journal layer: the interface, its two backends, locations and change sources.

Public surface: ``Journal`` (``Journal.open(path or postgresql:// URL)``) and the records every
layer above reads (``Event``, ``Stored``, ``Change``). The backends (``store.journal.sqlite``,
``store.journal.postgres``) are imported on first use by ``Journal.open``.
"""

from store.journal.api import Journal
from store.journal.core import Change, Event, Stored

__all__ = ["Change", "Event", "Journal", "Stored"]
