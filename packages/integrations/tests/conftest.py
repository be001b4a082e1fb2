"""Fixtures of the integrations' tests: an application database on each dialect."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from integrations_support import AppDatabase, app_database


@pytest.fixture
def app_db(dialect: str) -> Iterator[AppDatabase]:
    with app_database(dialect) as created:
        yield created
