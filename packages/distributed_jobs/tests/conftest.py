"""Fixtures for the engine's tests: an isolated database with ``scheduled_tasks`` created."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

from ekbatan.distributed_jobs.scheduler import SettableClock, create_table
from testsupport import IsolatedDatabase


@pytest.fixture
def engine(database: IsolatedDatabase) -> Iterator[sa.Engine]:
    """An engine on a fresh database holding an empty ``scheduled_tasks`` table."""
    eng = database.engine()
    create_table(eng)
    yield eng
    eng.dispose()


@pytest.fixture
def clock() -> SettableClock:
    return SettableClock(datetime(2024, 1, 1, 12, 0, tzinfo=UTC))
