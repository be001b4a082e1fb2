"""``operator_app``: the operator's read-only web view of the scheduler, an ASGI app to mount.

It reads through a :class:`SchedulerClient` only (an :class:`EkbatanRuntime`'s, taken at the
first request, or one given); it never starts a scheduler. Every page asks ``authorize`` (when
given) with the action kind ``"view"``; the actions to come will ask with their own kinds.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ekbatan.distributed_jobs.scheduler import SchedulerClient
from ekbatan.integrations.operator.detail import read_detail
from ekbatan.integrations.operator.listing import read_page
from ekbatan.integrations.operator.overview import read_overview
from ekbatan.integrations.operator.query import MAX_PAGE_SIZE, QueryError, parse_query
from ekbatan.integrations.operator.rendering import STATIC_DIRECTORY, Links, templates
from ekbatan.integrations.operator.states import ExecutionState
from ekbatan.integrations.runtime import EkbatanRuntime

__all__ = ["VIEW", "Authorize", "operator_app"]

#: ``authorize(request, kind)`` → whether the request may do ``kind``; False answers 403
Authorize = Callable[[Request, str], bool]
#: the action kind of reading a page (the only kind so far)
VIEW = "view"

_Page = Callable[[Request, SchedulerClient], Awaitable[Response]]


def operator_app(
    source: EkbatanRuntime | SchedulerClient,
    *,
    read_only: bool = True,
    title: str = "ekbatan",
    authorize: Authorize | None = None,
) -> Starlette:
    """The pages, to mount: ``app.mount("/ekbatan", operator_app(runtime))``."""
    if not read_only:
        raise ValueError("the operator view has no actions yet: only read_only=True is supported")
    if not isinstance(source, EkbatanRuntime | SchedulerClient):
        raise TypeError(f"expected an EkbatanRuntime or a SchedulerClient, got {type(source).__name__}")
    rendered = templates()

    def client() -> SchedulerClient:
        return source.scheduler_client if isinstance(source, EkbatanRuntime) else source

    def render(request: Request, name: str, status: int = 200, **context: Any) -> Response:
        context.update(title=title, links=Links(request), read_only=read_only, now=datetime.now(UTC))
        return rendered.TemplateResponse(request, name, context, status_code=status)

    def page(fn: Callable[[Request, SchedulerClient], Response]) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            if authorize is not None and not authorize(request, VIEW):
                return render(request, "error.html", 403, heading="Forbidden", message="Not allowed to view.")
            return await run_in_threadpool(fn, request, client())

        return endpoint

    def overview(request: Request, scheduler: SchedulerClient) -> Response:
        now = datetime.now(UTC)
        tasks = read_overview(scheduler, now)
        return render(request, "overview.html", tasks=tasks, table=scheduler.table_name)

    def executions(request: Request, scheduler: SchedulerClient) -> Response:
        try:
            query = parse_query(request.query_params)
        except QueryError as error:
            return render(request, "error.html", 400, heading="Bad request", message=str(error))
        result = read_page(scheduler, query, datetime.now(UTC))
        next_link = None
        if result.next_key is not None:
            next_link = Links(request).executions(**_filters(request), **result.next_key.as_query())
        return render(
            request,
            "executions.html",
            query=query,
            rows=result.rows,
            next_link=next_link,
            filters=_filters(request),
            states=[s.value for s in ExecutionState],
            max_page_size=MAX_PAGE_SIZE,
        )

    def execution(request: Request, scheduler: SchedulerClient) -> Response:
        task, instance = _key(request)
        detail = read_detail(scheduler, task, instance)
        if detail is None:
            message = f"No execution {task}/{instance}: it finished, was cancelled, or never existed."
            return render(request, "error.html", 404, heading="Not found", message=message)
        return render(request, "detail.html", detail=detail)

    routes = [
        Route("/", page(overview), name="overview"),
        Route("/executions", page(executions), name="executions"),
        Route("/executions/{task}/{instance:path}", page(execution), name="execution"),
        Mount("/static", StaticFiles(directory=STATIC_DIRECTORY), name="static"),
    ]
    return Starlette(routes=routes)


def _filters(request: Request) -> dict[str, str]:
    """The listing's filters as given, carried into its next page's link."""
    return {
        k: request.query_params[k]
        for k in ("task", "state", "prefix", "page_size")
        if k in request.query_params
    }


def _key(request: Request) -> tuple[str, str]:
    """The task and instance of a detail address. The links quote both whole (a ``/`` in a
    task name too), so the raw path splits them where the decoded path cannot."""
    raw = request.scope.get("raw_path")
    if isinstance(raw, bytes) and raw.isascii():
        text = raw.decode("ascii").partition("?")[0]
        marker = text.rfind("/executions/")
        parts = text[marker + len("/executions/") :].split("/") if marker >= 0 else []
        if len(parts) == 2 and all(parts):
            return unquote(parts[0]), unquote(parts[1])
    return request.path_params["task"], request.path_params["instance"]
