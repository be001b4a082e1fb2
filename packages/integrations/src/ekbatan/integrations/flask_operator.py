"""The operator view as a Flask blueprint, behind the application's own request hooks; built by
``Ekbatan.operator_blueprint`` (the guide is docs/operator-view.md).

``Ekbatan.mount_operator_view`` serves the view beside the application, where none of Flask's
hooks run. The blueprint's catch-all routes are Flask views instead: the application's and the
blueprint's ``before_request`` hooks (and decorators on the blueprint's views) run first, then
each request is handed to the view's WSGI app (``operator_wsgi``) with ``SCRIPT_NAME`` ending
at the blueprint's prefix, and its answer is passed on as it comes (unbuffered).
"""

from __future__ import annotations

import io
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlencode

from flask import Blueprint, Flask, current_app, request
from werkzeug.wrappers import Response

if TYPE_CHECKING:
    from wsgiref.types import WSGIApplication

    from flask.blueprints import BlueprintSetupState
    from werkzeug.local import LocalProxy

    from ekbatan.integrations.runtime import EkbatanRuntime

__all__ = ["check_mount_path", "operator_view_blueprint"]

#: what the pages send: their reads and the actions' forms
_METHODS = ["GET", "POST"]


def check_mount_path(path: str) -> str:
    """``path`` if the operator view can be served under it, else ValueError saying what to write."""
    if not path.startswith("/") or path.endswith("/") or "//" in path:
        raise ValueError(
            f"operator view path {path!r}: write an absolute path without a trailing '/', e.g. '/ekbatan'"
        )
    return path


def operator_view_blueprint(
    runtime_of: Callable[[Flask], EkbatanRuntime],
    *,
    url_prefix: str,
    name: str,
    **operator_options: Any,
) -> Blueprint:
    """A blueprint serving ``operator_wsgi(...)`` under ``url_prefix``; the pages of each
    application it is registered on read ``runtime_of(that application)``."""
    from ekbatan.integrations.operator import operator_wsgi

    blueprint = Blueprint(name, __name__, url_prefix=check_mount_path(url_prefix))
    # one view per application (app factories register one blueprint on several): each reads its
    # own runtime; made at registration, so that a wrong option is raised there
    views: weakref.WeakKeyDictionary[Flask, WSGIApplication] = weakref.WeakKeyDictionary()

    def serve_on(setup: BlueprintSetupState) -> None:
        app = cast(Flask, setup.app)  # typed as sansio's App; a blueprint is registered on a Flask
        if app in views:
            return
        # weak: ``views`` keeps the view while the application lives; a strong reference back
        # from the view would keep the application for ever
        application = weakref.ref(app)

        def runtime() -> EkbatanRuntime:
            served = application()
            if served is None:  # pragma: no cover - a collected app serves no request
                raise RuntimeError("the application of this operator view is gone")
            return runtime_of(served)

        views[app] = operator_wsgi(runtime, **operator_options)

    def ekbatan_operator_view(path: str) -> Response:
        # flask annotates current_app as the Flask it stands for; it is werkzeug's proxy to it
        serving = cast("LocalProxy[Flask]", current_app)._get_current_object()
        return Response.from_app(views[serving], _view_environ(path), buffered=False)

    blueprint.record(serve_on)
    for rule, defaults in (("/", {"path": ""}), ("/<path:path>", {})):
        blueprint.add_url_rule(rule, view_func=ekbatan_operator_view, methods=_METHODS, defaults=defaults)
    return blueprint


def _view_environ(inside: str) -> dict[str, Any]:
    """This request's WSGI environ as a mount under the blueprint's prefix would give it to the
    view: ``SCRIPT_NAME`` ends at the prefix (the pages' links and the CSRF cookie's path start
    there) and ``PATH_INFO`` is the address inside the view, ``inside``."""
    environ = dict(request.environ)
    script_name, path_info = str(environ.get("SCRIPT_NAME", "")), str(environ.get("PATH_INFO", ""))
    # PATH_INFO holds the path's UTF-8 bytes as latin-1 characters (WSGI's strings); ``inside``
    # is decoded text, so compare in PATH_INFO's terms
    inside_wsgi = inside.encode("utf-8").decode("latin-1")
    prefix = path_info[: len(path_info) - len(inside_wsgi)].rstrip("/")
    environ["SCRIPT_NAME"] = script_name + prefix
    environ["PATH_INFO"] = path_info[len(prefix) :]
    body = _request_body()
    environ["wsgi.input"] = io.BytesIO(body)
    environ["CONTENT_LENGTH"] = str(len(body))
    return environ


def _request_body() -> bytes:
    """The request's body, for the view to read again: a hook may have read it already."""
    body = request.get_data(cache=True)
    if not body and request.form:
        # a hook parsed the form first, which leaves nothing else to read: its fields are the body
        body = urlencode(list(request.form.items(multi=True))).encode("utf-8")
    return body
