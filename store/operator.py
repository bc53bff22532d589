"""``store.operator``: the contract's import path; a re-export of ``store.ops.operator``."""

from store.ops.operator import *  # noqa: F403
from store.ops.operator import __all__ as __all__
