"""Double-submit CSRF protection for the actions: each browser gets a random cookie value, and
every action form carries the HMAC of that value under a secret of the app (random, made when
the app is built, never sent). A POST is accepted only when its form's token is the HMAC of the
cookie it came with: another site can make a browser send the cookie, but cannot read it to
make the token."""

from __future__ import annotations

import hashlib
import hmac
import secrets

from starlette.requests import Request
from starlette.responses import Response

__all__ = ["COOKIE", "FIELD", "Csrf"]

#: the cookie holding the browser's random value
COOKIE = "ekbatan_csrf"
#: the form field holding the token
FIELD = "csrf_token"


class Csrf:
    def __init__(self) -> None:
        self._secret = secrets.token_bytes(32)

    def __repr__(self) -> str:
        return "Csrf(secret=***)"

    def token_of(self, value: str) -> str:
        return hmac.new(self._secret, value.encode("utf-8"), hashlib.sha256).hexdigest()

    def cookie_value(self, request: Request) -> tuple[str, bool]:
        """This browser's value, and whether it is new (to be set on the response)."""
        value = request.cookies.get(COOKIE)
        if value and 20 <= len(value) <= 200:
            return value, False
        return secrets.token_urlsafe(32), True

    def set_cookie(self, request: Request, response: Response, value: str) -> None:
        path = str(request.scope.get("root_path", "")).rstrip("/") or "/"
        response.set_cookie(COOKIE, value, path=path, httponly=True, samesite="strict")

    def accepts(self, request: Request, token: object) -> bool:
        value = request.cookies.get(COOKIE)
        if not value or not isinstance(token, str) or not token:
            return False
        return hmac.compare_digest(token.encode("utf-8"), self.token_of(value).encode("utf-8"))
