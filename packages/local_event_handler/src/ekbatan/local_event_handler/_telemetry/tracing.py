"""A span per handler call, made on the thread (or the event loop) the handler runs on, so
whatever the handler calls that is instrumented — HTTP clients, database drivers — is its child.

Names and attributes follow OpenTelemetry's messaging conventions where they fit (a handler call
is the *process* operation of a message: kind CONSUMER, ``messaging.system="ekbatan"``,
``messaging.destination.name`` = the handler) plus the pipeline's own ``ekbatan.*`` attributes.
Spans may carry the event's id (``messaging.message.id``); metrics never do.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any


class HandlerTracing:
    def __init__(self, tracer: Any) -> None:
        from opentelemetry.trace import SpanKind, Status, StatusCode

        self.tracer = tracer
        self._kind = SpanKind.CONSUMER
        self._error = Status(StatusCode.ERROR)
        #: handler name → (span name, the attributes every call of it has)
        self._fixed: dict[str, tuple[str, dict[str, Any]]] = {}

    def wrap(self, handle: Callable[[Any], Any], row: Any) -> Callable[[Any], Any]:
        """``handle`` inside a span of its own; an ``async def`` stays one (the dispatcher runs
        it on its event loop)."""
        fixed = self._fixed.get(row.handler_name)
        if fixed is None:
            fixed = self._fixed[row.handler_name] = (
                f"process {row.handler_name}",
                {
                    "messaging.system": "ekbatan",
                    "messaging.operation.name": "process",
                    "messaging.operation.type": "process",
                    "messaging.destination.name": row.handler_name,
                    "ekbatan.handler": row.handler_name,
                },
            )
        name, common = fixed
        attributes = {
            **common,
            "messaging.message.id": str(row.event_id),
            "ekbatan.event_type": row.event_type,
            "ekbatan.attempt": row.attempts + 1,
        }
        span = self._span

        if inspect.iscoroutinefunction(handle):

            async def traced_async(envelope: Any) -> Any:
                with span(name, attributes) as current:
                    try:
                        result = await handle(envelope)
                    except BaseException as error:
                        self._failed(current, error)
                        raise
                    current.set_attribute("ekbatan.result", "succeeded")
                    return result

            return traced_async

        def traced(envelope: Any) -> Any:
            with span(name, attributes) as current:
                try:
                    result = handle(envelope)
                except BaseException as error:
                    self._failed(current, error)
                    raise
                current.set_attribute("ekbatan.result", "succeeded")
                return result

        return traced

    def _span(self, name: str, attributes: dict[str, Any]) -> Any:
        # the exception is recorded by hand: the result attribute is set either way
        return self.tracer.start_as_current_span(
            name,
            kind=self._kind,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        )

    def _failed(self, span: Any, error: BaseException) -> None:
        span.record_exception(error)
        span.set_status(self._error)
        span.set_attribute("error.type", type(error).__qualname__)
        span.set_attribute("ekbatan.result", "failed")
