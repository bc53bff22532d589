"""The integration tier: real journal files, real processes and signals, the real PostgreSQL
server (the root conftest starts it once per session), the dashboard under Pilot."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.pg_env import PgEnv


@pytest.fixture
def pg(postgres_url: str, tmp_path: Path) -> Iterator[PgEnv]:
    """A PostgreSQL journal (``refine init`` done) whose processes are all ended after."""
    env = PgEnv(postgres_url, tmp_path)
    try:
        yield env
    finally:
        env.cleanup()
