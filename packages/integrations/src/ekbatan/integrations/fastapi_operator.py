"""The operator view as a FastAPI router: ``operator_router``, re-exported by
``ekbatan.integrations.fastapi``; the guide is docs/operator-view.md.

A mounted sub-application runs none of FastAPI's dependencies. This router has one catch-all
route instead, whose dependencies (the application's own authentication) run first; its
endpoint then hands the request, as it is, to the operator view's ASGI app under the prefix the
router was included with. The view answers through the route's own ``send``: a page, a redirect
or the ``/live`` event stream goes out as the view writes it, never buffered here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request
from fastapi.params import Depends
from starlette.background import BackgroundTask
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

if TYPE_CHECKING:
    from ekbatan.integrations.operator.app import Source

__all__ = ["operator_router"]

#: the catch-all route's parameter: the address inside the view
_PATH_PARAM = "path"
#: what the pages send: their reads and the actions' forms
_METHODS = ["GET", "POST"]


def operator_router(
    source: Source,
    *,
    dependencies: Sequence[Depends] = (),
    include_in_schema: bool = False,
    **operator_options: Any,
) -> APIRouter:
    """The operator view (``operator_app(source, **operator_options)``) behind FastAPI's own
    dependencies: ``app.include_router(operator_router(runtime, dependencies=[Depends(current_admin)]),
    prefix="/ekbatan")``. Every page, action and stream runs ``dependencies`` first (one raising
    ``HTTPException(401)`` refuses it), then the view under that prefix; what a dependency puts
    on ``request.state`` is on the ``request`` that ``authorize`` and ``actor`` get.

    ``source``: an ``EkbatanRuntime``, a ``SchedulerClient``, or a function returning one at each
    request (``lambda: app.state.ekbatan`` for the runtime that ``ekbatan_lifespan`` starts)."""
    from ekbatan.integrations.operator import operator_app

    view = operator_app(source, **operator_options)

    async def ekbatan_operator_view(request: Request) -> Response:
        # Read here, where a dependency that read the body already may have left it cached:
        # the view reads it again from what is replayed.
        body = await request.body()
        return _ForwardedToView(view, body)

    router = APIRouter()
    router.add_api_route(
        f"/{{{_PATH_PARAM}:path}}",
        ekbatan_operator_view,
        methods=_METHODS,
        dependencies=list(dependencies),
        include_in_schema=include_in_schema,
        summary="Ekbatan operator view",
    )
    return router


class _ForwardedToView(Response):
    """The operator view's answer to this request: the view is called as the ASGI app it is,
    under the prefix the route matched, and writes its response itself."""

    def __init__(self, view: ASGIApp, body: bytes) -> None:
        super().__init__(status_code=200)
        self._view = view
        self._request_body = body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._view(_view_scope(scope), _replaying(self._request_body, receive), send)
        # FastAPI gives a returned response the request's background tasks to run after it
        background: BackgroundTask | None = self.background
        if background is not None:
            await background()


def _view_scope(scope: Scope) -> Scope:
    """The route's scope as a mount would give it to the view: its ``root_path`` ends at the
    router's prefix, so that the pages' links and the CSRF cookie's path start there. The rest
    (``raw_path``, the headers, ``state`` with what the dependencies put on it) is the same."""
    root_path = str(scope.get("root_path", ""))
    path = str(scope["path"])
    route_path = path[len(root_path) :] if path.startswith(root_path) else path
    inside = str(scope["path_params"][_PATH_PARAM])
    prefix = route_path[: len(route_path) - len(inside)].rstrip("/")
    return {
        **scope,
        "app_root_path": scope.get("app_root_path", root_path),
        "root_path": root_path + prefix,
        "path_params": {},
    }


def _replaying(body: bytes, receive: Receive) -> Receive:
    """``receive`` giving ``body`` first (the request's, read already), then what the client
    sends next (its disconnect, which ends a stream)."""
    replayed = False

    async def receive_again() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return receive_again
