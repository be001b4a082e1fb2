"""A due row of a task name no task of the scheduler has: one WARNING per name, naming the known
task names closest to it, whichever pass meets the row (the poll or the dead-execution pass)."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest

from ekbatan.distributed_jobs.scheduler import SchedulerClient, TaskInstance, Tasks

LOGGER = "ekbatan.distributed_jobs.scheduler"


def noop(instance, ctx) -> None:
    return None


def unknown_name_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == LOGGER and r.levelno == logging.WARNING and "unknown task name" in r.getMessage()
    ]


def test_a_misspelled_task_name_is_logged_once_with_the_closest_known_names(manual, clock, caplog, dialect):
    caplog.set_level(logging.WARNING, logger=LOGGER)
    send = Tasks.one_time("send-receipt").execute(noop)
    other = Tasks.one_time("refund").execute(noop)
    scheduler = manual(send, other)
    assert scheduler.schedule(TaskInstance("sendd-receipt", "order-1"), clock.now())
    assert scheduler.schedule(TaskInstance("sendd-receipt", "order-2"), clock.now())
    assert scheduler.schedule(TaskInstance("zzz", "1"), clock.now())

    scheduler.run_any_due_executions()
    scheduler.run_dead_execution_detection()
    clock.advance(timedelta(seconds=1))
    scheduler.run_any_due_executions()
    scheduler.run_dead_execution_detection()

    lines = unknown_name_lines(caplog)
    assert len(lines) == 2, lines
    [misspelled] = [line for line in lines if "'sendd-receipt'" in line]
    assert "closest known task names: 'send-receipt'" in misspelled
    assert "'refund'" not in misspelled
    [unlike] = [line for line in lines if "'zzz'" in line]
    assert unlike.endswith("closest known task names: none")
    assert set(scheduler.unresolved_task_names) == {"sendd-receipt", "zzz"}
    assert set(scheduler.task_names) == {"send-receipt", "refund"}


def test_the_dead_execution_pass_alone_warns_too(manual, clock, caplog, dialect, engine):
    # under lock-and-fetch the poll never claims a row of an unknown name: this pass meets it
    caplog.set_level(logging.WARNING, logger=LOGGER)
    scheduler = manual(Tasks.one_time("send-receipt").execute(noop))
    # written by a client that knows no task (another application's, say): it warns of nothing
    SchedulerClient(engine).schedule(TaskInstance("sendd-receipt", "1"), clock.now())
    assert unknown_name_lines(caplog) == []

    scheduler.run_dead_execution_detection()

    [line] = unknown_name_lines(caplog)
    assert "'sendd-receipt'" in line and "'send-receipt'" in line


def test_a_client_that_knows_tasks_warns_when_it_schedules_an_unknown_name(engine, caplog, dialect):
    caplog.set_level(logging.WARNING, logger=LOGGER)
    client = SchedulerClient(engine, [Tasks.one_time("send-receipt").execute(noop)])
    assert client.schedule(TaskInstance("sendd-receipt", "1"))  # still written: a worker may know it
    assert client.schedule(TaskInstance("sendd-receipt", "2"))
    assert client.schedule(TaskInstance("send-receipt", "3"))
    [line] = unknown_name_lines(caplog)
    assert line.startswith("unknown task name 'sendd-receipt' scheduling:")
    assert line.endswith("closest known task names: 'send-receipt'")
