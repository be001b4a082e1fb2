"""Fixtures shared by every package: the dialect matrix on real database servers.

``--db=postgres,mariadb,mysql,sqlite`` narrows the matrix (default: all four). A server that
cannot be reached is an error, never a skip.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import settings

from testsupport import ALL_DIALECTS, IsolatedDatabase, create_isolated_database

# Property tests draw the same examples on every run (derandomize), so CI cannot fail on one run and
# pass on the next; a failure prints the falsifying example and a @reproduce_failure blob. Set
# HYPOTHESIS_PROFILE=explore for fresh random examples on each run when hunting for bugs.
settings.register_profile("ekbatan", derandomize=True, database=None, deadline=None, print_blob=True)
settings.register_profile("explore", database=None, deadline=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ekbatan"))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--db",
        default=",".join(ALL_DIALECTS),
        help="comma-separated dialects to run database tests on (postgres,mariadb,mysql,sqlite)",
    )


def selected_dialects(config: pytest.Config) -> list[str]:
    chosen = [d.strip() for d in config.getoption("--db").split(",") if d.strip()]
    unknown = [d for d in chosen if d not in ALL_DIALECTS]
    if unknown:
        raise pytest.UsageError(f"--db: unknown dialect(s) {unknown}; choose from {list(ALL_DIALECTS)}")
    return chosen


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # A test asks for ``dialect`` to run once per selected dialect; a marker
    # ``@pytest.mark.dialects("postgres", "mariadb")`` restricts it to those (capability, not skip).
    if "dialect" in metafunc.fixturenames:
        wanted = selected_dialects(metafunc.config)
        marker = metafunc.definition.get_closest_marker("dialects")
        if marker is not None:
            wanted = [d for d in wanted if d in marker.args]
        metafunc.parametrize("dialect", wanted)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "dialects(*names): run this test only on these dialects (a capability of the feature)"
    )


#: how many quick tests' time one test marked ``slow`` or ``cluster`` takes, roughly (a
#: quick test takes a fraction of a second; those spawn processes or servers for seconds)
_HEAVY = 30


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # The suite runs in two processes that take whole files (``--dist loadfile``), in the order
    # given here. The heaviest files go first, so the many quick ones fill in at the end; in the
    # collection's order the cluster and browser tests came last and one process ran them alone
    # while the other sat idle. The sort is stable: each file keeps its own order.
    weight: dict[object, int] = {}
    for item in items:
        heavy = item.get_closest_marker("slow") is not None or item.get_closest_marker("cluster") is not None
        weight[item.path] = weight.get(item.path, 0) + (_HEAVY if heavy else 1)
    items.sort(key=lambda item: -weight[item.path])


@pytest.fixture
def database(dialect: str) -> Iterator[IsolatedDatabase]:
    """A fresh, empty schema (PostgreSQL) or database (MariaDB/MySQL) or file (SQLite)."""
    db = create_isolated_database(dialect, scope="schema")
    try:
        yield db
    finally:
        db.drop()


@pytest.fixture
def whole_database(dialect: str) -> Iterator[IsolatedDatabase]:
    """A fresh, whole database (for tests that create schemas such as ``eventlog`` themselves)."""
    db = create_isolated_database(dialect, scope="database")
    try:
        yield db
    finally:
        db.drop()
