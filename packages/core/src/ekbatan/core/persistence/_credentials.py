"""Keeping passwords out of text that may reach a log, an error message or a ``repr``."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import sqlalchemy as sa

MASK = "***"

# scheme://user:password@host  — the password is everything between the first ':' of the
# userinfo and the last '@' before the host part.
_USERINFO_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-:]*://[^:/?#@\s]*:)(?P<pw>[^\s/?#]*)(?=@)")
_QUERY_PASSWORD = re.compile(r"(?P<head>[?&;](?:password|pwd)=)(?P<pw>[^&;\s]*)", re.IGNORECASE)


def _masked(match: re.Match[str]) -> str:
    # An empty password stays empty: "***" would suggest that a password is set.
    return match.group("head") + (MASK if match.group("pw") else "")


def mask_url_password(text: str) -> str:
    """Replace any non-empty password carried by a URL inside ``text`` with ``***``."""
    return _QUERY_PASSWORD.sub(_masked, _USERINFO_PASSWORD.sub(_masked, text))


def masked_url(url: sa.URL) -> str:
    """``url`` fit for logs: a password as ``***``, an empty one (``${PG_PASSWORD:}``) left out,
    since ``user:***@`` would suggest that a password is set."""
    if url.password == "":
        url = url._replace(password=None)
    return url.render_as_string(hide_password=True)
