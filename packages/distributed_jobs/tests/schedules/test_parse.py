from datetime import UTC, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest

from ekbatan.distributed_jobs.scheduler.schedules import (
    CronSchedule,
    Daily,
    DisabledSchedule,
    FixedDelay,
    Schedules,
    UnrecognizedScheduleError,
    parse_schedule,
)

EXAMPLES = (
    "[FIXED_DELAY|120s, FIXED_DELAY|PT2M, FIXED_RATE|30s, FIXED_RATE|PT1H, DAILY|12:00, DAILY|12:00,13:45, "
    "DAILY|12:00,13:45|Europe/Rome, CRON|0 */5 * * * *, -]"
)
NOON = datetime(2021, 6, 1, 12, 0, tzinfo=UTC)
NOON_ROME = datetime(2021, 6, 1, 12, 0, tzinfo=ZoneInfo("Europe/Rome"))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("FIXED_DELAY|10s", FixedDelay.of_seconds(10)),
        ("FIXED_DELAY|120s", FixedDelay(timedelta(minutes=2))),
        ("FIXED_DELAY|007s", FixedDelay.of_seconds(7)),
        # ISO-8601, as application.yml writes every duration (and Java's Duration.parse reads)
        ("FIXED_DELAY|PT10S", FixedDelay.of_seconds(10)),
        ("FIXED_DELAY|PT2M", FixedDelay(timedelta(minutes=2))),
        ("FIXED_DELAY|PT1H30M", FixedDelay(timedelta(hours=1, minutes=30))),
        ("FIXED_DELAY|P1D", FixedDelay(timedelta(days=1))),
        ("FIXED_DELAY|PT0.5S", FixedDelay(timedelta(milliseconds=500))),
        ("FIXED_DELAY|PT0,25S", FixedDelay(timedelta(milliseconds=250))),
        ("FIXED_DELAY|pt10s", FixedDelay.of_seconds(10)),
        ("FIXED_DELAY|PT1M-30S", FixedDelay.of_seconds(30)),
        ("DAILY|12:00", Daily(time(12, 0))),
        ("DAILY|09:30", Daily("09:30")),
        ("DAILY|12:00,13:45", Daily("12:00", "13:45")),
        ("DAILY|09:30,16:30,18:30,20:30", Daily("09:30", "16:30", "18:30", "20:30")),
        ("DAILY|12:00|Europe/Rome", Daily("12:00", zone="Europe/Rome")),
        ("DAILY|12:00,13:45|Europe/Rome", Daily("12:00", "13:45", zone="Europe/Rome")),
        (
            "DAILY|09:30,16:30,18:30,20:30|Europe/Rome",
            Daily("09:30", "16:30", "18:30", "20:30", zone="Europe/Rome"),
        ),
        ("DAILY|13:00,12:00,12:00", Daily("12:00", "13:00")),
        ("DAILY|00:00,23:59|UTC", Daily("00:00", "23:59")),
        ("-", DisabledSchedule()),
    ],
)
def test_accepted(text, expected):
    parsed = parse_schedule(text)
    assert parsed == expected
    assert type(parsed) is type(expected)
    assert Schedules.parse(text) == expected


@pytest.mark.parametrize("example", EXAMPLES.strip("[]").split(", "))
def test_every_example_in_the_error_message_parses(example):
    assert parse_schedule(example) is not None


def test_parsed_schedules_compute_times():
    # SchedulesTest: DAILY|12:00,13:00 from noon -> +1 h; in Rome from Rome's noon -> +2 h; fixed delay +10 s
    assert parse_schedule("DAILY|12:00,13:00").next_execution_time(NOON) == NOON + timedelta(hours=1)
    assert parse_schedule("DAILY|10:00,14:00|Europe/Rome").next_execution_time(
        NOON_ROME
    ) == NOON_ROME + timedelta(hours=2)
    assert parse_schedule("FIXED_DELAY|10s").next_execution_time(NOON) == NOON + timedelta(seconds=10)
    assert parse_schedule("-").is_disabled


@pytest.mark.parametrize(
    "text",
    [
        None,
        "",
        "LALA|123s",
        "DAILY|",
        "DAILY|1200",
        "DAILY|12:00;13:00",
        "DAILY|12:00,13:00,",
        "DAILY|UTC",
        "DAILY|UTC1200",
        "DAILY|UTC1200|",
        "DAILY||12:00,13:00",
        "DAILY|WRONG|12:00,13:00",
        "DAILY|UTC|UTC|12:00,13:00",
        "DAILY|UTC|UTC12:00,13:00",
        "DAILY|UTC|12:00",
        "DAILY|UTC|12:00,13:00",
        "DAILY|1200|UTC",
        "DAILY|12:00,13:00|",
        "DAILY|9:30",
        "DAILY|12:00:00",
        "daily|12:00",
        "fixed_delay|10s",
        " FIXED_DELAY|10s",
        "FIXED_DELAY",
        "FIXED_DELAY 10s",
        "--",
        " -",
        "- ",
        "CRON|",
        "0 0 12 * * ?",  # a bare cron pattern is not a schedule string
    ],
)
def test_rejected_as_unrecognized(text):
    with pytest.raises(UnrecognizedScheduleError) as caught:
        parse_schedule(text)
    assert isinstance(caught.value, ValueError)
    assert str(caught.value) == f"Unrecognized schedule: '{text}'. Parsable examples: {EXAMPLES}"


def test_non_string_is_unrecognized():
    with pytest.raises(UnrecognizedScheduleError, match="Unrecognized schedule: '42'"):
        parse_schedule(42)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("FIXED_DELAY|0s", "0 seconds"),
        ("FIXED_DELAY|0000s", "0 seconds"),
        ("DAILY|25:00", "'25:00'"),
        ("DAILY|24:00", "'24:00'"),
        ("DAILY|12:60", "'12:60'"),
        ("DAILY|12:00,99:99|UTC", "'99:99'"),
        ("DAILY|12:00,13:00|WRONG", "'WRONG'"),
        ("DAILY|12:00|UTC|", "'UTC|'"),
        ("DAILY|12:00,13:00|WRONG|WRONG", "'WRONG|WRONG'"),
        ("DAILY|12:00| Europe/Rome", "' Europe/Rome'"),
        ("CRON|0 0 12 * * ?|WRONG", "'WRONG'"),
        ("CRON|61 * * * * ?", "61 is outside 0-59"),
        ("CRON|0 0 12 * ?", "'?'"),
    ],
)
def test_right_shape_but_bad_value_names_the_value(text, named):
    with pytest.raises(ValueError) as caught:
        parse_schedule(text)
    assert not isinstance(caught.value, UnrecognizedScheduleError)
    assert named in str(caught.value)
    assert repr(text) in str(caught.value)


@pytest.mark.parametrize(
    "value",
    [
        "",
        "123",
        "10",
        "-1s",
        "1.5s",
        "10m",
        "10S",  # db-scheduler's form is lower-case s only
        "10s\n",
        "\u0661\u0660s",  # Arabic-Indic digits are not ASCII digits
        "PT",
        "P",
        "PT10",
        "10 seconds",
        "P1W",  # weeks, months and years are not durations
        "PT\u0661\u0660S",
    ],
)
def test_a_bad_delay_names_the_value_and_both_forms(value):
    text = f"FIXED_DELAY|{value}"
    with pytest.raises(ValueError) as caught:
        parse_schedule(text)
    message = str(caught.value)
    assert not isinstance(caught.value, UnrecognizedScheduleError)
    assert repr(text) in message and repr(value) in message
    assert "<N>s" in message and "ISO-8601" in message and "PT10S" in message


@pytest.mark.parametrize("value", ["PT0S", "P0D", "PT-10S", "-PT10S", "PT0.0S"])
def test_a_delay_that_is_not_positive_is_refused_naming_it(value):
    with pytest.raises(ValueError, match="must be positive") as caught:
        parse_schedule(f"FIXED_DELAY|{value}")
    assert repr(value) in str(caught.value)
    assert "<N>s" in str(caught.value) and "ISO-8601" in str(caught.value)


def test_a_delay_finer_than_a_microsecond_is_refused_naming_it():
    with pytest.raises(ValueError, match="finer than a microsecond") as caught:
        parse_schedule("FIXED_DELAY|PT0.0000001S")
    assert "'PT0.0000001S'" in str(caught.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("CRON|0 0 12 * * ?", CronSchedule("0 0 12 * * ?")),
        ("CRON|0 0 12 * * ?|Europe/Rome", CronSchedule("0 0 12 * * ?", "Europe/Rome")),
        ("CRON|30 2 * * MON-FRI|America/New_York", CronSchedule("30 2 * * MON-FRI", "America/New_York")),
        ("CRON|-", CronSchedule("-")),
    ],
)
def test_cron_extension(text, expected):
    assert parse_schedule(text) == expected


def test_cron_extension_computes_in_its_zone():
    schedule = parse_schedule("CRON|0 0 12 * * ?|Europe/Rome")
    assert schedule.next_execution_time(NOON) == datetime(2021, 6, 2, 10, 0, tzinfo=UTC)
    assert parse_schedule("CRON|-").is_disabled
