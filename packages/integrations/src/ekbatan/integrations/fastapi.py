"""Ekbatan in a FastAPI application: a lifespan, dependencies, non-blocking calls, a readiness
endpoint and the operator view behind the application's dependencies; the guide is
docs/wiring/fastapi.md.

The runtime is built by the lifespan in each worker process, never at import time; no signal
handler is installed (uvicorn owns SIGTERM and SIGINT and ends the lifespan, which stops Ekbatan).
"""

from __future__ import annotations

import functools
import os
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import datetime, timedelta
from types import ModuleType
from typing import Annotated, Any, TypeVar, Unpack

try:
    import anyio
    from fastapi import APIRouter, Depends
    from fastapi.responses import JSONResponse, PlainTextResponse, Response
    from starlette.requests import HTTPConnection
except ImportError as error:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "ekbatan.integrations.fastapi needs FastAPI: pip install 'ekbatan-integrations[fastapi]'"
    ) from error

from ekbatan.core import ActionExecutor, EkbatanSettings
from ekbatan.core.outbox import Action
from ekbatan.distributed_jobs.scheduler import SchedulerClient, TaskInstance
from ekbatan.integrations.fastapi_operator import operator_router
from ekbatan.integrations.health import FAILING_TASKS_CACHE, health_report
from ekbatan.integrations.metrics_exposition import METRICS_OFF, render_metrics
from ekbatan.integrations.options import EkbatanOptions, OptionFields
from ekbatan.integrations.runtime import EkbatanRuntime, build_runtime

__all__ = [
    "STATE_KEY",
    "ActionExecutorDep",
    "EkbatanRuntimeDep",
    "SchedulerClientDep",
    "action_executor",
    "ekbatan_lifespan",
    "ekbatan_runtime",
    "health_report",
    "health_router",
    "metrics_router",
    "operator_router",
    "run_action",
    "schedule_task",
    "scheduler_client",
]

#: the name of the runtime on ``app.state`` and in the lifespan state
STATE_KEY = "ekbatan"

P = TypeVar("P")
R = TypeVar("R")
Lifespan = Callable[[Any], AbstractAsyncContextManager[Mapping[str, Any] | None]]


class _LifespanFields(OptionFields, total=False):
    # ``config`` and ``packages`` by keyword as well: their first two positions are
    # positional-only, so that ``container``, also the third position, can be one of the option
    # keywords without two parameters of one name (which mypy refuses).
    config: str | os.PathLike[str] | EkbatanSettings | None
    packages: Iterable[str | ModuleType] | str | ModuleType | None


def ekbatan_lifespan(
    config: str | os.PathLike[str] | EkbatanSettings | None = None,
    packages: Iterable[str | ModuleType] | str | ModuleType | None = None,
    container: Any = None,
    /,
    *,
    options: EkbatanOptions | None = None,
    lifespan: Lifespan | None = None,
    **fields: Unpack[_LifespanFields],
) -> Callable[[Any], AbstractAsyncContextManager[dict[str, Any]]]:
    """A FastAPI lifespan that builds, starts and stops Ekbatan; ``FastAPI(lifespan=...)``.

    What to build is an :class:`~ekbatan.integrations.options.EkbatanOptions` — ``options=``
    and/or its fields as keywords (``config``, ``packages`` and ``container`` also by position;
    a keyword wins over ``options``), exactly as
    :func:`~ekbatan.integrations.runtime.build_runtime` takes them: ``migrate_on_start``,
    ``require_database``, ``clock``, ``codec``, ``extra_jobs``, ``extra_handlers``,
    ``extra_tasks``, ``customize_scheduler``. ``config`` defaults to ``application.yml``.

    Calling this builds nothing: it only checks and remembers the options (so it is safe at
    import time, in a module that uvicorn's parent process imports too). ``lifespan`` is the
    application's own lifespan, run inside Ekbatan's: it starts after Ekbatan has started (the
    runtime is on ``app.state.ekbatan`` already) and stops before Ekbatan stops; the state it
    yields is merged into the lifespan state. The returned lifespan can also be entered from
    the application's own: ``async with ekbatan(app) as state: yield {**state, ...}``.

    ``require_database=False`` lets the application start while the jobs database is down;
    the health router answers 503 until the scheduler has polled.
    """
    positional = {"config": config, "packages": packages, "container": container}
    twice = sorted(name for name, value in positional.items() if value is not None and name in fields)
    if twice:
        raise TypeError(f"ekbatan_lifespan() got {', '.join(twice)} both by position and by keyword")
    merged = EkbatanOptions.of(options, **{**positional, **fields})

    def build() -> EkbatanRuntime:
        runtime = build_runtime(options=merged)
        try:
            runtime.start()
        except BaseException:
            runtime.stop()  # closes the pools; a failed start left no scheduler running
            raise
        return runtime

    @asynccontextmanager
    async def ekbatan(app: Any) -> AsyncIterator[dict[str, Any]]:
        # Building reads files and imports modules, starting runs migrations and writes the
        # jobs' rows: done in a worker thread, so that nothing else on the loop waits for it.
        runtime = await anyio.to_thread.run_sync(build)
        app.state.ekbatan = runtime
        try:
            if lifespan is None:
                yield {STATE_KEY: runtime}
            else:
                async with lifespan(app) as state:
                    yield {**(state or {}), STATE_KEY: runtime}
        finally:
            # Shielded: a cancelled shutdown must still drain the jobs and close the pools.
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(runtime.stop)

    return ekbatan


# --------------------------------------------------------------------------- dependencies
def _runtime_of(connection: HTTPConnection) -> EkbatanRuntime:
    # the lifespan state first: it reaches mounted sub-applications, whose app.state does not
    state = connection.scope.get("state") or {}
    runtime = state.get(STATE_KEY) if isinstance(state, Mapping) else None
    if runtime is None:
        runtime = getattr(connection.app.state, STATE_KEY, None)
    if not isinstance(runtime, EkbatanRuntime):
        raise RuntimeError(
            "Ekbatan is not running in this application: create it with "
            "FastAPI(lifespan=ekbatan_lifespan(...)) and serve it with a server that runs the lifespan"
        )
    return runtime


async def ekbatan_runtime(connection: HTTPConnection) -> EkbatanRuntime:
    """Dependency: the application's :class:`EkbatanRuntime`."""
    return _runtime_of(connection)


async def action_executor(connection: HTTPConnection) -> ActionExecutor:
    """Dependency: the :class:`ActionExecutor` (synchronous: call it through :func:`run_action`)."""
    return _runtime_of(connection).action_executor


async def scheduler_client(connection: HTTPConnection) -> SchedulerClient:
    """Dependency: the :class:`SchedulerClient` on the jobs pool (call it through :func:`schedule_task`)."""
    return _runtime_of(connection).scheduler_client


EkbatanRuntimeDep = Annotated[EkbatanRuntime, Depends(ekbatan_runtime)]
ActionExecutorDep = Annotated[ActionExecutor, Depends(action_executor)]
SchedulerClientDep = Annotated[SchedulerClient, Depends(scheduler_client)]


# --------------------------------------------------------------------------- non-blocking calls
async def run_action(
    executor: ActionExecutor | HTTPConnection,
    action: Action[P, R] | type[Action[P, R]],
    params: P,
    *,
    principal: Any = None,
    allow_cross_shard: bool = False,
) -> R:
    """``executor.execute(action, params)`` in a worker thread: the event loop stays free.

    ``executor`` is the executor (e.g. from :data:`ActionExecutorDep`) or the request.
    """
    if isinstance(executor, HTTPConnection):
        executor = _runtime_of(executor).action_executor
    call = functools.partial(
        executor.execute, action, params, principal=principal, allow_cross_shard=allow_cross_shard
    )
    return await anyio.to_thread.run_sync(call)


async def schedule_task(
    client: SchedulerClient | HTTPConnection,
    instance: TaskInstance[Any] | Any,
    execution_time: datetime | Any = None,
    **options: Any,
) -> bool:
    """``client.schedule(instance, execution_time, **options)`` in a worker thread.

    ``client`` is the scheduler client (e.g. from :data:`SchedulerClientDep`) or the request.
    """
    if isinstance(client, HTTPConnection):
        client = _runtime_of(client).scheduler_client
    call = functools.partial(client.schedule, instance, execution_time, **options)
    return await anyio.to_thread.run_sync(call)


# --------------------------------------------------------------------------- readiness
def health_router(
    path: str = "/health/ekbatan",
    *,
    max_poll_age: timedelta | None = None,
    max_failing_tasks: int | None = None,
    count_failing_tasks: bool = True,
    failing_tasks_cache: timedelta = FAILING_TASKS_CACHE,
    include_in_schema: bool = False,
) -> APIRouter:
    """A router with one readiness endpoint, ``GET path``: 200 when ready, else 503.

    Include it with ``app.include_router(health_router())``; see :func:`health_report` for
    what ready means and what the JSON body holds. Counting the failing tasks reads
    ``scheduled_tasks`` (one grouped query) at most once per ``failing_tasks_cache`` (5 s),
    however often the endpoint is called; pass ``count_failing_tasks=False`` for a probe that
    never touches the database.
    """
    router = APIRouter()

    async def ekbatan_health(connection: HTTPConnection) -> JSONResponse:
        try:
            runtime: EkbatanRuntime | None = _runtime_of(connection)
        except RuntimeError:
            runtime = None
        check = functools.partial(
            health_report,
            runtime,
            max_poll_age=max_poll_age,
            max_failing_tasks=max_failing_tasks,
            count_failing_tasks=count_failing_tasks,
            failing_tasks_cache=failing_tasks_cache,
        )
        ready, report = await anyio.to_thread.run_sync(check)
        return JSONResponse(report, status_code=200 if ready else 503)

    router.add_api_route(
        path,
        ekbatan_health,
        methods=["GET"],
        include_in_schema=include_in_schema,
        response_class=JSONResponse,
        summary="Ekbatan readiness",
    )
    return router


# --------------------------------------------------------------------------- metrics
def metrics_router(path: str = "/metrics", *, include_in_schema: bool = False) -> APIRouter:
    """A router with ``GET path`` serving the metrics in Prometheus' text format (OpenMetrics
    when the scraper asks for it), from the runtime's ``metrics_registry``; include it with
    ``app.include_router(metrics_router())``. It answers 404, saying why, when
    ``ekbatan.observability.metrics`` is off. Each worker process serves its own counters (the
    gauges read from the database are the cluster's): see docs/observability-endpoints.md."""
    router = APIRouter()

    async def ekbatan_metrics(connection: HTTPConnection) -> Response:
        registry = _runtime_of(connection).metrics_registry
        if registry is None:
            return PlainTextResponse(METRICS_OFF, status_code=404)
        # a scrape may read the gauges from the database (at most once per interval): a thread
        render = functools.partial(render_metrics, registry, connection.headers.get("accept"))
        body, content_type = await anyio.to_thread.run_sync(render)
        return Response(content=body, media_type=content_type)

    router.add_api_route(
        path,
        ekbatan_metrics,
        methods=["GET"],
        include_in_schema=include_in_schema,
        summary="Ekbatan metrics (Prometheus)",
    )
    return router
