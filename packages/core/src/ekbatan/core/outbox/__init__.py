"""The transactional outbox: events, actions, their executor and ``eventlog.events`` rows.

Business changes and the events they cause commit in one database transaction per shard, so a
consumer never sees an event whose change was rolled back, nor misses one that committed.
"""

from typing import TYPE_CHECKING

from ekbatan.core.lazy_exports import lazy_exports as _lazy_exports

if TYPE_CHECKING:
    from ekbatan.core.outbox.actions import ACTION_MARKER, Action, action, is_action
    from ekbatan.core.outbox.clock import (
        Clock,
        UtcClock,
        utc_now,
    )
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
    from ekbatan.core.outbox.event_types import (
        EventTypeRegistry,
        default_event_types,
        qualified_name,
    )
    from ekbatan.core.outbox.events import ModelEvent
    from ekbatan.core.outbox.executor import ActionExecutor, ActionOutcome
    from ekbatan.core.outbox.namespaces import validate_namespace
    from ekbatan.core.outbox.params import ActionParams, params_to_json_object
    from ekbatan.core.outbox.plan import ActionPlan, current_plan
    from ekbatan.core.outbox.recording import RecordedAction, record_events
    from ekbatan.core.outbox.routing import instance_shard
    from ekbatan.core.outbox.wakeups import (
        events_channel,
        notifications_channel,
    )

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
    "events_channel",
    "instance_shard",
    "is_action",
    "notifications_channel",
    "params_to_json_object",
    "qualified_name",
    "record_events",
    "utc_now",
    "validate_namespace",
]

__getattr__, __dir__ = _lazy_exports(
    __name__,
    {
        "ekbatan.core.outbox.wakeups": ("events_channel", "notifications_channel"),
        "ekbatan.core.outbox.actions": ("ACTION_MARKER", "Action", "action", "is_action"),
        "ekbatan.core.outbox.clock": ("Clock", "UtcClock", "utc_now"),
        "ekbatan.core.outbox.codec": ("EncodedEvent", "EventCodec", "default_codec"),
        "ekbatan.core.outbox.errors": (
            "ActionNotRegisteredError",
            "CrossShardError",
            "EventTypeCollisionError",
            "InvalidActionParamsError",
            "InvalidEventError",
            "NoActionRunningError",
            "OutboxError",
            "PartiallyCommittedError",
            "UnexpectedRowCountError",
        ),
        "ekbatan.core.outbox.event_types": ("EventTypeRegistry", "default_event_types", "qualified_name"),
        "ekbatan.core.outbox.events": ("ModelEvent",),
        "ekbatan.core.outbox.executor": ("ActionExecutor", "ActionOutcome"),
        "ekbatan.core.outbox.namespaces": ("validate_namespace",),
        "ekbatan.core.outbox.params": ("ActionParams", "params_to_json_object"),
        "ekbatan.core.outbox.plan": ("ActionPlan", "current_plan"),
        "ekbatan.core.outbox.recording": ("RecordedAction", "record_events"),
        "ekbatan.core.outbox.routing": ("instance_shard",),
    },
)
