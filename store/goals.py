"""``store.goals``: the contract's import path; a re-export of ``store.model.goals``."""

from store.model.goals import *  # noqa: F403
from store.model.goals import __all__ as __all__
