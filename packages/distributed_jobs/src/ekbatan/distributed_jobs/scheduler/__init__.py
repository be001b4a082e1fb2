"""A cluster-safe, database-backed scheduler: db-scheduler for Python.

Depends on SQLAlchemy and the standard library only — never on ``ekbatan.core`` —
so it can be used on its own.
"""

from ekbatan.distributed_jobs.scheduler._builder import SchedulerBuilder
from ekbatan.distributed_jobs.scheduler._client import SchedulerClient, WhenExists
from ekbatan.distributed_jobs.scheduler._clock import Clock, SettableClock, SystemClock
from ekbatan.distributed_jobs.scheduler._context import (
    CurrentlyExecuting,
    ExecutionContext,
    HeartbeatState,
    SchedulerState,
)
from ekbatan.distributed_jobs.scheduler._errors import (
    DataClassMismatchError,
    ExecutionError,
    ExecutionTimeoutError,
    FailedToScheduleBatchError,
    HoldError,
    SchedulerError,
    SerializationError,
    TableSchemaError,
    TaskDataTooLargeError,
    TaskInstanceCurrentlyExecutingError,
    TaskInstanceError,
    TaskInstanceNotFoundError,
    TaskKeyTooLongError,
)
from ekbatan.distributed_jobs.scheduler._execution import (
    MAX_KEY_LENGTH,
    PRIORITY_HIGH,
    PRIORITY_LOW,
    PRIORITY_MEDIUM,
    Execution,
    ExecutionComplete,
    ExecutionResult,
    TaskInstanceId,
)
from ekbatan.distributed_jobs.scheduler._history.recorder import PRUNE_TASK as HISTORY_PRUNE_TASK
from ekbatan.distributed_jobs.scheduler._history.records import (
    HistoryEntry,
    HistoryRetention,
    RunResult,
    TaskHistorySummary,
)
from ekbatan.distributed_jobs.scheduler._instances import SchedulableInstance, TaskInstance
from ekbatan.distributed_jobs.scheduler._liveness.outage import describe as describe_failure
from ekbatan.distributed_jobs.scheduler._observability import (
    CandidateEventType,
    ExecutionChain,
    ExecutionInterceptor,
    SchedulerEventType,
    SchedulerListener,
)
from ekbatan.distributed_jobs.scheduler._options import DEFAULT_MISSED_HEARTBEATS, MIN_MISSED_HEARTBEATS
from ekbatan.distributed_jobs.scheduler._polling.change_watch import ChangeWatch
from ekbatan.distributed_jobs.scheduler._running.async_runner import AsyncRunner
from ekbatan.distributed_jobs.scheduler._scheduler import Scheduler
from ekbatan.distributed_jobs.scheduler._serializers import JsonSerializer, PickleSerializer, Serializer
from ekbatan.distributed_jobs.scheduler._table.held_ddl import (
    held_table_name,
    history_table_name,
    pauses_table_name,
    traces_table_name,
)
from ekbatan.distributed_jobs.scheduler._table.held_rows import (
    ErrorRecord,
    HeldExecution,
    HoldState,
    Released,
    TaskPause,
)
from ekbatan.distributed_jobs.scheduler._table.listing import (
    ExecutionTimeAndId,
    ScheduledExecution,
    ScheduledExecutionsFilter,
    TaskSummary,
)
from ekbatan.distributed_jobs.scheduler._table.node_claims import NodeClaims
from ekbatan.distributed_jobs.scheduler._table.rows import COLUMNS as TABLE_COLUMNS
from ekbatan.distributed_jobs.scheduler._tasks.builders import Tasks
from ekbatan.distributed_jobs.scheduler._tasks.completion import (
    CompletionHandler,
    OnCompleteDoNothing,
    OnCompleteRemove,
    OnCompleteReplace,
    OnCompleteReschedule,
    OnCompleteRescheduleTo,
)
from ekbatan.distributed_jobs.scheduler._tasks.dead_execution import (
    CancelDeadExecution,
    DeadExecutionHandler,
    ReviveDeadExecution,
)
from ekbatan.distributed_jobs.scheduler._tasks.failure import (
    ExponentialBackoff,
    FailureHandler,
    FailureHandlers,
    MaxRetries,
    OnFailureDeadLetter,
    OnFailureReschedule,
    OnFailureRescheduleUsingTaskDataSchedule,
    OnFailureRetryLater,
)
from ekbatan.distributed_jobs.scheduler._tasks.kinds import (
    RECURRING_INSTANCE,
    CustomTask,
    OneTimeTask,
    RecurringTask,
    RecurringTaskWithPersistentSchedule,
    Task,
)
from ekbatan.distributed_jobs.scheduler._tasks.operations import ExecutionOperations
from ekbatan.distributed_jobs.scheduler._telemetry.instruments import (
    SECONDS_BUCKETS,
    Described,
    LocalCounter,
    LocalHistogram,
)
from ekbatan.distributed_jobs.scheduler._telemetry.prometheus import (
    GaugeReading,
    LocalCollector,
    prometheus_name,
)
from ekbatan.distributed_jobs.scheduler._telemetry.settings import (
    package_version as telemetry_version,
    require_api as require_opentelemetry_api,
)
from ekbatan.distributed_jobs.scheduler._telemetry.wiring import sdk_provider as opentelemetry_sdk_provider
from ekbatan.distributed_jobs.scheduler.dialects import Dialect, dialect_from_url
from ekbatan.distributed_jobs.scheduler.schedules import (
    NEVER,
    Daily,
    FixedDelay,
    FixedRate,
    MisfirePolicy,
    MissedSlots,
    PersistentCronSchedule,
    PlainScheduleAndData,
    Schedule,
    ScheduleAndData,
    Schedules,
)
from ekbatan.distributed_jobs.scheduler.schema import (
    DEFAULT_TABLE_NAME,
    create_companion_tables,
    create_table,
    ddl_statements,
    priority_column_ddl,
    validate_table_name,
)

__all__ = [
    "SECONDS_BUCKETS",
    "Described",
    "GaugeReading",
    "LocalCollector",
    "LocalCounter",
    "LocalHistogram",
    "prometheus_name",
    "opentelemetry_sdk_provider",
    "require_opentelemetry_api",
    "telemetry_version",
    "AsyncRunner",
    "TABLE_COLUMNS",
    "describe_failure",
    "DEFAULT_TABLE_NAME",
    "HISTORY_PRUNE_TASK",
    "NEVER",
    "MAX_KEY_LENGTH",
    "DEFAULT_MISSED_HEARTBEATS",
    "MIN_MISSED_HEARTBEATS",
    "PRIORITY_HIGH",
    "PRIORITY_LOW",
    "PRIORITY_MEDIUM",
    "RECURRING_INSTANCE",
    "CancelDeadExecution",
    "CandidateEventType",
    "Clock",
    "CompletionHandler",
    "CurrentlyExecuting",
    "CustomTask",
    "Daily",
    "DataClassMismatchError",
    "DeadExecutionHandler",
    "Dialect",
    "Execution",
    "ExecutionChain",
    "ExecutionComplete",
    "ExecutionContext",
    "ExecutionError",
    "ExecutionInterceptor",
    "ExecutionOperations",
    "ExecutionResult",
    "ExecutionTimeAndId",
    "ErrorRecord",
    "ExponentialBackoff",
    "FailedToScheduleBatchError",
    "FailureHandler",
    "FailureHandlers",
    "FixedDelay",
    "FixedRate",
    "HeartbeatState",
    "HeldExecution",
    "HistoryEntry",
    "HistoryRetention",
    "ExecutionTimeoutError",
    "HoldError",
    "HoldState",
    "JsonSerializer",
    "MaxRetries",
    "MisfirePolicy",
    "MissedSlots",
    "NodeClaims",
    "OnCompleteDoNothing",
    "OnCompleteRemove",
    "OnCompleteReplace",
    "OnCompleteReschedule",
    "OnCompleteRescheduleTo",
    "OnFailureDeadLetter",
    "OnFailureReschedule",
    "OnFailureRescheduleUsingTaskDataSchedule",
    "OnFailureRetryLater",
    "OneTimeTask",
    "PersistentCronSchedule",
    "PickleSerializer",
    "PlainScheduleAndData",
    "RecurringTask",
    "RecurringTaskWithPersistentSchedule",
    "Released",
    "ReviveDeadExecution",
    "RunResult",
    "Schedule",
    "ScheduleAndData",
    "SchedulableInstance",
    "ScheduledExecution",
    "ScheduledExecutionsFilter",
    "Scheduler",
    "SchedulerBuilder",
    "SchedulerClient",
    "ChangeWatch",
    "SchedulerError",
    "SchedulerEventType",
    "SchedulerListener",
    "SchedulerState",
    "Schedules",
    "SerializationError",
    "Serializer",
    "SettableClock",
    "SystemClock",
    "Task",
    "TableSchemaError",
    "TaskDataTooLargeError",
    "TaskHistorySummary",
    "TaskInstance",
    "TaskInstanceCurrentlyExecutingError",
    "TaskInstanceError",
    "TaskInstanceId",
    "TaskInstanceNotFoundError",
    "TaskKeyTooLongError",
    "TaskPause",
    "TaskSummary",
    "Tasks",
    "WhenExists",
    "create_companion_tables",
    "create_table",
    "ddl_statements",
    "dialect_from_url",
    "held_table_name",
    "history_table_name",
    "traces_table_name",
    "pauses_table_name",
    "priority_column_ddl",
    "validate_table_name",
]
