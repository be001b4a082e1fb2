"""HTTP basic authentication in front of an ASGI app (``ekbatan ui`` with ``EKBATAN_UI_USER``
and ``EKBATAN_UI_PASSWORD`` set): 401 without the right credentials, compared in constant
time; the password is never logged nor repeated in a response."""

from __future__ import annotations

import base64
import binascii
import secrets

from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["BasicAuth"]


class BasicAuth:
    """ASGI middleware: every HTTP request must carry ``Authorization: Basic`` with ``user``
    and ``password``."""

    def __init__(self, app: ASGIApp, user: str, password: str, *, realm: str = "ekbatan") -> None:
        if not user or not password:
            raise ValueError("basic authentication needs a user and a password, both non-empty")
        self.app = app
        self._user = user.encode("utf-8")
        self._password = password.encode("utf-8")
        self._realm = realm

    def __repr__(self) -> str:
        return f"BasicAuth(user={self._user.decode('utf-8')!r}, password=***)"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.accepts(Headers(scope=scope).get("authorization")):
            await self.app(scope, receive, send)
            return
        response = PlainTextResponse(
            "authentication required\n",
            status_code=401,
            headers={"WWW-Authenticate": f'Basic realm="{self._realm}", charset="UTF-8"'},
        )
        await response(scope, receive, send)

    def accepts(self, header: str | None) -> bool:
        if header is None:
            return False
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            user, separator, password = base64.b64decode(token.strip(), validate=True).partition(b":")
        except (binascii.Error, ValueError):
            return False
        # both compared, whatever the first gives: the time taken says nothing of which was wrong
        user_ok = secrets.compare_digest(user, self._user)
        password_ok = secrets.compare_digest(password, self._password)
        return bool(separator) and user_ok and password_ok
