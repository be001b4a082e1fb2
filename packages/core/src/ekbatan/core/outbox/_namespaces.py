"""``namespace``: which application wrote an ``eventlog.events`` row, as a dotted identifier."""

from __future__ import annotations

import re

_NAMESPACE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
MAX_NAMESPACE_LENGTH = 255


def validate_namespace(namespace: object) -> str:
    """Return ``namespace`` if it is a dotted identifier (``wallet``, ``billing.invoices``), else raise.

    Each dot-separated part starts with a letter or underscore and continues with letters,
    digits and underscores. A hyphen is the usual mistake; the error suggests the underscore
    spelling. Rows already stored are never re-validated, so old rows with other names stay readable.
    """
    if not isinstance(namespace, str):
        raise TypeError(f"namespace must be a string such as 'wallet'; got {type(namespace).__name__}")
    if len(namespace) > MAX_NAMESPACE_LENGTH or not _NAMESPACE.fullmatch(namespace):
        hint = ""
        if "-" in namespace:
            hint = f"; hyphens are not allowed, write {namespace.replace('-', '_')!r}"
        elif len(namespace) > MAX_NAMESPACE_LENGTH:
            hint = f"; it is longer than {MAX_NAMESPACE_LENGTH} characters"
        raise ValueError(
            f"namespace {namespace!r} is not a dotted identifier such as 'wallet' or "
            f"'my_service.orders' (letters, digits and underscores, parts separated by single dots, "
            f"no part starting with a digit){hint}"
        )
    return namespace
