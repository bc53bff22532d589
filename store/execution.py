"""``store.execution``: the contract's import path; a re-export of ``store.model.execution``."""

from store.model.execution import *  # noqa: F403
from store.model.execution import __all__ as __all__
