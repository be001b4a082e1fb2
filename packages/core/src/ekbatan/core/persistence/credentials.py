"""Keeping passwords out of text that may reach a log, an error message or a ``repr``."""

from __future__ import annotations

import re

MASK = "***"

# scheme://user:password@host  — the password is everything between the first ':' of the
# userinfo and the last '@' before the host part.
_USERINFO_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-:]*://[^:/?#@\s]*:)(?P<pw>[^\s/?#]*)(?=@)")
_QUERY_PASSWORD = re.compile(r"(?P<head>[?&;](?:password|pwd)=)(?P<pw>[^&;\s]*)", re.IGNORECASE)


def mask_url_password(text: str) -> str:
    """Replace any password carried by a URL inside ``text`` with ``***``."""
    masked = _USERINFO_PASSWORD.sub(lambda m: m.group("head") + MASK, text)
    return _QUERY_PASSWORD.sub(lambda m: m.group("head") + MASK, masked)
