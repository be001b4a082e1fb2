"""What a held execution and a task pause look like to their readers, and how a failure's
error is cut down to what is kept."""

from __future__ import annotations

import dataclasses
import enum
import getpass
import socket
import traceback
from dataclasses import dataclass
from datetime import datetime

#: the kept part of an error: the message's start and the traceback's end (its last frames
#: and the exception line are what a reader needs; a recursion error's 1,000 frames are not)
MAX_ERROR_MESSAGE = 2_000
MAX_TRACEBACK = 8_000
MAX_REASON = 500
MAX_ACTOR = 255


class HoldState(enum.StrEnum):
    """Why an execution was taken out of ``scheduled_tasks`` and kept."""

    #: its retries ran out; kept with the last error until retried or cancelled
    DEAD = "dead"
    #: paused one by one; kept with its due time until resumed
    PAUSED = "paused"


@dataclass(frozen=True, slots=True)
class ErrorRecord:
    """The class, message and (bounded) traceback of the exception a run ended with."""

    error_class: str | None
    message: str | None
    traceback: str | None

    @classmethod
    def of(cls, error: BaseException | None) -> ErrorRecord:
        if error is None:
            return cls(None, None, None)
        kind = type(error)
        name = (
            kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
        )
        text = "".join(traceback.format_exception(error))
        if len(text) > MAX_TRACEBACK:
            text = "…" + text[-(MAX_TRACEBACK - 1) :]
        return cls(name[:255], str(error)[:MAX_ERROR_MESSAGE], text)


@dataclass(frozen=True, slots=True)
class HeldExecution:
    """A row of ``<table>_held``: an execution kept out of ``scheduled_tasks``."""

    task_name: str
    instance_id: str
    state: HoldState
    #: the due time it had when it was taken out (a paused one keeps it for its resumption)
    execution_time: datetime
    held_at: datetime
    held_by: str | None
    reason: str | None
    consecutive_failures: int
    last_success: datetime | None
    last_failure: datetime | None
    priority: int | None
    error: ErrorRecord
    raw_data: bytes | None = dataclasses.field(default=None, repr=False)

    @property
    def key(self) -> tuple[str, str]:
        return (self.task_name, self.instance_id)


@dataclass(frozen=True, slots=True)
class TaskPause:
    """A row of ``<table>_pauses``: a task name paused as a whole, by whom, when and why."""

    task_name: str
    paused_at: datetime
    paused_by: str | None
    reason: str | None


@dataclass(frozen=True, slots=True)
class Released:
    """What a resumption or a retry put back: the instances of ``task_name`` back in the
    schedule, those left held because the schedule has an execution with their key again,
    and (for a resumption) whether the task's own pause was lifted."""

    task_name: str
    executions: tuple[str, ...]
    left_held: tuple[str, ...] = ()
    task_pause_lifted: bool = False


def default_actor() -> str:
    """Who is acting, for the audit columns when the caller does not say: ``user@host``."""
    try:
        user = getpass.getuser()
    except Exception:  # no login name in some containers
        user = "unknown"
    return f"{user}@{socket.gethostname()}"[:MAX_ACTOR]


def bounded_reason(reason: str | None) -> str | None:
    return None if reason is None else reason[:MAX_REASON]
