import json
from datetime import UTC, datetime, time, timedelta

import pytest

from ekbatan.distributed_jobs.scheduler.schedules import (
    CronSchedule,
    Daily,
    DisabledSchedule,
    FixedDelay,
    PersistentCronSchedule,
    PlainScheduleAndData,
    Schedule,
    ScheduleAndData,
    schedule_from_json,
    schedule_to_json,
)

NOW = datetime(2021, 6, 1, 8, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("schedule", "encoded"),
    [
        (
            CronSchedule("0 0 12 * * ?", "America/New_York"),
            {"type": "cron", "pattern": "0 0 12 * * ?", "zoneId": "America/New_York"},
        ),
        (CronSchedule("30 2 * * 1-5"), {"type": "cron", "pattern": "30 2 * * 1-5", "zoneId": "UTC"}),
        (CronSchedule("-"), {"type": "cron", "pattern": "-", "zoneId": "UTC"}),
        (FixedDelay.of_seconds(10), {"type": "fixedDelay", "duration": 10000}),
        (FixedDelay.of_millis(1), {"type": "fixedDelay", "duration": 1}),
        (FixedDelay(timedelta(0)), {"type": "fixedDelay", "duration": 0}),
        (FixedDelay.of_hours(48), {"type": "fixedDelay", "duration": 172_800_000}),
        (
            Daily("13:45", "12:30", zone="Europe/Rome"),
            {"type": "daily", "times": ["12:30:00", "13:45:00"], "zone": "Europe/Rome"},
        ),
        (Daily(time(6, 0, 15)), {"type": "daily", "times": ["06:00:15"], "zone": "UTC"}),
        (Daily(time(6, 0, 0, 250000)), {"type": "daily", "times": ["06:00:00.250000"], "zone": "UTC"}),
        (DisabledSchedule(), {"type": "disabled"}),
    ],
)
def test_encoding_and_round_trip(schedule, encoded):
    assert schedule_to_json(schedule) == encoded
    through_text = json.loads(json.dumps(schedule_to_json(schedule)))
    decoded = schedule_from_json(through_text)
    assert decoded == schedule
    assert type(decoded) is type(schedule)


def test_decoded_cron_computes_the_same_times():
    original = CronSchedule("0 * * * * ?", "America/New_York")
    decoded = schedule_from_json(schedule_to_json(original))
    assert (
        decoded.next_execution_time(NOW)
        == original.next_execution_time(NOW)
        == datetime(2021, 6, 1, 8, 1, tzinfo=UTC)
    )


def test_sub_millisecond_delay_cannot_be_stored_exactly():
    with pytest.raises(ValueError, match="whole milliseconds"):
        schedule_to_json(FixedDelay(timedelta(microseconds=1500)))


def test_unknown_schedule_class_is_a_type_error():
    class Weekly(Schedule):
        def next_execution_time(self, time_done: datetime) -> datetime:
            return time_done + timedelta(days=7)

        @property
        def is_deterministic(self) -> bool:
            return False

    with pytest.raises(TypeError, match="cannot encode Weekly"):
        schedule_to_json(Weekly())


@pytest.mark.parametrize(
    ("encoded", "expected"),
    [
        # written by Gson's default LocalTime adapter on en-US, old and new JDKs
        ({"type": "daily", "times": ["12:30 PM"], "zone": "UTC"}, Daily("12:30")),
        ({"type": "daily", "times": ["12:05 AM"], "zone": "UTC"}, Daily("00:05")),
        ({"type": "daily", "times": ["9:05\u202fAM", "11:59 pm"], "zone": "UTC"}, Daily("09:05", "23:59")),
        ({"type": "daily", "times": ["12:30"], "zone": "UTC"}, Daily("12:30")),
        ({"type": "daily", "times": ["12:30:00.5"], "zone": "UTC"}, Daily(time(12, 30, 0, 500000))),
        # missing zones mean UTC; extra keys are ignored
        ({"type": "daily", "times": ["12:30:00"]}, Daily("12:30")),
        ({"type": "cron", "pattern": "0 0 12 * * ?"}, CronSchedule("0 0 12 * * ?")),
        ({"type": "cron", "pattern": "0 0 12 * * ?", "zoneId": None}, CronSchedule("0 0 12 * * ?")),
        (
            {"type": "cron", "pattern": "0 0 12 * * ?", "zoneId": "Europe/Rome", "cronStyle": "SPRING53"},
            CronSchedule("0 0 12 * * ?", "Europe/Rome"),
        ),
        ({"type": "disabled", "comment": "paused"}, DisabledSchedule()),
    ],
)
def test_decoding_tolerates(encoded, expected):
    assert schedule_from_json(encoded) == expected


@pytest.mark.parametrize(
    ("encoded", "named"),
    [
        ({"type": "weekly", "day": "MON"}, "'weekly'"),
        ({"type": "Cron", "pattern": "0 0 12 * * ?"}, "'Cron'"),
        ({"pattern": "0 0 12 * * ?"}, "unknown schedule type None"),
        ({"type": "cron"}, "'pattern'"),
        ({"type": "cron", "pattern": 12}, "'pattern'"),
        ({"type": "cron", "pattern": "0 0 12 * * ? *", "zoneId": "UTC"}, "7-field Quartz"),
        ({"type": "cron", "pattern": "0 0 12 * * ?", "zoneId": "Mars/Olympus"}, "'Mars/Olympus'"),
        ({"type": "cron", "pattern": "0 0 12 * * ?", "zoneId": 1}, "'zoneId'"),
        ({"type": "fixedDelay"}, "'duration'"),
        ({"type": "fixedDelay", "duration": "PT10S"}, "'duration'"),
        ({"type": "fixedDelay", "duration": 1.5}, "'duration'"),
        ({"type": "fixedDelay", "duration": True}, "'duration'"),
        ({"type": "fixedDelay", "duration": -1}, "negative"),
        ({"type": "daily", "zone": "UTC"}, "'times'"),
        ({"type": "daily", "times": "12:00", "zone": "UTC"}, "'times'"),
        ({"type": "daily", "times": [], "zone": "UTC"}, "at least one time"),
        ({"type": "daily", "times": ["25:00:00"], "zone": "UTC"}, "'25:00:00'"),
        ({"type": "daily", "times": ["13:00 PM"], "zone": "UTC"}, "'13:00 PM'"),
        ({"type": "daily", "times": [1230], "zone": "UTC"}, "1230"),
    ],
)
def test_decoding_errors_name_the_problem(encoded, named):
    with pytest.raises(ValueError) as caught:
        schedule_from_json(encoded)
    assert named in str(caught.value)


@pytest.mark.parametrize("encoded", [None, "cron", ["cron"], 3])
def test_decoding_needs_an_object(encoded):
    with pytest.raises(ValueError, match="must be an object"):
        schedule_from_json(encoded)


def test_the_cron_json_for_five_fields_decodes_as_unix():
    decoded = schedule_from_json({"type": "cron", "pattern": "0 12 * * *", "zoneId": "UTC"})
    assert decoded.next_execution_time(NOW) == datetime(2021, 6, 1, 12, 0, tzinfo=UTC)


# ------------------------------------------------------------------ PlainScheduleAndData


def test_plain_schedule_and_data():
    value = PlainScheduleAndData(Daily("23:51", zone="Europe/Rome"), {"report": "sales", "n": 1})
    assert isinstance(value, ScheduleAndData)
    assert value.schedule == Daily("23:51", zone="Europe/Rome")
    assert value.data == {"report": "sales", "n": 1}
    assert value.to_json() == {
        "schedule": {"type": "daily", "times": ["23:51:00"], "zone": "Europe/Rome"},
        "data": {"report": "sales", "n": 1},
    }
    assert PlainScheduleAndData.from_json(json.loads(json.dumps(value.to_json()))) == value
    # what the engine does with it: initial time from the schedule in the data
    assert value.schedule.initial_execution_time(NOW) == datetime(2021, 6, 1, 21, 51, tzinfo=UTC)


def test_plain_schedule_and_data_defaults_and_equality():
    value = PlainScheduleAndData(FixedDelay.of_seconds(10))
    assert value.data is None
    assert value.to_json() == {"schedule": {"type": "fixedDelay", "duration": 10000}, "data": None}
    assert PlainScheduleAndData.from_json({"schedule": {"type": "fixedDelay", "duration": 10000}}) == value
    assert value != PlainScheduleAndData(FixedDelay.of_seconds(10), 1)
    assert value != PlainScheduleAndData(FixedDelay.of_seconds(11))
    assert repr(value) == "PlainScheduleAndData(FixedDelay(datetime.timedelta(seconds=10)), data=None)"


def test_plain_schedule_and_data_checks_its_input():
    with pytest.raises(TypeError, match="Schedule"):
        PlainScheduleAndData("DAILY|12:00")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'schedule'"):
        PlainScheduleAndData.from_json({"data": 1})
    with pytest.raises(ValueError, match="unknown schedule type 'hourly'"):
        PlainScheduleAndData.from_json({"schedule": {"type": "hourly"}, "data": 1})


# ------------------------------------------------------------------ PersistentCronSchedule


def test_persistent_cron_schedule():
    value = PersistentCronSchedule("0 0 12 * * ?", "America/New_York", data=["a", 1])
    assert isinstance(value, ScheduleAndData)
    assert value.schedule == CronSchedule("0 0 12 * * ?", "America/New_York")
    assert value.pattern == "0 0 12 * * ?"
    assert value.zone_id == "America/New_York"
    assert value.to_json() == {"pattern": "0 0 12 * * ?", "zoneId": "America/New_York", "data": ["a", 1]}
    assert PersistentCronSchedule.from_json(json.loads(json.dumps(value.to_json()))) == value
    assert value.schedule.next_execution_time(NOW) == datetime(2021, 6, 1, 16, 0, tzinfo=UTC)


def test_persistent_cron_schedule_defaults():
    value = PersistentCronSchedule("0 12 * * *")
    assert value.zone_id == "UTC"
    assert value.data is None
    assert PersistentCronSchedule.from_json({"pattern": "0 12 * * *"}) == value
    assert PersistentCronSchedule.from_json({"pattern": "0 12 * * *", "zoneId": None, "data": None}) == value
    assert repr(value) == "PersistentCronSchedule('0 12 * * *', zone='UTC', data=None)"


def test_persistent_cron_schedule_validates_eagerly():
    with pytest.raises(ValueError, match="invalid cron pattern"):
        PersistentCronSchedule("every day at noon")
    with pytest.raises(ValueError, match="unknown time zone"):
        PersistentCronSchedule("0 0 12 * * ?", "Nowhere")
    with pytest.raises(ValueError, match="'pattern'"):
        PersistentCronSchedule.from_json({"zoneId": "UTC"})


def test_persistent_cron_schedule_can_be_disabled():
    value = PersistentCronSchedule("-")
    assert value.schedule.is_disabled
