"""How a registry's jobs and tasks become one scheduler's engine tasks: each job's handler
(logging its failures), a listener logging the given tasks' failures, and names that clash
refused with the classes and functions a user must rename."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ekbatan.distributed_jobs.job import DistributedJob, JobContext
from ekbatan.distributed_jobs.scheduler import (
    ExecutionComplete,
    ExecutionContext,
    ExecutionResult,
    MisfirePolicy,
    SchedulerListener,
    Task,
    TaskInstance,
)
from ekbatan.distributed_jobs.tasks import task_definition_of

log = logging.getLogger("ekbatan.distributed_jobs")


def qualified(job: DistributedJob) -> str:
    cls = type(job)
    return f"{cls.__module__}.{cls.__qualname__}"


def name_clash(name: str, jobs: list[DistributedJob]) -> str:
    """``'report' is the name() of both a.ReportJob and b.ReportJob``: the classes are what a
    user must find and rename, and two jobs of one name may well live in different packages."""
    classes = [qualified(job) for job in jobs]
    if len(set(classes)) == 1:
        return f"{name!r} is the name() of {len(classes)} instances of {classes[0]}"
    listed = " and ".join(classes) if len(classes) == 2 else ", ".join(classes[:-1]) + f" and {classes[-1]}"
    return f"{name!r} is the name() of {'both ' if len(classes) == 2 else ''}{listed}"


def job_misfire_policy(job: DistributedJob, name: str) -> MisfirePolicy | None:
    """The policy the job names itself with an optional ``misfire_policy()`` (None: it names none)."""
    own = getattr(job, "misfire_policy", None)
    if own is None:
        return None
    policy = own() if callable(own) else own
    if policy is None or isinstance(policy, MisfirePolicy):
        return policy
    if isinstance(policy, str):
        try:
            return MisfirePolicy.parse(policy)
        except ValueError as e:
            raise ValueError(f"{qualified(job)}.misfire_policy() of job {name!r}: {e}") from None
    raise TypeError(
        f"{qualified(job)}.misfire_policy() of job {name!r} returned {type(policy).__name__}; return a "
        "MisfirePolicy (e.g. MisfirePolicy.skip(timedelta(minutes=5))), its string form ('skip|PT5M') or None"
    )


def task_origin(task: Task[Any]) -> str:
    """``task 'send-receipt' (shop.tasks.send_receipt)``: where a task was defined, when a
    decorator made it, so that a clash names what to rename."""
    definition = task_definition_of(task)
    where = f" ({definition.defined_as})" if definition is not None and definition.defined_as else ""
    return f"task {task.name!r}{where}" if where else f"task {task!r}"


def refuse_task_name_clashes(
    jobs: list[DistributedJob], job_names: list[str], tasks: list[Task[Any]]
) -> None:
    seen: dict[str, str] = {name: f"job {qualified(job)}" for job, name in zip(jobs, job_names, strict=True)}
    taken: dict[str, Task[Any]] = {}
    clashes: list[str] = []
    for task in tasks:
        if taken.get(task.name) is task:
            continue  # the same object twice is one task
        here = task_origin(task)
        if task.name in seen:
            clashes.append(f"{task.name!r} is the name of both {seen[task.name]} and {here}")
        else:
            seen[task.name] = here
            taken[task.name] = task
    if clashes:
        raise ValueError(
            f"task and job names must be unique within a JobRegistry; {'; '.join(clashes)}. Rename one of "
            "them: the name is the key of their rows in scheduled_tasks"
        )


class TaskFailureLog(SchedulerListener):
    def __init__(self, names: set[str]) -> None:
        self._names = frozenset(names)

    def on_execution_complete(self, complete: ExecutionComplete) -> None:
        execution = complete.execution
        if complete.result is not ExecutionResult.FAILED or execution.task_name not in self._names:
            return
        cause = complete.cause
        log.error(
            "task %s instance %s failed (%d failure(s) in a row before this one): %s: %s",
            execution.task_name,
            execution.instance_id,
            execution.consecutive_failures,
            type(cause).__name__,
            cause,
            exc_info=cause,
        )


def job_handler(job: DistributedJob, name: str) -> Callable[[TaskInstance[Any], ExecutionContext], Any]:
    def failed(exc: BaseException) -> None:
        log.error("job %s failed: %s: %s", name, type(exc).__name__, exc, exc_info=exc)

    async def finish_async(pending: Any) -> None:
        try:
            await pending
        except BaseException as exc:
            failed(exc)
            raise
        log.debug("job %s finished", name)

    def handler(instance: TaskInstance[Any], ctx: ExecutionContext) -> Any:
        log.debug("job %s started", name)
        try:
            result = job.execute(JobContext(ctx))
        except BaseException as exc:
            failed(exc)
            raise
        if hasattr(result, "__await__"):
            return finish_async(result)
        log.debug("job %s finished", name)
        return None

    return handler
