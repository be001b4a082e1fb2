"""``ekbatan.jobs`` onto the JobRegistry builder: every key that is set, and only those, as plain
builder calls (the engine's builders never see a settings object)."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa
from integrations_support import ONE_SHARD

from ekbatan.core import EkbatanSettings, settings_from_document
from ekbatan.distributed_jobs import DistributedJob, JobContext, JobRegistry, Schedule, Schedules
from ekbatan.integrations import apply_jobs_settings


class Job(DistributedJob):
    def name(self) -> str:
        return "report"

    def schedule(self) -> Schedule:
        return Schedules.fixed_delay(timedelta(seconds=1))

    def execute(self, ctx: JobContext) -> None:
        pass


@pytest.fixture
def engine(tmp_path):
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'jobs.sqlite'}")  # building connects to nothing
    yield engine
    engine.dispose()


def builder(engine: sa.Engine):
    return JobRegistry.builder().connection_provider(engine).register_shutdown_hook(False).with_job(Job())


def knobs(registry: JobRegistry) -> tuple[timedelta, timedelta, timedelta]:
    s = registry.scheduler
    return s.polling_interval, s.heartbeat_interval, s.shutdown_max_wait


def jobs_settings(**jobs: object) -> EkbatanSettings:
    """``application.yml`` read the usual way, so that the durations are parsed as in production."""
    return settings_from_document({"ekbatan": {"jobs": jobs, "sharding": ONE_SHARD}}, environ={})


def test_a_zero_shutdown_max_wait_is_applied(engine):
    settings = jobs_settings(**{"shutdown-max-wait": "PT0S"})
    registry = apply_jobs_settings(builder(engine), settings.jobs).build()
    assert registry.scheduler.shutdown_max_wait == timedelta(0)  # not the 30-minute default


def test_absent_keys_leave_the_builder_defaults(engine):
    defaults = knobs(builder(engine).build())
    assert knobs(apply_jobs_settings(builder(engine), jobs_settings().jobs).build()) == defaults
    only_poll = builder(engine).heartbeat_interval(timedelta(seconds=3))
    registry = apply_jobs_settings(only_poll, jobs_settings(**{"polling-interval": "PT2S"}).jobs).build()
    assert knobs(registry) == (timedelta(seconds=2), timedelta(seconds=3), defaults[2])


def test_settings_override_earlier_calls_and_later_calls_override_them(engine):
    settings = jobs_settings(
        **{"polling-interval": "PT2S", "heartbeat-interval": "PT30S", "shutdown-max-wait": "PT5S"}
    )
    b = builder(engine).poll_interval(timedelta(seconds=9)).shutdown_max_wait(timedelta(hours=1))
    assert apply_jobs_settings(b, settings.jobs) is b
    assert knobs(b.build()) == (timedelta(seconds=2), timedelta(seconds=30), timedelta(seconds=5))
    b.heartbeat_interval(timedelta(seconds=12))
    assert knobs(b.build())[1] == timedelta(seconds=12)


def test_the_missed_heartbeats_limit_reaches_the_engine(engine):
    settings = jobs_settings(**{"heartbeat-interval": "PT30S", "missed-heartbeats-limit": 4})
    applied = apply_jobs_settings(builder(engine), settings.jobs).build().scheduler
    assert (applied.heartbeat_interval, applied.missed_heartbeats_limit) == (timedelta(seconds=30), 4)


@pytest.mark.parametrize("wrong", [{"shutdown-max-wait": "PT0S"}, "whole-settings"])
def test_anything_but_the_jobs_section_is_refused_naming_what_to_pass(engine, wrong):
    given = jobs_settings() if wrong == "whole-settings" else wrong
    with pytest.raises(TypeError, match=r"takes the ekbatan.jobs section \(settings.jobs\), got "):
        apply_jobs_settings(builder(engine), given)


def test_the_removed_builder_methods_say_what_to_write_instead(engine):
    from ekbatan.local_event_handler import EventFanoutJob, EventHandlingJob

    settings = jobs_settings()
    with pytest.raises(
        AttributeError, match=r"write ekbatan.integrations.apply_jobs_settings\(builder, settings.jobs\)"
    ):
        builder(engine).apply_settings(settings)
    for pipeline_builder in (EventFanoutJob.builder(), EventHandlingJob.builder()):
        with pytest.raises(
            AttributeError, match=r"write event_pipeline_jobs\(settings.local_event_handler, "
        ):
            pipeline_builder.apply_settings(settings)


def test_the_history_keys_reach_the_engine(engine):
    history = {
        "succeeded-retention": "P1D",
        "failed-retention": "P90D",
        "max-runs-per-task": 50,
        "prune-interval": "PT1H",
        "keep-task-data": True,
    }
    on = builder(engine).execution_history()
    registry = apply_jobs_settings(on, jobs_settings(history=history).jobs).build()
    settings = registry.scheduler.execution_history.settings
    assert settings.keep_task_data is True
    retention = settings.retention
    assert (retention.succeeded, retention.failed, retention.max_runs_per_task, retention.prune_every) == (
        timedelta(days=1),
        timedelta(days=90),
        50,
        timedelta(hours=1),
    )
    # a job registry with history runs the pruning task beside its job on a thread of its own
    assert registry.scheduler.threads == 2
    assert "ekbatan-history-prune" in registry.scheduler.task_names


def test_history_enabled_false_turns_it_off(engine):
    on = builder(engine).execution_history()
    registry = apply_jobs_settings(on, jobs_settings(history={"enabled": False}).jobs).build()
    assert registry.scheduler.execution_history is None
    assert registry.scheduler.threads == 1


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("succeeded-retention", "PT0S", "must be positive"),
        ("max-runs-per-task", 0, "must be at least 1"),
        ("keep-task-dat", True, "keep-task-dat"),
    ],
)
def test_bad_history_keys_are_refused_naming_them(key, value, message):
    from ekbatan.core import SettingsError

    with pytest.raises(SettingsError, match=message):
        jobs_settings(history={key: value})


class SkippingJob(Job):
    def name(self) -> str:
        return "skipping"

    def misfire_policy(self) -> str:
        return "skip|PT5M"


def misfire_of(registry: JobRegistry, name: str):
    task = registry.scheduler.repository.resolver.resolve(name)
    assert task is not None
    return task.misfire


def test_the_misfire_policy_key_reaches_every_job_that_names_none_itself(engine):
    from ekbatan.distributed_jobs.scheduler import MisfirePolicy

    both = builder(engine).with_job(SkippingJob())
    registry = apply_jobs_settings(both, jobs_settings(**{"misfire-policy": "run_all|10"}).jobs).build()
    assert misfire_of(registry, "report") == MisfirePolicy.run_all(10)
    assert misfire_of(registry, "skipping") == MisfirePolicy.skip(timedelta(minutes=5))  # its own wins
    unset = builder(engine).build()
    assert misfire_of(unset, "report") == MisfirePolicy.run_once()


@pytest.mark.parametrize(
    ("value", "message"),
    [("skip-late", "unrecognized misfire policy 'skip-late'"), ("run_all|0", "unrecognized misfire policy")],
)
def test_a_bad_misfire_policy_key_is_refused_naming_it(value, message):
    from ekbatan.core import SettingsError

    with pytest.raises(SettingsError, match=message) as raised:
        jobs_settings(**{"misfire-policy": value})
    assert "misfire" in str(raised.value) and "run_once" in str(raised.value)


def test_a_bad_grace_is_refused_naming_the_key(engine):
    settings = jobs_settings(**{"misfire-policy": "skip|5 minutes"})
    with pytest.raises(ValueError, match=r"ekbatan.jobs.misfire-policy: .*the grace '5 minutes'"):
        apply_jobs_settings(builder(engine), settings.jobs)


def test_a_job_naming_a_bad_policy_is_refused_naming_the_job(engine):
    class Bad(Job):
        def misfire_policy(self) -> object:
            return 30

    with pytest.raises(TypeError, match=r"Bad.misfire_policy\(\) of job 'report' returned int"):
        JobRegistry.builder().connection_provider(engine).register_shutdown_hook(False).with_job(
            Bad()
        ).build()
