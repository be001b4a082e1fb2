"""Fixtures for the engine's tests: an isolated database with ``scheduled_tasks`` created."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

from ekbatan.distributed_jobs.scheduler import Scheduler, SettableClock, create_table
from testsupport import EventRecorder, IsolatedDatabase


@pytest.fixture
def engine(database: IsolatedDatabase) -> Iterator[sa.Engine]:
    """An engine on a fresh database holding an empty ``scheduled_tasks`` table."""
    eng = database.engine()
    create_table(eng)
    yield eng
    eng.dispose()


@pytest.fixture
def clock() -> SettableClock:
    return SettableClock(datetime(2024, 1, 1, 12, 0, tzinfo=UTC))


@pytest.fixture
def built() -> Iterator[list[Scheduler]]:
    """Schedulers made by a test; stopped afterwards whatever happened."""
    schedulers: list[Scheduler] = []
    yield schedulers
    for scheduler in schedulers:
        if not scheduler.is_shutting_down:
            scheduler.stop()


@pytest.fixture
def manual(engine: sa.Engine, clock: SettableClock, built: list[Scheduler]):
    """``manual(*tasks, recorder=None, start_tasks=(), interceptors=())``: a scheduler on the
    test's engine and settable clock, driven by hand (``run_any_due_executions()`` …) and
    stopped afterwards."""

    def make(*tasks, recorder: EventRecorder | None = None, start_tasks=(), interceptors=()) -> Scheduler:
        builder = Scheduler.create(engine, *tasks).clock(clock).scheduler_name("manual")
        builder.start_tasks(*start_tasks).failure_logging("OFF")
        if recorder is not None:
            builder.add_listener(recorder)
        for interceptor in interceptors:
            builder.add_interceptor(interceptor)
        scheduler = builder.build()
        built.append(scheduler)
        return scheduler

    return make
