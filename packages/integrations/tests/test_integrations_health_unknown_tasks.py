"""The readiness report lists the task names in ``scheduled_tasks`` no task of the running
scheduler has (a name misspelled when scheduling), with their row counts, without making the
instance not ready."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from integrations_support import application_yml

from ekbatan.distributed_jobs.scheduler import TaskInstance
from ekbatan.integrations import build_runtime
from ekbatan.integrations.health import health_report
from testsupport import wait_until


def test_the_health_report_counts_rows_of_unknown_task_names(app_db, tmp_path):
    config = application_yml(tmp_path, app_db.url, eventlog=app_db.eventlog)
    runtime = build_runtime(config, ["integrations_sample.jobs"], migrate_on_start=True)
    with runtime:
        _, report = health_report(runtime, failing_tasks_cache=timedelta(0))
        assert "unknown_tasks" not in (report["scheduler"] or {})
        client = runtime.scheduler_client
        due = datetime.now(UTC) - timedelta(seconds=1)
        assert client.schedule(TaskInstance("wallet-top-upp", "order-1"), due)
        assert client.schedule(TaskInstance("wallet-top-upp", "order-2"), due)
        assert client.schedule(TaskInstance("other-app-task", "x"), due + timedelta(days=1))

        def unknown() -> list | None:
            return health_report(runtime, failing_tasks_cache=timedelta(0))[1]["scheduler"].get(
                "unknown_tasks"
            )

        listed = wait_until(unknown, 10, message="unknown task names in the health report")
        assert sorted(listed, key=lambda t: t["task_name"]) == [
            {"task_name": "other-app-task", "executions": 1},
            {"task_name": "wallet-top-upp", "executions": 2},
        ]
        # without the summary read, the names the scheduler met in due rows, uncounted
        wait_until(
            lambda: "wallet-top-upp" in runtime.job_registry.scheduler.unresolved_task_names,
            10,
            message="the scheduler met the misspelled name",
        )
        _, uncounted = health_report(runtime, count_failing_tasks=False)
        assert {"task_name": "wallet-top-upp", "executions": None} in uncounted["scheduler"]["unknown_tasks"]
