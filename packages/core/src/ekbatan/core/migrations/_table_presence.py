"""Whether an optional framework table is there yet, looked up once and remembered: a table a
later migration adds (``action_traces``) may be missing until ``ekbatan migrate`` runs, and the
code that uses it must then do without — and find it once it appears, with no restart."""

from __future__ import annotations

import threading
import time

import sqlalchemy as sa

__all__ = ["RECHECK_MISSING", "TablePresence"]

#: a missing table is looked for again after this many seconds
RECHECK_MISSING = 60.0


class TablePresence:
    def __init__(self, recheck_missing: float = RECHECK_MISSING) -> None:
        self.recheck_missing = recheck_missing
        self._lock = threading.Lock()
        #: table → (present, when looked at)
        self._seen: dict[str, tuple[bool, float]] = {}

    def exists(self, connection: sa.Connection, table: sa.Table) -> tuple[bool, bool]:
        """(whether ``table`` exists, whether this is the first time it was found missing: the
        moment to warn once)."""
        key = str(table)
        with self._lock:
            seen = self._seen.get(key)
        if seen is not None and (seen[0] or time.monotonic() - seen[1] < self.recheck_missing):
            return seen[0], False
        present = sa.inspect(connection).has_table(table.name, schema=table.schema)
        with self._lock:
            self._seen[key] = (present, time.monotonic())
        return present, not present and seen is None
