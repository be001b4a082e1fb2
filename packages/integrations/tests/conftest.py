"""Fixtures of the integrations' tests: an application database on each dialect."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from integrations_support import AppDatabase, app_database

from ekbatan.integrations.operator.overview import OverviewReads

#: how long these tests' overview pages wait for their first count (seconds)
PATIENT_FIRST_WAIT = 10.0


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "shipped_first_wait: the operator overview keeps its shipped first-count wait"
    )


@pytest.fixture
def app_db(dialect: str) -> Iterator[AppDatabase]:
    with app_database(dialect) as created:
        yield created


@pytest.fixture(autouse=True)
def patient_first_count(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The overview's first request waits 0.15 s for its counts, then says it is counting: on a
    busy machine even a small table's first count can take longer, and a test reading the page's
    rows would meet the counting notice instead. These tests wait for the count, except those
    marked ``shipped_first_wait``, which test the notice itself."""
    if request.node.get_closest_marker("shipped_first_wait") is None:
        monkeypatch.setattr(OverviewReads, "first_wait", PATIENT_FIRST_WAIT)
