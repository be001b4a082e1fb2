from datetime import UTC, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest

from ekbatan.distributed_jobs.scheduler.schedules import Daily, Schedules

ROME = "Europe/Rome"


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


# ------------------------------------------------------------------ plain next-time table (UTC)


@pytest.mark.parametrize(
    ("times", "done", "expected"),
    [
        (["08:00"], utc(2021, 6, 1, 0, 0), utc(2021, 6, 1, 8, 0)),
        (["08:00"], utc(2021, 6, 1, 8, 0), utc(2021, 6, 2, 8, 0)),  # strictly after
        (["08:00"], utc(2021, 6, 1, 7, 59, 59, 999999), utc(2021, 6, 1, 8, 0)),
        (["08:00", "12:00"], utc(2021, 6, 1, 0, 0), utc(2021, 6, 1, 8, 0)),
        (["08:00", "12:00"], utc(2021, 6, 1, 8, 0), utc(2021, 6, 1, 12, 0)),
        (["08:00", "12:00"], utc(2021, 6, 1, 12, 0), utc(2021, 6, 2, 8, 0)),
        (["12:00", "08:00"], utc(2021, 6, 1, 0, 0), utc(2021, 6, 1, 8, 0)),  # order irrelevant
        (["23:59"], utc(2021, 12, 31, 23, 59, 30), utc(2022, 1, 1, 23, 59)),  # year rollover
        (["00:00"], utc(2020, 2, 28, 1, 0), utc(2020, 2, 29, 0, 0)),  # leap day
    ],
)
def test_next_execution_time(times, done, expected):
    assert Daily(*times).next_execution_time(done) == expected


def test_initial_time_is_next_slot_after_now():
    # RecurringTaskScheduleTest: clock at 08:00, daily 23:59 -> first run 23:59 today
    now = utc(2018, 3, 1, 8, 0)
    assert Daily("23:59").initial_execution_time(now) == utc(2018, 3, 1, 23, 59)
    assert Daily("12:00", "23:59").initial_execution_time(now) == utc(2018, 3, 1, 12, 0)


def test_times_with_seconds():
    schedule = Daily(time(6, 30, 15))
    assert schedule.next_execution_time(utc(2021, 6, 1, 6, 30)) == utc(2021, 6, 1, 6, 30, 15)
    assert Daily("06:30:15") == schedule


# ------------------------------------------------------------------ time zones (DailyTest)


def test_rome_standard_time():
    schedule = Daily("08:00", zone=ROME)  # UTC+1
    assert schedule.next_execution_time(utc(2020, 12, 12, 0, 0)) == utc(2020, 12, 12, 7, 0)
    assert schedule.next_execution_time(utc(2020, 12, 12, 7, 0)) == utc(2020, 12, 13, 7, 0)


def test_rome_daylight_saving_time():
    schedule = Daily("08:00", zone=ROME)  # UTC+2
    assert schedule.next_execution_time(utc(2020, 7, 12, 0, 0)) == utc(2020, 7, 12, 6, 0)
    assert schedule.next_execution_time(utc(2020, 7, 12, 6, 0)) == utc(2020, 7, 13, 6, 0)


def test_rome_day_before_daylight_saving_starts():
    schedule = Daily("08:00", zone=ROME)
    assert schedule.next_execution_time(utc(2020, 3, 28, 0, 0)) == utc(2020, 3, 28, 7, 0)
    assert schedule.next_execution_time(utc(2020, 3, 28, 7, 0)) == utc(2020, 3, 29, 6, 0)  # 23 h later


def test_rome_day_before_standard_time_starts():
    schedule = Daily("08:00", zone=ROME)
    assert schedule.next_execution_time(utc(2020, 10, 24, 0, 0)) == utc(2020, 10, 24, 6, 0)
    assert schedule.next_execution_time(utc(2020, 10, 24, 6, 0)) == utc(2020, 10, 25, 7, 0)  # 25 h later


def test_rome_spring_forward_day_gap_times_shift_forward():
    # 2020-03-29 02:00 CET -> 03:00 CEST: 02:00-02:59 do not exist in Rome.
    assert Daily("02:00", zone=ROME).next_execution_time(utc(2020, 3, 29, 0, 0)) == utc(2020, 3, 29, 1, 0)
    assert Daily("03:00", zone=ROME).next_execution_time(utc(2020, 3, 29, 0, 0)) == utc(2020, 3, 29, 1, 0)
    # 02:30 is shifted by the gap's length: 03:30 CEST
    assert Daily("02:30", zone=ROME).next_execution_time(utc(2020, 3, 29, 0, 0)) == utc(2020, 3, 29, 1, 30)
    # and the next day it is a normal 02:30 CEST again
    assert Daily("02:30", zone=ROME).next_execution_time(utc(2020, 3, 29, 1, 30)) == utc(2020, 3, 30, 0, 30)


def test_rome_gap_time_and_a_later_real_time_both_run_once():
    # 02:30 (in the gap, runs 03:30 CEST) and 03:10 (real, 01:10Z): earliest instant first, none lost
    schedule = Daily("02:30", "03:10", zone=ROME)
    first = schedule.next_execution_time(utc(2020, 3, 28, 23, 0))
    second = schedule.next_execution_time(first)
    third = schedule.next_execution_time(second)
    assert [first, second, third] == [
        utc(2020, 3, 29, 1, 10),
        utc(2020, 3, 29, 1, 30),
        utc(2020, 3, 30, 0, 30),
    ]


def test_rome_fall_back_day():
    # 2020-10-25 03:00 CEST -> 02:00 CET: 02:00-02:59 happen twice; the earlier offset wins.
    assert Daily("02:00", zone=ROME).next_execution_time(utc(2020, 10, 24, 23, 0)) == utc(2020, 10, 25, 0, 0)
    assert Daily("03:00", zone=ROME).next_execution_time(utc(2020, 10, 25, 0, 0)) == utc(2020, 10, 25, 2, 0)


def test_rome_ambiguous_time_runs_once():
    schedule = Daily("02:30", zone=ROME)
    first = schedule.next_execution_time(utc(2020, 10, 24, 23, 0))
    assert first == utc(2020, 10, 25, 0, 30)  # 02:30 CEST
    # not again at 02:30 CET (01:30Z), but tomorrow
    assert schedule.next_execution_time(first) == utc(2020, 10, 26, 1, 30)
    # even when asked from inside the second 02:xx hour
    assert schedule.next_execution_time(utc(2020, 10, 25, 1, 0)) == utc(2020, 10, 26, 1, 30)


def test_new_york():
    schedule = Daily("13:05", "20:05", zone="America/New_York")
    assert schedule.next_execution_time(utc(2000, 1, 1, 12, 0)) == utc(2000, 1, 1, 18, 5)
    assert schedule.next_execution_time(utc(2000, 1, 1, 18, 5)) == utc(2000, 1, 2, 1, 5)


def test_aware_non_utc_input_is_converted_and_output_is_utc():
    done = datetime(2020, 7, 12, 2, 0, tzinfo=ZoneInfo(ROME))  # = 00:00Z
    result = Daily("08:00", zone=ROME).next_execution_time(done)
    assert result == utc(2020, 7, 12, 6, 0)
    assert result.tzinfo is UTC


def test_naive_datetime_is_refused():
    with pytest.raises(ValueError, match="naive"):
        Daily("08:00").next_execution_time(datetime(2020, 7, 12))


# ------------------------------------------------------------------ construction, equality


def test_times_are_sorted_and_deduplicated():
    schedule = Daily("12:00", time(8, 0), "08:00", "12:00")
    assert schedule.times == (time(8, 0), time(12, 0))


def test_default_zone_is_utc_and_zones_compare_by_name():
    assert Daily("08:00").zone == ZoneInfo("UTC")
    assert Daily("08:00", zone=ZoneInfo(ROME)) == Daily("08:00", zone=ROME)
    assert Schedules.daily("08:00", zone=ROME) == Daily(time(8), zone=ROME)


def test_equality_and_hash():
    assert Daily("08:00", "12:00") == Daily("12:00", "08:00")
    assert hash(Daily("08:00", "12:00")) == hash(Daily("12:00", "08:00"))
    assert Daily("08:00") != Daily("08:01")
    assert Daily("08:00") != Daily("08:00", zone=ROME)
    assert Daily("08:00") != "DAILY|08:00"


def test_repr():
    assert repr(Daily("02:00", "01:00", zone=ROME)) == "Daily('01:00', '02:00', zone='Europe/Rome')"
    assert repr(Daily(time(1, 2, 3))) == "Daily('01:02:03', zone='UTC')"


def test_flags():
    assert Daily("08:00").is_deterministic is True
    assert Daily("08:00").is_disabled is False


def test_needs_at_least_one_time():
    with pytest.raises(ValueError, match="at least one time"):
        Daily()
    with pytest.raises(ValueError, match="at least one time"):
        Schedules.daily(zone=ROME)


@pytest.mark.parametrize("bad", ["25:00", "12:60", "1200", "8:00", "12:00:60", "", " 12:00"])
def test_bad_time_strings_are_rejected(bad):
    with pytest.raises(ValueError, match="invalid time of day"):
        Daily(bad)


def test_aware_time_is_rejected():
    with pytest.raises(ValueError, match="tzinfo"):
        Daily(time(8, 0, tzinfo=UTC))


def test_a_list_of_times_is_a_type_error_with_a_hint():
    with pytest.raises(TypeError, match="separate arguments"):
        Daily(["08:00"])  # type: ignore[arg-type]


@pytest.mark.parametrize("zone", ["WRONG", "", "Europe/Nowhere", "../etc/passwd"])
def test_unknown_zone_is_rejected(zone):
    with pytest.raises(ValueError, match="unknown time zone"):
        Daily("08:00", zone=zone)


def test_none_zone_is_rejected():
    with pytest.raises(ValueError, match="None"):
        Daily("08:00", zone=None)  # type: ignore[arg-type]


def test_far_future_does_not_overflow():
    assert Daily("08:00").next_execution_time(utc(9999, 12, 30, 9, 0)) == utc(9999, 12, 31, 8, 0)
    assert timedelta(0) < Daily("08:00").next_execution_time(utc(2500, 1, 1)) - utc(2500, 1, 1)


def test_half_hour_gap_real_time_before_shifted_time():
    # Lord Howe springs forward 30 minutes: 2020-10-04 02:00 (+10:30) -> 02:30 (+11:00)
    schedule = Daily("02:20", "02:35", zone="Australia/Lord_Howe")
    first = schedule.next_execution_time(utc(2020, 10, 3, 14, 30))
    second = schedule.next_execution_time(first)
    third = schedule.next_execution_time(second)
    assert [first, second, third] == [
        utc(2020, 10, 3, 15, 35),
        utc(2020, 10, 3, 15, 50),
        utc(2020, 10, 4, 15, 20),
    ]
