"""Tasks through the integrations: discovery of ``@one_time_task`` /
``@recurring_task_with_persistent_schedule`` (functions and classes), ``build_runtime``
registering them in the one scheduler, the runtime's client decoding their data, ``ekbatan
tasks show`` on them, and two ``ekbatan worker`` processes running scheduled instances once."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from integrations_support import application_yml
from integrations_tasks_sample import payments, receipts, reports
from integrations_tasks_sample.payments import Payment, RecordPayment, task_payments
from integrations_tasks_sample.receipts import Receipt, send_receipt
from test_integrations_cli_worker import kill, read_line, stop_with_sigterm

from ekbatan.core import DatabaseRegistry
from ekbatan.distributed_jobs import DistributedJob, JobContext, Schedule, Schedules, task_definition_of
from ekbatan.distributed_jobs.scheduler import (
    PlainScheduleAndData,
    ScheduledExecutionsFilter,
    SchedulerClient,
    Tasks,
)
from ekbatan.integrations import Discovered, scan
from ekbatan.integrations.cli import main
from ekbatan.integrations.runtime import build_runtime
from testsupport import wait_until

SAMPLE = "integrations_tasks_sample"
TESTS = Path(__file__).resolve().parent


def sqlite_config(tmp_path: Path) -> Path:
    return application_yml(tmp_path, f"sqlite:///{tmp_path / 'app.sqlite'}")


# --------------------------------------------------------------------------- discovery
def test_scan_finds_function_and_class_tasks_where_they_are_defined():
    found = scan(SAMPLE)
    # by module, then definition order; reexports.py only imports them and adds nothing
    assert found.tasks == (RecordPayment, send_receipt, reports.report)
    assert found.jobs == () and found.handlers == () and found.actions == ()
    assert scan(f"{SAMPLE}.reexports").tasks == ()


def test_tasks_alone_make_a_discovery_truthy():
    assert not Discovered()
    assert Discovered(tasks=(send_receipt,))


# --------------------------------------------------------------------------- build_runtime
def test_build_runtime_registers_the_tasks_in_one_scheduler_building_class_tasks(tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="ekbatan.integrations"):
        runtime = build_runtime(sqlite_config(tmp_path), [SAMPLE])
    try:
        assert runtime.jobs == () and runtime.job_registry is not None  # tasks alone make a registry
        assert [task.name for task in runtime.tasks] == ["record-payment", "send-receipt", "report"]
        assert runtime.job_registry.task_names == ("record-payment", "send-receipt", "report")
        record = runtime.tasks[0]
        # the class was built with Ekbatan's database registry injected, and wrapped
        assert isinstance(record.handler.__self__, RecordPayment)  # type: ignore[attr-defined]
        assert record.handler.__self__.database_registry is runtime.database_registry  # type: ignore[attr-defined]
        assert isinstance(runtime.database_registry, DatabaseRegistry)
        assert record.data_type is Payment and task_definition_of(record) is task_definition_of(RecordPayment)
        assert runtime.tasks[1] is send_receipt  # a function's task is registered as it is
        assert runtime.scheduler_client is runtime.job_registry.scheduler.client
        resolver = runtime.scheduler_client.repository.resolver
        assert (
            resolver.resolve("record-payment") is record and resolver.resolve("send-receipt") is send_receipt
        )
    finally:
        runtime.stop()
    assert "0 job(s), 3 task(s)" in caplog.text


def test_extra_tasks_are_registered_beside_the_discovered_and_the_same_object_once(tmp_path):
    by_hand = Tasks.one_time("by-hand", data_type=dict).execute(lambda instance, ctx: None)
    runtime = build_runtime(
        sqlite_config(tmp_path), [f"{SAMPLE}.receipts"], extra_tasks=[by_hand, send_receipt]
    )
    runtime.stop()
    assert runtime.tasks == (send_receipt, by_hand)


def test_a_task_named_as_another_task_fails_at_build_naming_both(tmp_path):
    clash = Tasks.one_time("send-receipt").execute(lambda instance, ctx: None)
    with pytest.raises(ValueError) as raised:
        build_runtime(sqlite_config(tmp_path), [f"{SAMPLE}.receipts"], extra_tasks=[clash])
    message = str(raised.value)
    assert (
        "'send-receipt' is the name of both task 'send-receipt' (integrations_tasks_sample.receipts.send_receipt)"
        in message
    )
    assert "OneTimeTask('send-receipt')" in message


class ReportJob(DistributedJob):
    def name(self) -> str:
        return "report"

    def schedule(self) -> Schedule:
        return Schedules.fixed_delay(timedelta(hours=1))

    def execute(self, ctx: JobContext) -> None: ...


def test_a_task_named_as_a_job_fails_at_build_naming_both(tmp_path):
    with pytest.raises(ValueError) as raised:
        build_runtime(sqlite_config(tmp_path), [f"{SAMPLE}.reports"], extra_jobs=[ReportJob()])
    message = str(raised.value)
    assert f"job {__name__}.ReportJob" in message
    assert "task 'report' (integrations_tasks_sample.reports.report)" in message


# --------------------------------------------------------------------------- real databases
@pytest.mark.dialects("postgres", "mariadb")
def test_scheduled_tasks_run_once_with_their_data_decoded(app_db, tmp_path):
    config = application_yml(tmp_path, app_db.url, eventlog=app_db.eventlog)
    engine = sa.create_engine(app_db.url)
    payments.metadata.create_all(engine)
    run = uuid.uuid4().hex[:8]
    receipts.SENT.clear()
    reports.REPORTS.clear()
    runtime = build_runtime(config, [SAMPLE], migrate_on_start=True)
    try:
        with runtime:
            client = runtime.scheduler_client
            # not due yet: listed and read back with the data decoded as the task's type
            later = Receipt(order=f"later-{run}", amount_cents=990)
            assert client.schedule(send_receipt.instance(f"later-{run}", later), timedelta(hours=1))
            row = client.get_scheduled_execution(("send-receipt", f"later-{run}"))
            assert row is not None and row.data == later and isinstance(row.data, Receipt)
            listed = client.get_scheduled_executions_for_task(
                "send-receipt", filter=ScheduledExecutionsFilter.all()
            )
            assert [r.data for r in listed] == [later]

            now = Receipt(order=f"now-{run}", amount_cents=1250)
            assert client.schedule(send_receipt.instance(f"now-{run}", now))
            assert client.schedule(RecordPayment.instance(f"pay-{run}", Payment(amount_cents=700)))
            every = PlainScheduleAndData(Schedules.fixed_delay(timedelta(milliseconds=200)), {"to": "ops"})
            assert client.schedule(reports.report.schedulable_instance(f"acme-{run}", every))

            wait_until(lambda: receipts.SENT, timeout=30, message="send-receipt ran")
            wait_until(
                lambda: client.get_scheduled_execution(("send-receipt", f"now-{run}")) is None,
                timeout=30,
                message="the one-time execution was deleted after it succeeded",
            )
            sent = list(receipts.SENT)
            assert sent == [(f"now-{run}", now)]  # once, decoded as the dataclass

            def payment_rows() -> list[tuple[str, int]]:
                with engine.connect() as connection:
                    return [
                        tuple(r)
                        for r in connection.execute(
                            sa.select(task_payments.c.instance_id, task_payments.c.amount_cents)
                        )
                    ]

            wait_until(payment_rows, timeout=30, message="record-payment (a class task, async) ran")
            wait_until(
                lambda: client.get_scheduled_execution(("record-payment", f"pay-{run}")) is None,
                timeout=30,
                message="record-payment's execution was deleted after it succeeded",
            )
            assert payment_rows() == [(f"pay-{run}", 700)]

            wait_until(
                lambda: len(reports.REPORTS) >= 2, timeout=30, message="the report ran twice on its schedule"
            )
            assert set(reports.REPORTS) == {f"acme-{run}"}
            kept = client.get_scheduled_execution(("report", f"acme-{run}"))
            assert (
                kept is not None
                and isinstance(kept.data, PlainScheduleAndData)
                and kept.data.data == {"to": "ops"}
            )
            # the later receipt is still there, untouched
            assert client.get_scheduled_execution(("send-receipt", f"later-{run}")) is not None

        # the operator's view of the same rows
        shown = CliRunner().invoke(
            main, ["tasks", "show", "--config", str(config), "send-receipt", f"later-{run}", "--json"]
        )
        assert shown.exit_code == 0, shown.output
        assert json.loads(shown.stdout)["data"] == {"order": f"later-{run}", "amount_cents": 990}
    finally:
        engine.dispose()


# --------------------------------------------------------------------------- two workers
@pytest.mark.slow
@pytest.mark.dialects("postgres")
def test_two_workers_run_twenty_scheduled_instances_exactly_once_in_total(app_db, tmp_path):
    config = application_yml(tmp_path, app_db.url, eventlog=app_db.eventlog)
    assert CliRunner().invoke(main, ["migrate", "--config", str(config)]).exit_code == 0
    engine = sa.create_engine(app_db.url)
    payments.metadata.create_all(engine)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "ekbatan.integrations.cli", "worker", "--config", str(config)]
    command += ["--packages", SAMPLE, "--json"]
    workers = [
        subprocess.Popen(
            command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    client = SchedulerClient(engine, [task_definition_of(RecordPayment).prototype], dialect="postgresql")  # type: ignore[union-attr]
    try:
        for worker in workers:
            assert json.loads(read_line(worker, timeout=60))["event"] == "started"
        for i in range(20):
            assert client.schedule(RecordPayment.instance(f"p{i:02d}", Payment(amount_cents=i)))

        def left() -> int:
            return len(
                client.get_scheduled_executions_for_task(
                    "record-payment", filter=ScheduledExecutionsFilter.all()
                )
            )

        # every execution is deleted once it succeeded: when none is left, no run can follow
        wait_until(lambda: left() == 0, timeout=60, message="the 20 instances ran and were deleted")
        with engine.connect() as connection:
            rows = connection.execute(
                sa.select(task_payments.c.instance_id, task_payments.c.amount_cents)
            ).all()
        assert sorted(rows) == [(f"p{i:02d}", i) for i in range(20)]  # each once, none twice
        for worker in workers:
            stop_with_sigterm(worker)
    finally:
        for worker in workers:
            kill(worker)
        engine.dispose()
