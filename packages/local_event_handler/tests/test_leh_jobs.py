"""The pipeline jobs as distributed jobs: builders, settings, a real JobRegistry, wake-ups."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from pipeline_support import RecordingHandler, executor_for, registry_of

from ekbatan.core import DatabaseRegistry, LocalEventHandlerConfig, record_events, settings_from_document
from ekbatan.core.outbox import UtcClock, events_channel
from ekbatan.distributed_jobs import JobRegistry, Schedules
from ekbatan.distributed_jobs.scheduler import create_table
from ekbatan.local_event_handler import (
    DEFAULT_FANOUT_BATCH_SIZE,
    DEFAULT_HANDLING_BATCH_SIZE,
    EventFanoutJob,
    EventHandlerRegistry,
    EventHandlingJob,
    event_pipeline_jobs,
    notifications_channel,
)
from ekbatan.local_event_handler.listening import ShardListeners
from testsupport import wait_until
from testsupport.sample_domain import GadgetCreateAction, GadgetCreated, NewGadget

UNREACHABLE = "postgresql+psycopg://nobody@unreachable.invalid:5432/none"


@pytest.fixture
def offline_registry():
    """Building never connects: a registry of a host that does not exist is enough."""
    settings = settings_with({})
    with DatabaseRegistry.from_config(settings) as registry:
        yield registry


def handlers():
    return EventHandlerRegistry.builder().with_handler(RecordingHandler("email")).build()


def test_builder_defaults(offline_registry):
    fanout = EventFanoutJob.builder().database_registry(offline_registry).event_handler_registry(handlers())
    fanout = fanout.clock(UtcClock()).build()
    assert (fanout.name(), fanout.poll_delay, fanout.batch_size) == (
        "ekbatan-event-fanout",
        timedelta(seconds=1),
        DEFAULT_FANOUT_BATCH_SIZE,
    )
    assert fanout.schedule() == Schedules.fixed_delay(timedelta(seconds=1))
    handling = (
        EventHandlingJob.builder()
        .database_registry(offline_registry)
        .event_handler_registry(handlers())
        .clock(UtcClock())
        .build()
    )
    assert (handling.name(), handling.poll_delay, handling.batch_size) == (
        "ekbatan-event-handling",
        timedelta(seconds=1),
        DEFAULT_HANDLING_BATCH_SIZE,
    )
    assert (handling.max_backoff_cap, handling.retention_window, handling.handler_timeout) == (
        timedelta(minutes=5),
        timedelta(days=7),
        None,
    )


@pytest.mark.parametrize("job", [EventFanoutJob, EventHandlingJob])
def test_builders_require_registry_handlers_and_clock(job, offline_registry):
    with pytest.raises(ValueError, match="database_registry is required"):
        job.builder().event_handler_registry(handlers()).clock(UtcClock()).build()
    with pytest.raises(ValueError, match="event_handler_registry is required"):
        job.builder().database_registry(offline_registry).clock(UtcClock()).build()
    with pytest.raises(ValueError, match=r"clock is required; pass UtcClock\(\)"):
        job.builder().database_registry(offline_registry).event_handler_registry(handlers()).build()


@pytest.mark.parametrize(
    ("option", "value", "error"),
    [
        ("poll_delay", timedelta(0), "poll_delay must be positive"),
        ("poll_delay", timedelta(seconds=-1), "poll_delay must be positive"),
        ("poll_delay", 1, "poll_delay must be a timedelta"),
        ("batch_size", 0, "batch_size must be positive"),
        ("batch_size", 1.5, "batch_size must be an int"),
        ("name", " ", "job name must be a non-blank string"),
        ("max_backoff_cap", timedelta(0), "max_backoff_cap must be positive"),
        ("retention_window", timedelta(seconds=-5), "retention_window must be positive"),
        ("handler_timeout", timedelta(0), "handler_timeout must be positive"),
    ],
)
def test_bad_options_are_refused_when_set(option, value, error):
    builder = EventHandlingJob.builder()
    with pytest.raises((ValueError, TypeError), match=error):
        getattr(builder, option)(value)


def settings_with(local_event_handler):
    return settings_from_document(
        {
            "ekbatan": {
                "namespace": "shop",
                "local-event-handler": local_event_handler,
                "sharding": {
                    "default-shard": {"group": 0, "member": 0},
                    "groups": [
                        {
                            "group": 0,
                            "name": "global",
                            "members": [{"member": 0, "configs": {"primary-config": {"url": UNREACHABLE}}}],
                        }
                    ],
                },
            }
        },
        environ={},
    )


def test_settings_build_both_jobs_and_absent_keys_keep_the_defaults(offline_registry):
    settings = settings_with(
        {
            "fanout-poll-delay": "PT0.2S",
            "handling-batch-size": 50,
            "handling-retention-window": "PT24H",
            "handling-handler-timeout": "PT30S",
            "handling": {"enabled": True},
        }
    )
    fanout, handling = event_pipeline_jobs(
        settings.local_event_handler, database_registry=offline_registry, event_handler_registry=handlers()
    )
    assert isinstance(fanout, EventFanoutJob) and isinstance(handling, EventHandlingJob)
    assert (fanout.poll_delay, fanout.batch_size) == (timedelta(milliseconds=200), 200)
    assert (handling.poll_delay, handling.batch_size) == (timedelta(seconds=1), 50)
    assert (handling.retention_window, handling.max_backoff_cap) == (
        timedelta(hours=24),
        timedelta(minutes=5),
    )


def test_handling_is_opt_in(offline_registry):
    for config in (
        settings_with({}).local_event_handler,
        settings_with({"handling": None}).local_event_handler,
        LocalEventHandlerConfig(),
        None,
    ):
        jobs = event_pipeline_jobs(
            config, database_registry=offline_registry, event_handler_registry=handlers()
        )
        assert [type(j) for j in jobs] == [EventFanoutJob]


def test_anything_but_the_section_is_refused_naming_what_to_pass(offline_registry):
    with pytest.raises(TypeError, match="takes the ekbatan.local-event-handler section or None; got dict$"):
        event_pipeline_jobs(
            {"handling": True}, database_registry=offline_registry, event_handler_registry=handlers()
        )
    with pytest.raises(TypeError, match=r"got EkbatanSettings \(pass settings.local_event_handler\)"):
        event_pipeline_jobs(
            settings_with({}), database_registry=offline_registry, event_handler_registry=handlers()
        )


def test_only_the_keys_that_are_set_reach_the_builders(offline_registry):
    config = LocalEventHandlerConfig.model_validate(
        {"handling-max-backoff-cap": "PT10S", "fanout-batch-size": 7, "handling": {"enabled": True}}
    )
    fanout, handling = event_pipeline_jobs(
        config, database_registry=offline_registry, event_handler_registry=handlers()
    )
    assert (fanout.batch_size, fanout.poll_delay) == (7, timedelta(seconds=1))
    assert (handling.poll_delay, handling.max_backoff_cap, handling.batch_size) == (
        timedelta(seconds=1),
        timedelta(seconds=10),
        100,
    )
    assert handling.handler_timeout is None and handling.retention_window == timedelta(days=7)


def test_a_real_job_registry_delivers_and_releases_both_rows_at_shutdown(one_shard):
    """Both jobs inside one JobRegistry: an action's event reaches its handler, and stop() returns
    promptly although each job's execute() loops for as long as it holds its row."""
    registry = registry_of([one_shard])
    engine = one_shard.manager.primary.engine
    create_table(engine)
    email = RecordingHandler("email")
    handler_registry = EventHandlerRegistry.builder().with_handler(email).build()
    settings = LocalEventHandlerConfig.model_validate(
        {"fanout-poll-delay": "PT10M", "handling-poll-delay": "PT10M", "handling": {"enabled": True}}
    )
    jobs = event_pipeline_jobs(settings, database_registry=registry, event_handler_registry=handler_registry)
    job_registry = (
        JobRegistry.builder()
        .connection_provider(one_shard.manager.primary)
        .with_jobs(jobs)
        .poll_interval(timedelta(milliseconds=100))
        .shutdown_max_wait(timedelta(minutes=10))
        .register_shutdown_hook(False)
        .build()
    )
    # Written before the jobs start: the fan-out's first round finds it and wakes the handling
    # job in this process, so it is delivered without waiting a poll delay on any dialect.
    executor_for(registry).execute(GadgetCreateAction(), NewGadget(one_shard.shard, "w", "red"))
    job_registry.start()
    try:
        wait_until(lambda: email.calls == 1, timeout=60, message="the handler was called")
        wait_until(lambda: one_shard.count_notifications("SUCCEEDED") == 1, timeout=60)
    finally:
        stopping = threading.Thread(target=job_registry.stop, daemon=True)
        stopping.start()
        # The poll delay and each shutdown phase are ten minutes; the loops look at the
        # shutdown flag every 200 ms, so stop() ends long before this deadline.
        stopping.join(60)
    assert not stopping.is_alive(), "stop() waited out a poll delay or a shutdown phase"
    with engine.connect() as connection:
        picked = connection.exec_driver_sql("SELECT task_name, picked FROM scheduled_tasks").all()
    assert sorted(picked) == [("ekbatan-event-fanout", False), ("ekbatan-event-handling", False)]


@pytest.mark.dialects("postgres")
def test_an_action_commit_wakes_the_listening_fanout(one_shard):
    registry = registry_of([one_shard])
    wakeup = threading.Event()
    listeners = ShardListeners(registry.transaction_managers(), events_channel, wakeup, "test").start()
    try:
        assert listeners.ready.wait(10)
        wakeup.clear()
        executor_for(registry).execute(GadgetCreateAction(), NewGadget(one_shard.shard, "w", "red"))
        assert wakeup.wait(5), "no notification arrived for the committed action"
    finally:
        listeners.stop()


@pytest.mark.dialects("postgres")
def test_a_rolled_back_action_sends_no_wakeup_and_fanout_wakes_handling(one_shard):
    registry = registry_of([one_shard])
    events_woken, notifications_woken = threading.Event(), threading.Event()
    managers = registry.transaction_managers()
    on_events = ShardListeners(managers, events_channel, events_woken, "test-events").start()
    on_notifications = ShardListeners(
        managers, notifications_channel, notifications_woken, "test-notes"
    ).start()
    email = RecordingHandler("email")
    fanout = (
        EventFanoutJob.builder()
        .database_registry(registry)
        .event_handler_registry(EventHandlerRegistry.builder().with_handler(email).build())
        .clock(UtcClock())
        .build()
    )
    try:
        assert on_events.ready.wait(10) and on_notifications.ready.wait(10)
        events_woken.clear()
        notifications_woken.clear()

        class Boom(RuntimeError):
            pass

        # record_events in a transaction of the caller's that then rolls back: the
        # notification queued with the rows is dropped with them
        with pytest.raises(Boom), one_shard.manager.primary.begin() as connection:
            record_events(
                connection,
                [GadgetCreated(name="w", color="red")],
                action_name="Rejected",
                params={},
                namespace="shop",
                eventlog_schema=one_shard.eventlog,
            )
            raise Boom("rolled back")
        assert not events_woken.wait(0.5)
        executor_for(registry).execute(GadgetCreateAction(), NewGadget(one_shard.shard, "w2", "blue"))
        assert events_woken.wait(5)
        assert not notifications_woken.is_set()
        assert fanout.drain_one_round()
        assert notifications_woken.wait(5), "fan-out did not announce its notifications"
        assert [r.payload["name"] for r in one_shard.notifications()] == ["w2"]
        notifications_woken.clear()
        assert not fanout.drain_one_round()  # nothing to fan out: nothing announced
        assert not notifications_woken.wait(0.5)
    finally:
        on_events.stop()
        on_notifications.stop()
