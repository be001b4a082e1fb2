"""Local event handlers ("listen to yourself"): outbox events delivered to in-process handlers.

Actions record events in ``eventlog.events`` in the same transaction as their changes. Two
distributed jobs deliver them: :class:`EventFanoutJob` writes one
``eventlog.event_notifications`` row per (event, subscribed handler), and
:class:`EventHandlingJob` calls the handlers, retrying failures with capped exponential
backoff until the retention window ends. Delivery is at least once. :func:`redrive_notifications`
sends failed or expired notifications of a handler back for another try.

``event_notifications`` is this package's table: it contributes it to ``ekbatan migrate``
(:func:`notifications_migrations`, entry point ``event_notifications`` of
``ekbatan.migrations``) and describes it (:func:`notifications_table`,
:func:`notifications_statements`, :func:`notifications_channel`).
"""

from ekbatan.local_event_handler._telemetry.settings import EventPipelineTelemetry
from ekbatan.local_event_handler.backoff import backoff_delay
from ekbatan.local_event_handler.dispatch import HandlerTimeoutError
from ekbatan.local_event_handler.envelope import EventEnvelope
from ekbatan.local_event_handler.event_type_checks import UnrecordedSubscription, unrecorded_subscriptions
from ekbatan.local_event_handler.fanout import (
    DEFAULT_FANOUT_BATCH_SIZE,
    DEFAULT_FANOUT_NAME,
    EventFanoutJob,
    EventFanoutJobBuilder,
)
from ekbatan.local_event_handler.handler import EventHandler, event_handler, is_event_handler
from ekbatan.local_event_handler.handler_registry import EventHandlerRegistry, EventHandlerRegistryBuilder
from ekbatan.local_event_handler.handling import (
    DEFAULT_HANDLING_BATCH_SIZE,
    DEFAULT_HANDLING_NAME,
    DEFAULT_MAX_BACKOFF_CAP,
    DEFAULT_RETENTION_WINDOW,
    EventHandlingJob,
    EventHandlingJobBuilder,
)
from ekbatan.local_event_handler.notifications_ddl import notifications_migrations, notifications_statements
from ekbatan.local_event_handler.notifications_table import (
    notifications_channel,
    notifications_table,
    notifications_table_name,
)
from ekbatan.local_event_handler.pipeline import event_pipeline_jobs
from ekbatan.local_event_handler.pipeline_job import DEFAULT_POLL_DELAY, PipelineJob
from ekbatan.local_event_handler.redrive import (
    DEFAULT_REDRIVE_BATCH_SIZE,
    REDRIVABLE_STATES,
    redrive_notifications,
)
from ekbatan.local_event_handler.shard_rounds import ShardRoundError
from ekbatan.local_event_handler.states import NotificationState

__all__ = [
    "DEFAULT_FANOUT_BATCH_SIZE",
    "DEFAULT_FANOUT_NAME",
    "DEFAULT_HANDLING_BATCH_SIZE",
    "DEFAULT_HANDLING_NAME",
    "DEFAULT_MAX_BACKOFF_CAP",
    "DEFAULT_POLL_DELAY",
    "DEFAULT_REDRIVE_BATCH_SIZE",
    "DEFAULT_RETENTION_WINDOW",
    "EventEnvelope",
    "EventFanoutJob",
    "EventFanoutJobBuilder",
    "EventHandler",
    "EventHandlerRegistry",
    "EventHandlerRegistryBuilder",
    "EventHandlingJob",
    "EventHandlingJobBuilder",
    "EventPipelineTelemetry",
    "HandlerTimeoutError",
    "NotificationState",
    "PipelineJob",
    "REDRIVABLE_STATES",
    "ShardRoundError",
    "UnrecordedSubscription",
    "backoff_delay",
    "event_handler",
    "event_pipeline_jobs",
    "is_event_handler",
    "notifications_channel",
    "notifications_migrations",
    "notifications_statements",
    "notifications_table",
    "notifications_table_name",
    "redrive_notifications",
    "unrecorded_subscriptions",
]
