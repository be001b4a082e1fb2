"""Runs one picked execution on the calling worker thread: handler, then completion or
failure handling, with the bookkeeping and events around them."""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from ekbatan.distributed_jobs.scheduler._clock import Clock
from ekbatan.distributed_jobs.scheduler._context import (
    CurrentlyExecuting,
    ExecutionContext,
    HeartbeatState,
    SchedulerState,
)
from ekbatan.distributed_jobs.scheduler._errors import (
    ExecutionError,
    ExecutionTimeoutError,
    SerializationError,
)
from ekbatan.distributed_jobs.scheduler._execution import Execution, ExecutionComplete, TaskInstanceId
from ekbatan.distributed_jobs.scheduler._instances import TaskInstance
from ekbatan.distributed_jobs.scheduler._liveness.outage import (
    DEFAULT_OUTAGE_POLICY,
    FailureLog,
    OutagePolicy,
    is_database_error,
)
from ekbatan.distributed_jobs.scheduler._observability import (
    CandidateEventType,
    ExecutionChain,
    ExecutionInterceptor,
    Listeners,
    SchedulerEventType,
)
from ekbatan.distributed_jobs.scheduler._running.async_runner import AsyncRunner
from ekbatan.distributed_jobs.scheduler._running.completion_batches import CompletionBatcher
from ekbatan.distributed_jobs.scheduler._running.deadlines import DeadlineWatch, Outcome
from ekbatan.distributed_jobs.scheduler._serializers import Serializer
from ekbatan.distributed_jobs.scheduler._table.repository import TaskRepository
from ekbatan.distributed_jobs.scheduler._tasks.completion import CompletionHandler, OnCompleteRemove
from ekbatan.distributed_jobs.scheduler._tasks.kinds import Task
from ekbatan.distributed_jobs.scheduler._tasks.operations import ExecutionOperations
from ekbatan.distributed_jobs.scheduler.schedules import MissedSlots

log = logging.getLogger("ekbatan.distributed_jobs.scheduler.execution")

#: seconds a body ending just after its deadline waits for the deadline's record of its run
RECORD_WAIT = 30.0

#: seconds before a known due time that the poller wakes to claim it. On an idle machine the
#: first round trip after a sleep costs milliseconds (the CPUs and the server's process wake up
#: too); started this early, the claim is in hand by the due time, and the worker waits out the
#: rest: :meth:`ExecutionRunner.execute` never starts a handler before its due time.
CLAIM_LEAD = 0.025


class ExecutionRegistry:
    """The executions inside a handler on this process right now (not merely queued)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[int, CurrentlyExecuting] = {}
        self._tokens = itertools.count()

    def add(self, currently: CurrentlyExecuting) -> int:
        token = next(self._tokens)
        with self._lock:
            self._running[token] = currently
        return token

    def remove(self, token: int) -> None:
        with self._lock:
            self._running.pop(token, None)

    def snapshot(self) -> list[CurrentlyExecuting]:
        with self._lock:
            return list(self._running.values())

    def __len__(self) -> int:
        return len(self._running)


class ExecutionRunner:
    def __init__(
        self,
        *,
        repository: TaskRepository,
        serializer: Serializer,
        clock: Clock,
        listeners: Listeners,
        interceptors: Sequence[ExecutionInterceptor],
        registry: ExecutionRegistry,
        state: SchedulerState,
        client_factory: Callable[[], Any],
        heartbeat_interval: timedelta,
        missed_heartbeats_limit: int,
        on_scheduled: Callable[[TaskInstanceId, datetime], None] | None,
        async_runner: AsyncRunner,
        failure_log_level: int = logging.WARNING,
        failure_log_stack_trace: bool = True,
        writer: CompletionBatcher | None = None,
        outage: OutagePolicy = DEFAULT_OUTAGE_POLICY,
    ) -> None:
        self.repository = repository
        # A stored due time may be up to this much before the one asked for (SQLite keeps
        # milliseconds): wait that much longer, so nothing starts before the time asked for.
        self._truncated_by = (repository.dialect.time_resolution - timedelta(microseconds=1)).total_seconds()
        self.serializer = serializer
        self.clock = clock
        self.listeners = listeners
        self.interceptors = tuple(interceptors)
        self.registry = registry
        self.state = state
        self._client_factory = client_factory
        self.heartbeat_interval = heartbeat_interval
        self.missed_heartbeats_limit = missed_heartbeats_limit
        self._on_scheduled = on_scheduled
        self.async_runner = async_runner
        self.failure_log_level = failure_log_level
        self.failure_log_stack_trace = failure_log_stack_trace
        self.writer = writer
        self.remover = writer.remove if writer is not None else None
        #: the deadlines of thread bodies of tasks with a timeout (a thread of its own, on first use)
        self.deadlines = DeadlineWatch(clock)
        # A database gone under running executions fails every one's result alike: one line
        # for the streak and a count now and then, not a traceback per execution.
        self.write_failures = FailureLog(
            "recording execution results (an unrecorded one stays picked, to be revived as dead and run again)",
            log,
            policy=outage,
            retried=False,
        )

    def _ops_scheduled(self, task_name: str, instance_id: str, when: datetime) -> None:
        if self._on_scheduled is not None:
            self._on_scheduled(TaskInstanceId(task_name, instance_id), when)

    def _decoder(self, task: Task[Any], execution: Execution) -> Callable[[], Any]:
        def decode() -> Any:
            try:
                return self.serializer.deserialize(task.data_type, execution.raw_data)
            except SerializationError as exc:
                raise SerializationError(
                    f"cannot decode the data of {execution.task_name}/{execution.instance_id}: {exc}"
                ) from exc

        return decode

    def _invoke(
        self, task: Task[Any], outcome: Outcome | None = None
    ) -> Callable[[TaskInstance[Any], ExecutionContext], CompletionHandler]:
        def terminal(instance: TaskInstance[Any], ctx: ExecutionContext) -> CompletionHandler:
            result = task.handler(instance, ctx)
            if inspect.isawaitable(result):
                if ctx.deadline is None or outcome is None:
                    result = self.async_runner.run(_awaited(result))
                else:
                    outcome.awaiting = True
                    left = (ctx.deadline - self.clock.now()).total_seconds()
                    result = self.async_runner.run(_awaited_until(result, left, ctx))
            return task.completion_for(result)

        return terminal

    def execute(self, execution: Execution) -> None:
        """Run a picked execution to the end (handler and handlers of its outcome)."""
        now = self.clock.now()
        early = (execution.execution_time - now).total_seconds() + self._truncated_by
        if early > 0:
            # Claimed just ahead of its due time (CLAIM_LEAD): the handler starts at it,
            # never before. The wall clock is read again after each sleep (a sleep is timed on
            # the monotonic clock, and a poll may wake a little more than CLAIM_LEAD ahead on a
            # busy host); the whole wait is bounded, so a clock that does not move cannot hold
            # a worker.
            give_up = time.monotonic() + 2 * CLAIM_LEAD + self._truncated_by
            while early > 0 and (left := give_up - time.monotonic()) > 0:
                time.sleep(min(early, left))
                now = self.clock.now()
                early = (execution.execution_time - now).total_seconds() + self._truncated_by
        task = self.repository.resolver.resolve(execution.task_name)
        listeners = self.listeners
        if task is None:
            log.error("picked execution %s of an unknown task; it stays picked", execution)
            listeners.on_scheduler_event(SchedulerEventType.UNEXPECTED_ERROR)
            return
        missed = task.missed_at_start(execution, now)
        if missed is not None:
            self._skip_missed(execution, missed)  # its misfire policy says: too late to run
            return
        instance: TaskInstance[Any] = TaskInstance(
            execution.task_name,
            execution.instance_id,
            priority=execution.priority,
            data_supplier=self._decoder(task, execution),
        )
        heartbeat = HeartbeatState(self.clock, now, self.heartbeat_interval, self.missed_heartbeats_limit)
        currently = CurrentlyExecuting(execution, instance, self.clock, heartbeat)
        token = self.registry.add(currently)
        try:
            if listeners:
                listeners.on_candidate_event(CandidateEventType.EXECUTED)
                listeners.on_execution_start(currently)
            time_started = self.clock.now()
            deadline = None if task.timeout is None else time_started + task.timeout
            ctx = ExecutionContext(
                self.state, execution, self._client_factory(), currently, deadline, task.timeout
            )
            ops = ExecutionOperations(
                self.repository,
                execution,
                self.serializer,
                self._ops_scheduled,
                self.remover,
                on_missed=listeners.on_slots_missed,
            )
            outcome: Outcome | None = None
            stop_watching: Callable[[], None] | None = None
            if deadline is not None:
                # whichever comes first records the run: the body's end, or its deadline
                outcome = Outcome()
                stop_watching = self.deadlines.watch(
                    deadline,
                    lambda: self._expired(task, execution, instance, ops, time_started, ctx, outcome, token),
                )
            try:
                if self.interceptors:
                    chain = ExecutionChain(self.interceptors, self._invoke(task, outcome))
                    completion = chain.proceed(instance, ctx)
                else:
                    completion = self._invoke(task, outcome)(instance, ctx)
            except BaseException as exc:
                if isinstance(exc, KeyboardInterrupt | SystemExit):
                    raise
                if stop_watching is not None:
                    stop_watching()
                if outcome is not None and not outcome.claim():
                    self._after_deadline(execution, outcome, exc)
                    return
                self._failed(task, execution, instance, ops, time_started, exc)
                return
            if stop_watching is not None:
                stop_watching()
            if outcome is not None and not outcome.claim():
                self._after_deadline(execution, outcome, None)
                return
            complete = ExecutionComplete.success(execution, time_started, self.clock.now(), instance)
            if self.writer is not None and type(completion) is OnCompleteRemove:
                # The common one-time case: the writer deletes it with others in one commit;
                # this worker moves on. Listeners still hear of it only once it is written.
                self.writer.submit(execution, lambda error: self._completed(complete, error))
                return
            try:
                completion.complete(complete, ops)
            except Exception as exc:
                self._completed(complete, exc)
            else:
                self._completed(complete, None)
        finally:
            self.registry.remove(token)

    def _expired(
        self,
        task: Task[Any],
        execution: Execution,
        instance: TaskInstance[Any],
        ops: ExecutionOperations,
        time_started: datetime,
        ctx: ExecutionContext,
        outcome: Outcome,
        token: int,
    ) -> None:
        """A run reached its deadline before its body ended: record it as failed now (on the
        deadline watch's thread). The body is told through ``ctx``; an async one is being
        cancelled at the same moment, a thread one cannot be stopped."""
        ctx.cancellation.set()
        if outcome.awaiting or not outcome.claim():
            return  # an awaited body is cancelled by its own wait, and its worker records it
        # the failure handler moves the row on: heartbeats for it would only fail their check
        self.registry.remove(token)
        timeout = ExecutionTimeoutError(execution.task_name, execution.instance_id, task.timeout)
        try:
            self._failed(task, execution, instance, ops, time_started, timeout)
        finally:
            outcome.recorded.set()

    def _after_deadline(self, execution: Execution, outcome: Outcome, error: BaseException | None) -> None:
        """The body of a run already recorded as failed at its deadline ended: its outcome is
        discarded (the row has moved on; a write now could undo what the failure handler did).
        Returns once the deadline's record is written."""
        outcome.recorded.wait(RECORD_WAIT)
        if isinstance(error, ExecutionTimeoutError):
            log.debug("%s stopped at its timeout (recorded as failed at the deadline)", execution)
            return
        ended = "returned" if error is None else f"raised {type(error).__name__}: {error}"
        log.warning(
            "%s %s after its timeout; recorded as failed at the deadline, this outcome is discarded",
            execution,
            ended,
        )

    def _skip_missed(self, execution: Execution, missed: MissedSlots) -> None:
        """Move a recurring execution past slots it is too late for, without running it: its
        bookkeeping (last success, failures, data) stays as it was."""
        try:
            self.repository.reschedule(
                execution,
                missed.next_time,
                last_success=execution.last_success,
                last_failure=execution.last_failure,
                consecutive_failures=execution.consecutive_failures,
            )
        except ExecutionError as lost:
            log.warning(
                "skipping missed slots of %s not recorded: the row changed meanwhile: %s", execution, lost
            )
            return
        except Exception as error:
            if not is_database_error(error):
                raise
            self.write_failures.failed(error)  # left picked: revived as dead, then looked at again
            return
        self.write_failures.succeeded()
        log.info("%s: %s; next run at %s", execution, missed.describe(), missed.next_time.isoformat())
        self._ops_scheduled(execution.task_name, execution.instance_id, missed.next_time)
        self.listeners.on_slots_missed(execution, missed)

    def _completed(self, complete: ExecutionComplete, error: BaseException | None) -> None:
        listeners = self.listeners
        if isinstance(error, ExecutionError):
            log.warning(
                "result of %s not recorded: the row changed meanwhile (revived or taken over by another "
                "instance?): %s",
                complete.execution,
                error,
            )
        elif error is not None and is_database_error(error):
            self.write_failures.failed(error)
        elif error is not None:
            log.error(
                "completion handler of %s failed; the execution will likely remain picked and be handled "
                "as dead later",
                complete.execution,
                exc_info=error,
            )
        else:
            self.write_failures.succeeded()
        if error is not None:
            listeners.on_scheduler_event(SchedulerEventType.COMPLETIONHANDLER_ERROR)
            listeners.on_scheduler_event(SchedulerEventType.UNEXPECTED_ERROR)
        if listeners:
            listeners.on_execution_complete(complete)

    def _failed(
        self,
        task: Task[Any],
        execution: Execution,
        instance: TaskInstance[Any],
        ops: ExecutionOperations,
        time_started: datetime,
        exc: BaseException,
    ) -> None:
        if self.failure_log_level:
            log.log(
                self.failure_log_level,
                "execution %s failed: %s: %s",
                execution,
                type(exc).__name__,
                exc,
                exc_info=exc if self.failure_log_stack_trace else None,
            )
        complete = ExecutionComplete.failure(execution, time_started, self.clock.now(), exc, instance)
        try:
            task.failure_handler.on_failure(complete, ops)
        except Exception as error:
            if is_database_error(error):
                self.write_failures.failed(error)
            else:
                log.exception(
                    "failure handler of %s failed; the execution will likely remain picked and be handled "
                    "as dead later",
                    execution,
                )
            self.listeners.on_scheduler_event(SchedulerEventType.FAILUREHANDLER_ERROR)
            self.listeners.on_scheduler_event(SchedulerEventType.UNEXPECTED_ERROR)
        else:
            # a failure recorded is a result written: it ends an outage streak as a success does
            self.write_failures.succeeded()
        finally:
            if self.listeners:
                self.listeners.on_execution_complete(complete)


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


async def _awaited_until(awaitable: Any, seconds: float, ctx: ExecutionContext) -> Any:
    """Await an async body until its deadline; past it, cancel it and raise the timeout."""
    scope = asyncio.timeout(max(seconds, 0.0))
    try:
        async with scope:
            return await awaitable
    except TimeoutError:
        if not scope.expired():
            # the body's own TimeoutError (an HTTP client's, an inner asyncio.timeout): its
            # failure, not the task's timeout; wait_for could not tell the two apart
            raise
        e = ctx.execution
        raise ExecutionTimeoutError(e.task_name, e.instance_id, ctx.timeout) from None
