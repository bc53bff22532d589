"""The store's records: frozen dataclasses (``dataclass``) and copies with changes (``replace``).

A frozen record is built by ``store.speedups.frozen_dataclass`` (what ``dataclasses`` builds,
at a fraction of the start-up cost); anything else goes to ``dataclasses`` itself.
"""

from store.speedups.frozen_dataclass import dataclass, replace

__all__ = ["dataclass", "replace"]
