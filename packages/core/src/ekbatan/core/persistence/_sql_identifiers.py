"""Names that are spliced into DDL (schemas, databases, table prefixes) must be plain identifiers."""

from __future__ import annotations

import re

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,47}$")


def validate_sql_identifier(value: str, what: str = "identifier") -> str:
    """Return ``value`` if it is a safe unquoted SQL identifier, else raise naming what to write.

    Lower case is required so the same name means the same thing on every dialect (PostgreSQL
    folds unquoted names to lower case, MySQL on Linux does not).
    """
    if not isinstance(value, str) or not _IDENTIFIER.match(value) or value != value.lower():
        raise ValueError(
            f"{what} {value!r} is not a plain SQL identifier; use lower-case letters, digits and "
            f"underscores, starting with a letter or underscore, at most 48 characters (e.g. 'eventlog')"
        )
    return value
