"""The operator view for WSGI applications (Flask): the same Starlette app behind a2wsgi's
ASGI-to-WSGI adapter, to mount under a path with werkzeug's ``DispatcherMiddleware``.

Pages refresh by polling here (``live="poll"``): a server-sent stream would hold one WSGI
worker thread for as long as each tab stays open.
"""

from __future__ import annotations

from typing import Any

from ekbatan.integrations.operator.app import Source, operator_app

__all__ = ["operator_wsgi"]


def operator_wsgi(source: Source, *, live: str = "poll", **options: Any) -> Any:
    """A WSGI application serving ``operator_app(source, live=live, **options)``."""
    try:
        from a2wsgi import ASGIMiddleware
    except ImportError as error:  # pragma: no cover - depends on the installed extras
        raise ImportError(
            "serving the operator view through WSGI needs a2wsgi: pip install 'ekbatan-integrations[ui]'"
        ) from error
    return ASGIMiddleware(operator_app(source, live=live, **options))  # type: ignore[arg-type]
