"""A database as the releases before the local event handler contributed ``event_notifications``
left it: core's component ``eventlog`` — 1 (the schema, ``events``, ``event_notifications``), 2
(``event_notifications_open`` on MariaDB/MySQL), 3 (``action_traces``) — applied and recorded by
the migrator from their statements as those releases had them, frozen in
``previous_eventlog_versions.json``, so the checksums in ``ekbatan_schema_history`` are theirs.

Imported by name (``from testsupport.previous_eventlog import previous_eventlog_migrations``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ekbatan.core.migrations import Migration

FROZEN = Path(__file__).with_name("previous_eventlog_versions.json")


def frozen_versions() -> dict[str, Any]:
    return json.loads(FROZEN.read_text("utf-8"))


def previous_eventlog_migrations() -> list[Migration]:
    """``eventlog`` 1 to 3 as the previous releases contributed them."""
    frozen = frozen_versions()
    return [
        Migration(frozen["component"], v["version"], v["description"], _statements(v["statements"]))
        for v in frozen["versions"]
    ]


def _statements(by_dialect: dict[str, list[str]]) -> Callable[..., list[str]]:
    def statements(dialect: str, *, eventlog_schema: str) -> list[str]:
        return [statement.replace("{schema}", eventlog_schema) for statement in by_dialect[dialect]]

    return statements
