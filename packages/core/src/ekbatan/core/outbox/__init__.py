"""The transactional outbox: events, actions, their executor and ``eventlog.events`` rows.

Business changes and the events they cause commit in one database transaction per shard, so a
consumer never sees an event whose change was rolled back, nor misses one that committed.
"""

from typing import TYPE_CHECKING

from ekbatan.core import _lazy_exports

if TYPE_CHECKING:
    from ekbatan.core.outbox._actions import (
        ACTION_MARKER as ACTION_MARKER,
        Action as Action,
        action as action,
        is_action as is_action,
    )
    from ekbatan.core.outbox._clock import (
        Clock as Clock,
        UtcClock as UtcClock,
        utc_now as utc_now,
    )
    from ekbatan.core.outbox._codec import (
        EncodedEvent as EncodedEvent,
        EventCodec as EventCodec,
        default_codec as default_codec,
    )
    from ekbatan.core.outbox._errors import (
        ActionNotRegisteredError as ActionNotRegisteredError,
        CrossShardError as CrossShardError,
        EventTypeCollisionError as EventTypeCollisionError,
        InvalidActionParamsError as InvalidActionParamsError,
        InvalidEventError as InvalidEventError,
        NoActionRunningError as NoActionRunningError,
        OutboxError as OutboxError,
        PartiallyCommittedError as PartiallyCommittedError,
        UnexpectedRowCountError as UnexpectedRowCountError,
    )
    from ekbatan.core.outbox._event_types import (
        EventTypeRegistry as EventTypeRegistry,
        default_event_types as default_event_types,
        qualified_name as qualified_name,
    )
    from ekbatan.core.outbox._events import ModelEvent as ModelEvent
    from ekbatan.core.outbox._executor import ActionExecutor as ActionExecutor, ActionOutcome as ActionOutcome
    from ekbatan.core.outbox._namespaces import validate_namespace as validate_namespace
    from ekbatan.core.outbox._params import (
        ActionParams as ActionParams,
        params_to_json_object as params_to_json_object,
    )
    from ekbatan.core.outbox._plan import ActionPlan as ActionPlan, current_plan as current_plan
    from ekbatan.core.outbox._recording import (
        RecordedAction as RecordedAction,
        record_events as record_events,
    )
    from ekbatan.core.outbox._routing import instance_shard as instance_shard
    from ekbatan.core.outbox._wakeups import events_channel as events_channel


__getattr__, __dir__, __all__ = _lazy_exports.lazy_exports(
    __name__,
    {
        "ekbatan.core.outbox._wakeups": ("events_channel",),
        "ekbatan.core.outbox._actions": ("ACTION_MARKER", "Action", "action", "is_action"),
        "ekbatan.core.outbox._clock": ("Clock", "UtcClock", "utc_now"),
        "ekbatan.core.outbox._codec": ("EncodedEvent", "EventCodec", "default_codec"),
        "ekbatan.core.outbox._errors": (
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
        "ekbatan.core.outbox._event_types": ("EventTypeRegistry", "default_event_types", "qualified_name"),
        "ekbatan.core.outbox._events": ("ModelEvent",),
        "ekbatan.core.outbox._executor": ("ActionExecutor", "ActionOutcome"),
        "ekbatan.core.outbox._namespaces": ("validate_namespace",),
        "ekbatan.core.outbox._params": ("ActionParams", "params_to_json_object"),
        "ekbatan.core.outbox._plan": ("ActionPlan", "current_plan"),
        "ekbatan.core.outbox._recording": ("RecordedAction", "record_events"),
        "ekbatan.core.outbox._routing": ("instance_shard",),
    },
)
