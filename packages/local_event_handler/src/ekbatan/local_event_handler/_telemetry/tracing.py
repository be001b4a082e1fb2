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
    """``action_context``: how a call's span relates to the span of the action that recorded its
    event, when that action kept one — ``"link"`` (a span link), ``"parent"`` (its child, in the
    action's trace) or ``"off"`` (neither, and nothing is read)."""

    def __init__(self, tracer: Any, action_context: str = "link") -> None:
        from opentelemetry.trace import Link, SpanKind, Status, StatusCode

        self.tracer = tracer
        self.action_context = action_context
        self._link = Link
        self._kind = SpanKind.CONSUMER
        self._error = Status(StatusCode.ERROR)
        #: handler name → (span name, the attributes every call of it has)
        self._fixed: dict[str, tuple[str, dict[str, Any]]] = {}

    @property
    def uses_action_context(self) -> bool:
        return self.action_context != "off"

    def wrap(
        self, handle: Callable[[Any], Any], row: Any, action_context: dict[str, str] | None = None
    ) -> Callable[[Any], Any]:
        """``handle`` inside a span of its own; an ``async def`` stays one (the dispatcher runs
        it on its event loop). ``action_context``: the kept ``traceparent`` of the action."""
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
        links, parent = self._related(action_context)
        attributes = {
            **common,
            "messaging.message.id": str(row.event_id),
            "ekbatan.event_type": row.event_type,
            "ekbatan.attempt": row.attempts + 1,
        }

        def span(name: str, attributes: dict[str, Any]) -> Any:
            return self._span(name, attributes, links, parent)

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

    def _related(self, carrier: dict[str, str] | None) -> tuple[list[Any] | None, Any]:
        """(links, parent context) of a call from its action's kept context."""
        if carrier is None or not self.uses_action_context:
            return None, None
        from opentelemetry import trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        context = TraceContextTextMapPropagator().extract(carrier)
        span_context = trace.get_current_span(context).get_span_context()
        if not span_context.is_valid:
            return None, None
        if self.action_context == "parent":
            return None, context
        return [self._link(span_context)], None

    def _span(self, name: str, attributes: dict[str, Any], links: list[Any] | None, parent: Any) -> Any:
        # the exception is recorded by hand: the result attribute is set either way
        return self.tracer.start_as_current_span(
            name,
            context=parent,
            kind=self._kind,
            links=links,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        )

    def _failed(self, span: Any, error: BaseException) -> None:
        span.record_exception(error)
        span.set_status(self._error)
        span.set_attribute("error.type", type(error).__qualname__)
        span.set_attribute("ekbatan.result", "failed")
