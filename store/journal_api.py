"""``store.journal_api``: the contract's import path; a re-export of ``store.journal.api``."""

from store.journal.api import *  # noqa: F403
from store.journal.api import __all__ as __all__
