"""The transactional outbox: events, actions, their executor and ``eventlog.events`` rows.

Business changes and the events they cause commit in one database transaction per shard, so a
consumer never sees an event whose change was rolled back, nor misses one that committed.
"""

from ekbatan.core.outbox.actions import ACTION_MARKER, Action, action, is_action
from ekbatan.core.outbox.clock import Clock, UtcClock
from ekbatan.core.outbox.codec import EncodedEvent, EventCodec, default_codec
from ekbatan.core.outbox.errors import (
    ActionNotRegisteredError,
    CrossShardError,
    EventTypeCollisionError,
    InvalidActionParamsError,
    InvalidEventError,
    NoActionRunningError,
    OutboxError,
    PartiallyCommittedError,
    UnexpectedRowCountError,
)
from ekbatan.core.outbox.event_types import EventTypeRegistry, default_event_types
from ekbatan.core.outbox.events import ModelEvent
from ekbatan.core.outbox.executor import ActionExecutor, ActionOutcome
from ekbatan.core.outbox.namespaces import validate_namespace
from ekbatan.core.outbox.params import ActionParams, params_to_json_object
from ekbatan.core.outbox.plan import ActionPlan, current_plan
from ekbatan.core.outbox.recording import RecordedAction, record_events
from ekbatan.core.outbox.routing import instance_shard

__all__ = [
    "ACTION_MARKER",
    "Action",
    "ActionExecutor",
    "ActionNotRegisteredError",
    "ActionOutcome",
    "ActionParams",
    "ActionPlan",
    "Clock",
    "CrossShardError",
    "EncodedEvent",
    "EventCodec",
    "EventTypeCollisionError",
    "EventTypeRegistry",
    "InvalidActionParamsError",
    "InvalidEventError",
    "ModelEvent",
    "NoActionRunningError",
    "OutboxError",
    "PartiallyCommittedError",
    "RecordedAction",
    "UnexpectedRowCountError",
    "UtcClock",
    "action",
    "current_plan",
    "default_codec",
    "default_event_types",
    "instance_shard",
    "is_action",
    "params_to_json_object",
    "record_events",
    "validate_namespace",
]
