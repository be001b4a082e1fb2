"""Fixtures of the local event handler's tests: migrated shards on the real servers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pipeline_support import PipelineShard, pipeline_shards


@pytest.fixture
def shards(dialect: str) -> Iterator[list[PipelineShard]]:
    """Two shards (two databases) on PostgreSQL, one on the other dialects."""
    with pipeline_shards(dialect, 2 if dialect == "postgres" else 1) as created:
        yield created


@pytest.fixture
def one_shard(dialect: str) -> Iterator[PipelineShard]:
    with pipeline_shards(dialect, 1) as created:
        yield created[0]
