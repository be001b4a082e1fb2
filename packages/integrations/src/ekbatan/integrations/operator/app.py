"""``operator_app``: the operator's web view of the scheduler, an ASGI app to mount.

It reads and acts through a :class:`SchedulerClient` only (an :class:`EkbatanRuntime`'s, taken
at the first request, or one given); it never starts a scheduler. The event pipeline's panel and
its re-drive work on a runtime's shards, or on the ``eventlog`` shards given beside a client
(``ekbatan ui``'s). Every page asks ``authorize`` (when given) with the kind ``"view"``; each
action (``read_only=False`` only) with its own kind.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ekbatan.distributed_jobs.scheduler import Scheduler, SchedulerClient
from ekbatan.integrations.operator.actions import (
    ACTIONS,
    CANCEL,
    CARRIED_FIELDS,
    PAUSE,
    RETRY,
    RUN,
    VIEW,
    Action,
    ActionError,
    ask,
    perform,
)
from ekbatan.integrations.operator.audit import Audit, AuditEntry, log_audit
from ekbatan.integrations.operator.csrf import FIELD, Csrf
from ekbatan.integrations.operator.detail import read_detail
from ekbatan.integrations.operator.eventlog_shards import EventlogShards, eventlog_shards_of
from ekbatan.integrations.operator.listing import read_page
from ekbatan.integrations.operator.live import DEFAULT_INTERVAL, LIVE_MODES, LiveFeed, resolve_mode
from ekbatan.integrations.operator.overview import OverviewReads, read_overview
from ekbatan.integrations.operator.query import MAX_PAGE_SIZE, QueryError, parse_query
from ekbatan.integrations.operator.rendering import STATIC_DIRECTORY, Links, templates
from ekbatan.integrations.operator.states import ExecutionState
from ekbatan.integrations.runtime import EkbatanRuntime

__all__ = ["CANCEL", "PAUSE", "RETRY", "RUN", "VIEW", "Actor", "Authorize", "operator_app"]

#: ``authorize(request, kind)`` → whether the request may do ``kind``; False answers 403
Authorize = Callable[[Request, str], bool]
#: ``actor(request)`` → who acts, kept with a pause as its ``paused_by``
Actor = Callable[[Request], str]
#: the actor when no ``actor`` is given and the request has no basic-auth user
DEFAULT_ACTOR = "operator view"

_Page = Callable[[Request, SchedulerClient], Awaitable[Response]]
#: what the pages read: a runtime, a client (a scheduler stands for its own), or a function giving
#: either at each request (a Flask app's runtime is replaced after a fork, so its mount gives a function)
Source = EkbatanRuntime | SchedulerClient | Scheduler | Callable[[], EkbatanRuntime | SchedulerClient]


def operator_app(
    source: Source,
    *,
    read_only: bool = True,
    title: str = "ekbatan",
    authorize: Authorize | None = None,
    actor: Actor | None = None,
    live: str = "auto",
    refresh_interval: float = DEFAULT_INTERVAL,
    csrf_secret: str | bytes | None = None,
    eventlog: EventlogShards | None = None,
    audit: Audit = log_audit,
) -> Starlette:
    """The pages, to mount: ``app.mount("/ekbatan", operator_app(runtime))``. With
    ``read_only=False`` they offer actions (POST forms, CSRF-protected and confirmed). ``live``
    says how an open page refreshes itself: ``"auto"`` (server-sent events where the database
    notifies, else polling), ``"sse"``, ``"poll"`` or ``"off"``; ``refresh_interval`` is the
    polling period in seconds, and the longest a stream stays silent. ``csrf_secret`` (at least
    16 bytes): the key of the forms' CSRF tokens, the same for every replica behind a load
    balancer so that each accepts the others' pages (default: a random one per app).
    ``eventlog``: the shards whose event pipeline a bare ``SchedulerClient``'s overview shows and
    re-drives (a runtime brings its own). ``audit``: given each confirmed action, done or
    refused (default: a line on the ``ekbatan.integrations.operator.audit`` logger)."""
    if isinstance(source, Scheduler):
        source = source.client
    if not isinstance(source, EkbatanRuntime | SchedulerClient) and not callable(source):
        raise TypeError(
            f"expected an EkbatanRuntime, a SchedulerClient or a function returning one, "
            f"got {type(source).__name__}"
        )
    if eventlog is not None and not isinstance(eventlog, EventlogShards):
        raise TypeError(f"eventlog: expected EventlogShards, got {type(eventlog).__name__}")
    if eventlog is not None and isinstance(source, EkbatanRuntime):
        raise ValueError("eventlog goes with a SchedulerClient: a runtime's own shards are shown")
    if live not in LIVE_MODES:
        raise ValueError(f"live={live!r}: write one of {', '.join(map(repr, LIVE_MODES))}")
    if (
        isinstance(refresh_interval, bool)
        or not isinstance(refresh_interval, int | float)
        or refresh_interval <= 0
    ):
        raise ValueError(f"refresh_interval={refresh_interval!r}: write a number of seconds above 0, e.g. 5")
    rendered = templates()
    csrf = Csrf(csrf_secret)
    who: Actor = actor or _basic_user

    def resolved() -> EkbatanRuntime | SchedulerClient:
        given = source if isinstance(source, EkbatanRuntime | SchedulerClient) else source()
        if not isinstance(given, EkbatanRuntime | SchedulerClient):
            raise TypeError(
                f"the operator view's source gave {type(given).__name__}, not a runtime or client"
            )
        return given

    def client() -> SchedulerClient:
        given = resolved()
        return given.scheduler_client if isinstance(given, EkbatanRuntime) else given

    def shards_of(given: EkbatanRuntime | SchedulerClient) -> EventlogShards | None:
        """Where the event pipeline is read and re-driven: a runtime's shards, else those given."""
        return eventlog_shards_of(given) if isinstance(given, EkbatanRuntime) else eventlog

    feed = LiveFeed(client, refresh_interval)
    reads = OverviewReads()  # the overview's table-wide counts, kept between requests

    def allowed(request: Request, kind: str) -> bool:
        return authorize is None or authorize(request, kind)

    def render(request: Request, name: str, status: int = 200, **context: Any) -> Response:
        value, new = csrf.cookie_value(request)
        context.update(title=title, links=Links(request), read_only=read_only, now=datetime.now(UTC))
        context.setdefault("back", _here(request))
        context.setdefault("return_to", None)
        # only a page read whole refreshes itself; errors and confirmations stay as they are
        live_page = status == 200 and getattr(request.state, "live_page", False)
        context.update(
            live=resolve_mode(live, client()) if live_page else "off", live_interval=refresh_interval
        )
        context.update(
            csrf_token=csrf.token_of(value),
            can=lambda kind: not read_only and allowed(request, kind),
            flash=request.query_params.get("message"),
        )
        response = rendered.TemplateResponse(request, name, context, status_code=status)
        if new:
            csrf.set_cookie(request, response, value)
        return response

    async def act(request: Request) -> Response:
        action = ACTIONS.get(request.path_params["kind"])
        if action is None:
            return render(request, "error.html", 404, heading="Not found", message="No such action.")
        if read_only:
            message = "This operator view is read-only: it takes no actions."
            return render(request, "error.html", 403, heading="Forbidden", message=message)
        if not allowed(request, action.kind):
            message = f"Not allowed to {action.kind}."
            return render(request, "error.html", 403, heading="Forbidden", message=message)
        params = await _form(request)
        if not csrf.accepts(request, params.get(FIELD)):
            message = "Missing or wrong CSRF token: reload the page and try again."
            return render(request, "error.html", 403, heading="Forbidden", message=message)
        back = _safe_back(request, params.get("back", ""))
        given = resolved()
        shards = shards_of(given)
        scheduler = given.scheduler_client if isinstance(given, EkbatanRuntime) else given
        confirmed = params.get("confirm") == "yes"
        actor_name = who(request)
        reason = params.get("reason", "").strip() or None

        def audited(done: bool, status: int, said: str) -> None:
            if confirmed:  # a form only asked is not an action yet
                entry = AuditEntry.of(
                    params,
                    actor=actor_name,
                    action=action.name,
                    kind=action.kind,
                    reason=reason,
                    done=done,
                    status=status,
                    message=said,
                )
                audit(entry)

        try:
            if not confirmed:
                question = await run_in_threadpool(ask, scheduler, action, params, shards=shards)
                return _confirm(request, action, question, params, back)
            message = await run_in_threadpool(
                perform, scheduler, action, params, actor=actor_name, reason=reason, shards=shards
            )
        except ActionError as error:
            audited(False, error.status, str(error))
            heading = "Conflict" if error.status == 409 else "Bad request"
            return render(
                request, "error.html", error.status, heading=heading, message=str(error), return_to=back
            )
        audited(True, 303, message)
        return RedirectResponse(_with_message(back, message), status_code=303)

    def _confirm(
        request: Request, action: Action, question: str, params: dict[str, str], back: str
    ) -> Response:
        fields = {k: params[k] for k in CARRIED_FIELDS if params.get(k)}
        return render(request, "confirm.html", action=action, question=question, fields=fields, back=back)

    def page(fn: Callable[[Request, SchedulerClient], Response]) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            if authorize is not None and not authorize(request, VIEW):
                return render(request, "error.html", 403, heading="Forbidden", message="Not allowed to view.")
            request.state.live_page = True
            return await run_in_threadpool(fn, request, client())

        return endpoint

    async def live_stream(request: Request) -> Response:
        if authorize is not None and not authorize(request, VIEW):
            return Response("Not allowed to view.", 403, media_type="text/plain")
        if live == "off":
            return Response("Live refresh is off.", 404, media_type="text/plain")
        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}  # no proxy buffering
        return StreamingResponse(
            feed.stream(request.is_disconnected), media_type="text/event-stream", headers=headers
        )

    def overview(request: Request, scheduler: SchedulerClient) -> Response:
        now = datetime.now(UTC)
        page = read_overview(scheduler, now, shards_of(resolved()), reads)
        return render(request, "overview.html", overview=page, tasks=page.tasks, table=scheduler.table_name)

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
        Route("/actions/{kind}", act, methods=["POST"], name="action"),
        Route("/live", live_stream, name="live"),
        Mount("/static", StaticFiles(directory=STATIC_DIRECTORY), name="static"),
    ]
    return Starlette(routes=routes)


def _filters(request: Request) -> dict[str, str]:
    """The listing's filters as given, carried into its next page's link."""
    return {
        k: request.query_params[k]
        for k in ("task", "state", "prefix", "from", "until", "order", "page_size")
        if k in request.query_params
    }


#: the largest action form read (its fields are short)
_MAX_FORM = 16 * 1024


async def _form(request: Request) -> dict[str, str]:
    """The POSTed form's fields (URL-encoded, as the pages' forms send them; read here, so
    that no multipart library is needed); empty when it is anything else or too large."""
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/x-www-form-urlencoded":
        return {}
    body = await request.body()
    if len(body) > _MAX_FORM:
        return {}
    return dict(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))


def _here(request: Request) -> str:
    """This page's address (under the mount), without a message shown on it."""
    query = [(k, v) for k, v in request.query_params.multi_items() if k != "message"]
    return request.url.path + ("?" + urlencode(query) if query else "")


def _safe_back(request: Request, back: str) -> str:
    """Where to go after an action: a page of this app, else its overview."""
    base = str(request.scope.get("root_path", "")).rstrip("/")
    parts = urlsplit(back)
    local = not parts.scheme and not parts.netloc and back.startswith(base + "/") and "\\" not in back
    return back if local and not back.startswith("//") else base + "/"


def _with_message(back: str, message: str) -> str:
    parts = urlsplit(back)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != "message"] + [("message", message)]
    return parts.path + "?" + urlencode(query)


def _basic_user(request: Request) -> str:
    """The basic-auth user of the request, if any, else the default actor."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "basic":
        try:
            user = base64.b64decode(token.strip(), validate=True).partition(b":")[0].decode("utf-8")
        except (binascii.Error, ValueError):
            user = ""
        if user:
            return user
    return DEFAULT_ACTOR


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
