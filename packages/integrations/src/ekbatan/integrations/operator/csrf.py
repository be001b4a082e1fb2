"""Double-submit CSRF protection for the actions: each browser gets a random cookie value, and
every action form carries the HMAC of that value under a secret of the app (never sent). A POST
is accepted only when its form's token is the HMAC of the cookie it came with: another site can
make a browser send the cookie, but cannot read it to make the token.

The secret is random, made when the app is built, unless one is given: replicas behind a load
balancer given the same secret accept each other's tokens. A given secret is never shown — not
in a repr, an error or a log line."""

from __future__ import annotations

import hashlib
import hmac
import secrets

from starlette.requests import Request
from starlette.responses import Response

__all__ = ["COOKIE", "FIELD", "MIN_SECRET_BYTES", "Csrf"]

#: the cookie holding the browser's random value
COOKIE = "ekbatan_csrf"
#: the form field holding the token
FIELD = "csrf_token"
#: the shortest secret taken: shorter ones are guessable offline from a token and its cookie
MIN_SECRET_BYTES = 16


class Csrf:
    def __init__(self, secret: str | bytes | None = None) -> None:
        """``secret``: the HMAC key shared by the app's replicas (a ``str`` is taken as UTF-8);
        None makes a random one, good for this app object only."""
        self._secret = secrets.token_bytes(32) if secret is None else _checked(secret)

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


def _checked(secret: object) -> bytes:
    if not isinstance(secret, str | bytes):
        raise TypeError(f"csrf_secret must be a str or bytes, got {type(secret).__name__}")
    key = secret.encode("utf-8") if isinstance(secret, str) else secret
    if len(key) < MIN_SECRET_BYTES:
        # its length only: the secret itself never goes into a message
        raise ValueError(
            f"csrf_secret is {len(key)} bytes; it needs at least {MIN_SECRET_BYTES}. Give every replica "
            'the same random one, e.g. the output of: python -c "import secrets; print(secrets.token_hex(32))"'
        )
    return bytes(key)
