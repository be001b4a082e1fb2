"""Gauges read from the database: what is due, running, failing, paused and dead, per task.

They describe the whole cluster's table, so every process reports the same values: aggregate
them with ``max``, not ``sum``. Read when the metrics are collected, at most once per interval
per process (a collection in between reports the last read); a read that fails is logged once
per streak and reports nothing until one succeeds.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import sqlalchemy as sa

from ekbatan.distributed_jobs.scheduler._clock import Clock
from ekbatan.distributed_jobs.scheduler._liveness.outage import FailureLog
from ekbatan.distributed_jobs.scheduler._table.held_rows import HoldState
from ekbatan.distributed_jobs.scheduler._table.repository import TaskRepository
from ekbatan.distributed_jobs.scheduler._telemetry.instruments import Described

log = logging.getLogger("ekbatan.distributed_jobs.scheduler.telemetry")


@dataclass
class TableCounts:
    """One read: per task name."""

    due: dict[str, int] = field(default_factory=dict)
    oldest_due_age: dict[str, float] = field(default_factory=dict)
    running: dict[str, int] = field(default_factory=dict)
    failing: dict[str, int] = field(default_factory=dict)
    paused: dict[str, int] = field(default_factory=dict)
    dead: dict[str, int] = field(default_factory=dict)


#: each gauge, and the field of :class:`TableCounts` it reports
GAUGES: tuple[tuple[Described, str], ...] = (
    (Described("ekbatan.due", "{execution}", "Executions due and not picked, by task", ("task",)), "due"),
    (
        Described(
            "ekbatan.oldest_due_age",
            "s",
            "How long the oldest due, not picked execution has been due, by task",
            ("task",),
        ),
        "oldest_due_age",
    ),
    (
        Described(
            "ekbatan.running", "{execution}", "Executions picked (running) on any node, by task", ("task",)
        ),
        "running",
    ),
    (
        Described("ekbatan.failing", "{execution}", "Executions whose last run failed, by task", ("task",)),
        "failing",
    ),
    (
        Described(
            "ekbatan.paused",
            "{execution}",
            "Executions held back by a pause: paused one by one, or of a paused task name",
            ("task",),
        ),
        "paused",
    ),
    (
        Described(
            "ekbatan.dead",
            "{execution}",
            "Dead letters: executions whose retries ran out, by task",
            ("task",),
        ),
        "dead",
    ),
)


class TableGauges:
    def __init__(self, repository: TaskRepository, clock: Clock, interval: timedelta) -> None:
        self.repository = repository
        self.clock = clock
        self.interval = interval.total_seconds()
        self._lock = threading.Lock()
        self._read_at: float | None = None
        self._counts: TableCounts | None = None
        self.failures = FailureLog("reading the gauges of the scheduled tasks", log, retried=False)

    def register(self, meter: Any) -> None:
        """Report the gauges through OpenTelemetry observable gauges of ``meter``."""
        from opentelemetry.metrics import Observation

        for described, pick in GAUGES:

            def observe(options: Any, pick: str = pick) -> Iterable[Observation]:
                counts = self.counts()
                if counts is None:
                    return []
                return [Observation(value, {"task": task}) for task, value in getattr(counts, pick).items()]

            meter.create_observable_gauge(
                described.name, callbacks=[observe], unit=described.unit, description=described.description
            )

    def counts(self) -> TableCounts | None:
        """The last read, read again when it is older than the interval."""
        with self._lock:  # several gauges of one collection: one read
            if self._read_at is not None and time.monotonic() - self._read_at < self.interval:
                return self._counts
            try:
                self._counts = self._read()
                self.failures.succeeded()
            except sa.exc.SQLAlchemyError as exc:
                self.failures.failed(exc)
                self._counts = None
            self._read_at = time.monotonic()
            return self._counts

    def _read(self) -> TableCounts:
        repo = self.repository
        d = repo.dialect
        now = self.clock.now()
        counts = TableCounts()
        # the due rows through the execution_time index; the others in one pass over the table
        due_sql = sa.text(
            f"SELECT task_name, COUNT(*), MIN(execution_time) FROM {repo.table_name} "
            "WHERE picked = :false AND execution_time <= :now GROUP BY task_name"
        )
        totals_sql = sa.text(
            "SELECT task_name, COUNT(*), SUM(CASE WHEN picked = :true THEN 1 ELSE 0 END), "
            "SUM(CASE WHEN COALESCE(consecutive_failures, 0) > 0 THEN 1 ELSE 0 END) "
            f"FROM {repo.table_name} GROUP BY task_name"
        )
        flags = {"true": d.encode_bool(True), "false": d.encode_bool(False)}
        with repo.engine.connect() as conn:
            for name, due, oldest in conn.execute(
                due_sql, {"false": flags["false"], "now": d.encode_time(now)}
            ):
                counts.due[name] = int(due)
                first = d.decode_time(oldest)
                counts.oldest_due_age[name] = (
                    0.0 if first is None else max((now - first).total_seconds(), 0.0)
                )
            not_running: dict[str, int] = {}
            for name, total, running, failing in conn.execute(totals_sql, flags):
                counts.running[name] = int(running or 0)
                counts.failing[name] = int(failing or 0)
                not_running[name] = int(total) - int(running or 0)
        try:
            held, paused_names = repo.count_held(), repo.paused_task_names()
        except sa.exc.SQLAlchemyError:
            # a table not migrated yet (no held or pauses table): nothing is paused or dead
            held, paused_names = {}, frozenset()
        for (name, state), n in held.items():
            into = counts.dead if state is HoldState.DEAD else counts.paused
            into[name] = into.get(name, 0) + n
        for name in paused_names:
            counts.paused[name] = counts.paused.get(name, 0) + not_running.get(name, 0)
        # a task with nothing due reports 0 (not a missing series) once it has rows at all
        for name in set(counts.running) | set(counts.paused) | set(counts.dead):
            counts.due.setdefault(name, 0)
            counts.oldest_due_age.setdefault(name, 0.0)
            counts.running.setdefault(name, 0)
            counts.failing.setdefault(name, 0)
            counts.paused.setdefault(name, 0)
            counts.dead.setdefault(name, 0)
        return counts
