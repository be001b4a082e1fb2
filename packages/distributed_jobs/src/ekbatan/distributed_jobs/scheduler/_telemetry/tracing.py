"""A span per run: an interceptor, outermost, so the run's body (and whatever it calls that is
instrumented — HTTP clients, database drivers) runs inside it.

Span names and attributes follow OpenTelemetry's messaging conventions where they fit (a run is
the *process* operation of a message: kind CONSUMER, ``messaging.system="ekbatan"``,
``messaging.destination.name`` = the task) plus the engine's own ``ekbatan.*`` attributes.
"""

from __future__ import annotations

from typing import Any

from ekbatan.distributed_jobs.scheduler._context import ExecutionContext
from ekbatan.distributed_jobs.scheduler._instances import TaskInstance
from ekbatan.distributed_jobs.scheduler._observability import ExecutionChain, ExecutionInterceptor
from ekbatan.distributed_jobs.scheduler._tasks.completion import CompletionHandler
from ekbatan.distributed_jobs.scheduler._telemetry.propagation import TraceContexts, parent_context


class ExecutionTracing(ExecutionInterceptor):
    """``contexts``: where the schedule calls' trace contexts are taken from (None: not
    looked up); the run's span links to its schedule call's, or is its child."""

    def __init__(
        self, tracer: Any, contexts: TraceContexts | None, *, child_of_schedule: bool = False
    ) -> None:
        from opentelemetry.trace import (
            Link,
            SpanKind,
            Status,
            StatusCode,
        )

        self.tracer = tracer
        self.contexts = contexts
        self.child_of_schedule = child_of_schedule
        self._kind = SpanKind.CONSUMER
        self._error = Status(StatusCode.ERROR)
        self._link = Link

    def execute(
        self, instance: TaskInstance[Any], ctx: ExecutionContext, chain: ExecutionChain
    ) -> CompletionHandler:
        execution = ctx.execution
        # few attributes, each cheap to make: a span costs every run; the due time and the lag
        # are the metrics' (ekbatan.execution.lag)
        attributes = {
            "messaging.system": "ekbatan",
            "messaging.operation.name": "process",
            "messaging.destination.name": execution.task_name,
            "ekbatan.task": execution.task_name,
            "ekbatan.instance": execution.instance_id,
            "ekbatan.attempt": execution.consecutive_failures + 1,
            "ekbatan.fencing_token": execution.version,
        }
        links, parent = None, None
        carrier = None if self.contexts is None else self.contexts.take(execution)
        if carrier is not None:
            scheduled = parent_context(carrier)
            if scheduled.is_valid:
                if self.child_of_schedule:
                    parent = _as_parent(scheduled)
                else:
                    links = [self._link(scheduled)]
        # record_exception/set_status_on_exception by hand: the run's result is set either way
        with self.tracer.start_as_current_span(
            f"process {execution.task_name}",
            context=parent,
            kind=self._kind,
            attributes=attributes,
            links=links,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                completion = chain.proceed(instance, ctx)
            except BaseException as exc:
                span.record_exception(exc)
                span.set_status(self._error)
                span.set_attribute("error.type", type(exc).__qualname__)
                span.set_attribute("ekbatan.result", "failed")
                raise
            span.set_attribute("ekbatan.result", "succeeded")
            return completion


def _as_parent(span_context: Any) -> Any:
    """An OpenTelemetry context whose current span is ``span_context`` (another process's)."""
    from opentelemetry.trace import NonRecordingSpan, set_span_in_context

    return set_span_in_context(NonRecordingSpan(span_context))
