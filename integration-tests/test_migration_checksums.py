"""Every contributed migration keeps its statements byte for byte.

The migrator records each applied version's checksum in ``ekbatan_schema_history`` and warns on
every database whose recorded checksum differs from what the code now produces, so a refactor
of the DDL that changes a single byte (a space, the order of two columns) would warn every
installation. ``testsupport/migration_checksums.json`` holds each version's checksum per dialect,
for the default eventlog schema and another one, as released. A new version adds its lines there;
a released one never changes them.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

from ekbatan.core.migrations import load_contributions

PINNED = json.loads((Path(__file__).parent.parent / "testsupport" / "migration_checksums.json").read_text())
DIALECTS = ("postgresql", "mariadb", "mysql", "sqlite")
SCHEMAS = ("eventlog", "custom_log")


@functools.cache  # one computation for every parametrised case
def produced() -> dict[str, str]:
    return {
        f"{m.component} {m.version} {dialect} {schema}": m.checksum(
            m.statements_for(dialect, eventlog_schema=schema)
        )
        for m in load_contributions()
        for dialect in DIALECTS
        for schema in SCHEMAS
    }


@pytest.mark.parametrize("key", sorted(PINNED))
def test_a_released_version_produces_the_statements_it_was_released_with(key):
    now = produced()
    assert key in now, f"{key}: no package contributes this version any more"
    assert now[key] == PINNED[key], f"{key}: its statements changed; databases that applied it would warn"


def test_every_contributed_version_is_pinned():
    unpinned = sorted(set(produced()) - set(PINNED))
    assert not unpinned, (
        f"pin the checksums of the new version(s) in testsupport/migration_checksums.json: {unpinned}"
    )
