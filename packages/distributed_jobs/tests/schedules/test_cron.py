import logging
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from ekbatan.distributed_jobs.scheduler.schedules import (
    NEVER,
    CronSchedule,
    DisabledScheduleError,
    Schedules,
)

ROME = "Europe/Rome"


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def local(zone: str, *args: int) -> datetime:
    return datetime(*args, tzinfo=ZoneInfo(zone))


def run(pattern: str, done: datetime, count: int, zone: str = "UTC") -> list[datetime]:
    """The next `count` execution times, each computed from the previous one."""
    schedule = CronSchedule(pattern, zone)
    times = []
    for _ in range(count):
        done = schedule.next_execution_time(done)
        times.append(done)
    return times


# ------------------------------------------------------------------ CronTest's next-time tables


NOON_2000 = utc(2000, 1, 1, 12, 0)


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("0 * * * * ?", utc(2000, 1, 1, 12, 1)),
        ("0 0 * * * ?", utc(2000, 1, 1, 13, 0)),
        ("0 0 12 * * ?", utc(2000, 1, 2, 12, 0)),
        ("0 0 12 1 * ?", utc(2000, 2, 1, 12, 0)),
        ("0 0 12 1 1 ?", utc(2001, 1, 1, 12, 0)),
        # five fields, Unix style
        ("* * * * *", utc(2000, 1, 1, 12, 1)),
        ("0 * * * *", utc(2000, 1, 1, 13, 0)),
        ("0 12 * * *", utc(2000, 1, 2, 12, 0)),
        ("0 12 1 * *", utc(2000, 2, 1, 12, 0)),
        ("0 12 1 1 *", utc(2001, 1, 1, 12, 0)),
    ],
)
def test_next_time_table(pattern, expected):
    assert CronSchedule(pattern).next_execution_time(NOON_2000) == expected


@pytest.mark.parametrize(
    ("pattern", "expected_local"),
    [
        ("0 * * * * ?", (2000, 1, 1, 12, 1)),
        ("0 0 * * * ?", (2000, 1, 1, 13, 0)),
        ("0 0 12 * * ?", (2000, 1, 2, 12, 0)),
        ("0 0 12 1 * ?", (2000, 2, 1, 12, 0)),
        ("0 0 12 1 1 ?", (2001, 1, 1, 12, 0)),
    ],
)
def test_next_time_table_in_a_zone(pattern, expected_local):
    done = local(ROME, 2000, 1, 1, 12, 0)  # 11:00Z
    assert CronSchedule(pattern, ROME).next_execution_time(done) == local(ROME, *expected_local)


def test_london_daylight_saving_end_gives_25_hours():
    done = local("Europe/London", 2019, 10, 26, 12, 0)
    result = CronSchedule("0 0 12 * * ?", "Europe/London").next_execution_time(done)
    assert result - done == timedelta(hours=25)
    assert result == utc(2019, 10, 27, 12, 0)


def test_zone_is_always_used():
    # 11:00Z = 12:00 BST: the next noon in London is 25 hours later
    assert CronSchedule("0 0 12 * * ?", "Europe/London").next_execution_time(utc(2019, 10, 26, 11, 0)) == utc(
        2019, 10, 27, 12, 0
    )
    # 12:00Z = 07:00 in New York: next is 13:05 New York time
    assert CronSchedule("0 05 13,20 * * ?", "America/New_York").next_execution_time(NOON_2000) == local(
        "America/New_York", 2000, 1, 1, 13, 5
    )


def test_initial_time_is_next_match_after_now():
    assert CronSchedule("0 0 12 * * ?").initial_execution_time(utc(2000, 1, 1, 8, 0)) == utc(2000, 1, 1, 12)
    assert CronSchedule("0 0 12 * * ?").initial_execution_time(NOON_2000) == utc(2000, 1, 2, 12)


def test_fractional_seconds_are_strictly_after():
    done = utc(2000, 1, 1, 12, 0, 0, 500000)
    assert CronSchedule("* * * * * *").next_execution_time(done) == utc(2000, 1, 1, 12, 0, 1)
    assert CronSchedule("* * * * * *").next_execution_time(utc(2000, 1, 1, 12, 0, 0)) == utc(
        2000, 1, 1, 12, 0, 1
    )


# ------------------------------------------------------------------ lists, ranges, steps, names


def test_seconds_step():
    assert run("*/15 * * * * *", NOON_2000, 5) == [
        utc(2000, 1, 1, 12, 0, 15),
        utc(2000, 1, 1, 12, 0, 30),
        utc(2000, 1, 1, 12, 0, 45),
        utc(2000, 1, 1, 12, 1, 0),
        utc(2000, 1, 1, 12, 1, 15),
    ]


def test_minute_step_within_hour_range():
    # Spring's example: 8:00, 8:30, 9:00, 9:30, 10:00 and 10:30 every day
    assert run("0 0/30 8-10 * * *", utc(2000, 1, 1, 7, 0), 7) == [
        utc(2000, 1, 1, 8, 0),
        utc(2000, 1, 1, 8, 30),
        utc(2000, 1, 1, 9, 0),
        utc(2000, 1, 1, 9, 30),
        utc(2000, 1, 1, 10, 0),
        utc(2000, 1, 1, 10, 30),
        utc(2000, 1, 2, 8, 0),
    ]


def test_start_slash_step_runs_to_end_of_field():
    assert run("0 5/20 * * * *", NOON_2000, 4) == [
        utc(2000, 1, 1, 12, 5),
        utc(2000, 1, 1, 12, 25),
        utc(2000, 1, 1, 12, 45),
        utc(2000, 1, 1, 13, 5),
    ]


def test_list_of_hours():
    assert run("0 0 6,19 * * *", NOON_2000, 3) == [
        utc(2000, 1, 1, 19),
        utc(2000, 1, 2, 6),
        utc(2000, 1, 2, 19),
    ]


def test_weekdays_nine_to_five():
    # 2000-01-01 is a Saturday: next is Monday 09:00
    assert run("0 0 9-17 * * MON-FRI", NOON_2000, 2) == [utc(2000, 1, 3, 9), utc(2000, 1, 3, 10)]


@pytest.mark.parametrize("dow", ["0", "7", "SUN", "sun", "Sun"])
def test_sunday_is_0_7_or_sun(dow):
    # 2020-01-01 is a Wednesday
    assert CronSchedule(f"0 0 12 * * {dow}").next_execution_time(utc(2020, 1, 1)) == utc(2020, 1, 5, 12)
    assert CronSchedule(f"0 12 * * {dow}").next_execution_time(utc(2020, 1, 1)) == utc(2020, 1, 5, 12)


@pytest.mark.parametrize("dow", ["SUN-SAT", "MON-SUN", "0-6", "1-7", "0-7", "*", "?"])
def test_whole_week_ranges(dow):
    assert run(f"0 0 0 * * {dow}", utc(2020, 1, 1, 12), 7) == [utc(2020, 1, d) for d in range(2, 9)]


def test_month_names_and_christmas():
    assert CronSchedule("0 0 0 25 DEC ?").next_execution_time(utc(2020, 12, 25)) == utc(2021, 12, 25)
    assert CronSchedule("0 0 0 25 dec ?").next_execution_time(utc(2020, 1, 1)) == utc(2020, 12, 25)
    assert CronSchedule("0 0 1 JAN-MAR *").next_execution_time(utc(2020, 3, 2)) == utc(2021, 1, 1)


def test_spring_day_of_week_step_counts_from_monday():
    # Spring: "*" in day-of-week is MON(1)-SUN(7), so */2 = Mon, Wed, Fri, Sun
    assert run("0 0 0 * * */2", utc(2020, 1, 1, 12), 4) == [
        utc(2020, 1, 3),  # Fri
        utc(2020, 1, 5),  # Sun
        utc(2020, 1, 6),  # Mon
        utc(2020, 1, 8),  # Wed
    ]


def test_unix_day_of_week_step_counts_from_sunday():
    # Unix: */2 = Sun, Tue, Thu, Sat
    assert run("0 0 * * */2", utc(2020, 1, 1, 12), 4) == [
        utc(2020, 1, 2),  # Thu
        utc(2020, 1, 4),  # Sat
        utc(2020, 1, 5),  # Sun
        utc(2020, 1, 7),  # Tue
    ]


# ------------------------------------------------------------------ day-of-month vs day-of-week


def test_six_fields_need_both_day_fields_to_match():
    # Spring: every Friday the 13th (2020-03-13, then 2020-11-13)
    assert run("0 0 0 13 * FRI", utc(2020, 1, 1), 2) == [utc(2020, 3, 13), utc(2020, 11, 13)]


def test_five_fields_match_either_restricted_day_field():
    # Unix: every 13th and every Friday (2020-01-01 is a Wednesday)
    assert run("0 0 13 * FRI", utc(2020, 1, 1), 4) == [
        utc(2020, 1, 3),
        utc(2020, 1, 10),
        utc(2020, 1, 13),
        utc(2020, 1, 17),
    ]


def test_five_fields_with_a_starred_day_field_need_both():
    # "*/2" starts with "*", so it does not count as restricted: odd days that are Mondays
    assert run("0 0 */2 * MON", utc(2020, 1, 1), 2) == [utc(2020, 1, 13), utc(2020, 1, 27)]


# ------------------------------------------------------------------ L, W and # (6 fields)


def test_last_day_of_month():
    assert run("0 0 0 L * ?", utc(2020, 1, 15), 3) == [utc(2020, 1, 31), utc(2020, 2, 29), utc(2020, 3, 31)]
    assert CronSchedule("0 0 0 L 2 ?").next_execution_time(utc(2020, 3, 1)) == utc(2021, 2, 28)


def test_nth_to_last_day_of_month():
    assert run("0 0 0 L-3 * *", utc(2020, 1, 15), 2) == [utc(2020, 1, 28), utc(2020, 2, 26)]


def test_last_weekday_of_month():
    # Feb 2020 ends on Saturday the 29th, May 2020 on Sunday the 31st, Feb 2021 on Sunday the 28th
    assert CronSchedule("0 0 0 LW * *").next_execution_time(utc(2020, 2, 1)) == utc(2020, 2, 28)
    assert CronSchedule("0 0 0 LW * *").next_execution_time(utc(2020, 5, 1)) == utc(2020, 5, 29)
    assert CronSchedule("0 0 0 LW * *").next_execution_time(utc(2021, 2, 1)) == utc(2021, 2, 26)
    assert CronSchedule("0 0 0 LW * *").next_execution_time(utc(2020, 8, 1)) == utc(2020, 8, 31)  # a Monday


@pytest.mark.parametrize(
    ("dom", "month_start", "expected"),
    [
        ("1W", utc(2020, 7, 31), utc(2020, 8, 3)),  # Sat 1st -> Mon 3rd (not the previous month)
        ("15W", utc(2020, 8, 1), utc(2020, 8, 14)),  # Saturday -> Friday before
        ("16W", utc(2020, 8, 1), utc(2020, 8, 17)),  # Sunday -> Monday after
        ("31W", utc(2020, 5, 1), utc(2020, 5, 29)),  # Sunday the last day -> Friday before
        ("30W", utc(2020, 5, 1), utc(2020, 5, 29)),  # Saturday -> Friday
        ("1W", utc(2020, 4, 30), utc(2020, 5, 1)),  # Friday stays
        ("31W", utc(2020, 4, 1), utc(2020, 5, 29)),  # April has no 31st: skipped
    ],
)
def test_nearest_weekday(dom, month_start, expected):
    assert CronSchedule(f"0 0 0 {dom} * ?").next_execution_time(month_start) == expected


@pytest.mark.parametrize("dow", ["5L", "FRIL", "friL"])
def test_last_friday_of_month(dow):
    assert run(f"0 0 0 ? * {dow}", utc(2021, 1, 1), 2) == [utc(2021, 1, 29), utc(2021, 2, 26)]


def test_last_thursday_of_month():
    assert CronSchedule("0 0 0 * * THUL").next_execution_time(utc(2021, 1, 1)) == utc(2021, 1, 28)


def test_nth_day_of_week_in_month():
    assert CronSchedule("0 0 0 ? * 5#2").next_execution_time(utc(2021, 1, 1)) == utc(2021, 1, 8)
    assert run("0 0 0 ? * MON#1", utc(2021, 1, 1), 2) == [utc(2021, 1, 4), utc(2021, 2, 1)]
    # the fifth Friday exists in January and April 2021, not in February or March
    assert run("0 0 0 ? * FRI#5", utc(2021, 1, 1), 2) == [utc(2021, 1, 29), utc(2021, 4, 30)]


def test_special_combined_with_day_of_month_needs_both():
    # first Monday that is also the 1st: 2021-02-01, then 2021-03-01
    assert run("0 0 0 1 * MON#1", utc(2021, 1, 1), 2) == [utc(2021, 2, 1), utc(2021, 3, 1)]


def test_rare_but_possible_pattern_is_found():
    # 29 February on a Monday: 2016, then 2044
    assert CronSchedule("0 0 0 29 2 MON").next_execution_time(NOON_2000) == utc(2016, 2, 29)
    assert CronSchedule("0 0 0 29 2 MON").next_execution_time(utc(2016, 2, 29)) == utc(2044, 2, 29)


# ------------------------------------------------------------------ NEVER


@pytest.mark.parametrize("pattern", ["0 0 0 29 2 MON#1", "0 0 0 30 2 ?", "0 0 0 31 4,6,9,11 *", "0 0 31 2 *"])
def test_impossible_pattern_returns_never_and_logs(pattern, caplog):
    schedule = CronSchedule(pattern)
    with caplog.at_level(logging.ERROR):
        assert schedule.next_execution_time(NOON_2000) == NEVER
        assert schedule.next_execution_time(utc(2024, 5, 5)) == NEVER  # remembered, still logged
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 2
    assert pattern in errors[0].getMessage()
    assert "NEVER" in errors[0].getMessage()


def test_never_value():
    assert utc(2500, 1, 1, 12, 0) == NEVER
    assert NEVER.tzinfo is UTC


# ------------------------------------------------------------------ daylight saving (Europe/Rome)


def test_rome_both_switch_days_daily_at_eight():
    schedule = CronSchedule("0 0 8 * * ?", ROME)
    assert schedule.next_execution_time(utc(2020, 3, 28, 7, 0)) == utc(2020, 3, 29, 6, 0)  # 23 h
    assert schedule.next_execution_time(utc(2020, 10, 24, 6, 0)) == utc(2020, 10, 25, 7, 0)  # 25 h


def test_rome_spring_gap_matches_shift_forward():
    # 2020-03-29: 02:00 CET jumps to 03:00 CEST (01:00Z)
    after = utc(2020, 3, 29, 0, 0)
    assert CronSchedule("0 0 2 * * ?", ROME).next_execution_time(after) == utc(2020, 3, 29, 1, 0)
    assert CronSchedule("0 0 3 * * ?", ROME).next_execution_time(after) == utc(2020, 3, 29, 1, 0)
    assert CronSchedule("0 30 2 * * ?", ROME).next_execution_time(after) == utc(2020, 3, 29, 1, 30)
    assert CronSchedule("30 2 * * *", ROME).next_execution_time(after) == utc(2020, 3, 29, 1, 30)


def test_rome_spring_every_minute_continues_after_the_gap():
    assert run("0 * * * * ?", utc(2020, 3, 29, 0, 58), 3, ROME) == [
        utc(2020, 3, 29, 0, 59),  # 01:59 CET
        utc(2020, 3, 29, 1, 0),  # 03:00 CEST
        utc(2020, 3, 29, 1, 1),
    ]


def test_rome_gap_matches_and_real_matches_each_run_once():
    # 02:10 and 02:30 fall into the gap (shifted to 03:10 and 03:30), which are also matches
    assert run("0 10,30 2-3 * * ?", utc(2020, 3, 28, 23, 0), 3, ROME) == [
        utc(2020, 3, 29, 1, 10),
        utc(2020, 3, 29, 1, 30),
        utc(2020, 3, 30, 0, 10),
    ]


def test_rome_gap_time_is_still_due_when_asked_just_after_the_jump():
    # At 03:00:30 CEST (01:00:30Z) the skipped wall time 02:30 has not happened yet: it runs at
    # 03:30 CEST today, not at 02:30 tomorrow.
    assert CronSchedule("0 30 2 * * ?", ROME).next_execution_time(utc(2020, 3, 29, 1, 0, 30)) == utc(
        2020, 3, 29, 1, 30
    )
    # once it has run, the next one is tomorrow's 02:30 CEST
    assert CronSchedule("0 30 2 * * ?", ROME).next_execution_time(utc(2020, 3, 29, 1, 30)) == utc(
        2020, 3, 30, 0, 30
    )


def test_rome_fall_overlap_time_runs_once_at_the_earlier_offset():
    # 2020-10-25: 03:00 CEST falls back to 02:00 CET; 02:30 exists twice (00:30Z and 01:30Z)
    assert run("0 30 2 * * ?", utc(2020, 10, 24, 23, 0), 2, ROME) == [
        utc(2020, 10, 25, 0, 30),
        utc(2020, 10, 26, 1, 30),
    ]


def test_rome_fall_every_minute_pauses_during_the_repeated_hour():
    assert run("0 * * * * ?", utc(2020, 10, 25, 0, 58), 3, ROME) == [
        utc(2020, 10, 25, 0, 59),  # 02:59 CEST
        utc(2020, 10, 25, 2, 0),  # 03:00 CET: 02:00-02:59 CET are not repeated
        utc(2020, 10, 25, 2, 1),
    ]


def test_rome_asked_from_inside_the_repeated_hour():
    assert CronSchedule("0 * * * * ?", ROME).next_execution_time(utc(2020, 10, 25, 1, 30)) == utc(
        2020, 10, 25, 2, 0
    )
    assert CronSchedule("0 0 * * * ?", ROME).next_execution_time(utc(2020, 10, 25, 1, 0)) == utc(
        2020, 10, 25, 2, 0
    )


def test_result_is_aware_utc():
    result = CronSchedule("0 0 12 * * ?", ROME).next_execution_time(local(ROME, 2020, 7, 1, 13, 0))
    assert result == utc(2020, 7, 2, 10, 0)
    assert result.tzinfo is UTC


def test_naive_datetime_is_refused():
    with pytest.raises(ValueError, match="naive"):
        CronSchedule("0 0 12 * * ?").next_execution_time(datetime(2020, 1, 1))


# ------------------------------------------------------------------ disabled


def test_dash_is_a_disabled_cron_schedule():
    disabled = Schedules.cron("-")
    assert disabled.is_disabled is True
    assert Schedules.cron("0 * * * * ?").is_disabled is False
    assert disabled == CronSchedule(" - ")
    with pytest.raises(DisabledScheduleError, match="disabled"):
        disabled.next_execution_time(NOON_2000)
    with pytest.raises(DisabledScheduleError, match="disabled"):
        disabled.initial_execution_time(NOON_2000)


# ------------------------------------------------------------------ validation


@pytest.mark.parametrize(
    ("pattern", "problem"),
    [
        ("asdf asdf asdf", "expected 6 or 5 fields, got 3"),
        ("* * * *", "expected 6 or 5 fields, got 4"),
        ("0 0 12 1 1 ? 2005", "7-field Quartz"),
        ("60 * * * * *", "60 is outside 0-59"),
        ("* 60 * * * *", "60 is outside 0-59"),
        ("* * 24 * * *", "24 is outside 0-23"),
        ("* * * 0 * *", "0 is outside 1-31"),
        ("* * * 32 * *", "32 is outside 1-31"),
        ("* * * * 13 *", "13 is outside 1-12"),
        ("* * * * * 8", "8 is outside 0-7"),
        ("* * * * JANUARY *", "'JANUARY' is not a number or a known name"),
        ("* * * * * MONDAY", "'MONDAY' is not a number or a known name"),
        ("*/0 * * * * *", "positive number"),
        ("*/x * * * * *", "positive number"),
        ("5-1 * * * * *", "range goes backwards"),
        ("* * * * * FRI-MON", "range goes backwards"),
        (",1 * * * * *", "empty list element"),
        ("1,,2 * * * * *", "empty list element"),
        ("? * * * * *", "'?' is not a number"),
        ("* * * * ? *", "'?' is not a number"),
        ("-1 * * * * *", "'' is not a number"),
        ("+1 * * * * *", "'+1' is not a number"),
        ("* * * L,1 * *", "must make up the whole field"),
        ("* * * 1,15W * *", "must make up the whole field"),
        ("* * * * * MON#1,FRI#1", "must make up the whole field"),
        ("* * * L-31 * *", "offset after L- must be 0-30"),
        ("* * * 0W * *", "day before W must be 1-31"),
        ("* * * 32W * *", "day before W must be 1-31"),
        ("* * * * * L", "needs a day before it"),
        ("* * * * * MON#0", "number after # must be 1-5"),
        ("* * * * * MON#6", "number after # must be 1-5"),
        ("* * * * * 8L", "8 is outside 0-7"),
        ("* * * * * XYZ#1", "'XYZ' is not a number"),
        # five fields: Spring's extras are not Unix syntax
        ("0 0 L * *", "only supported in 6-field"),
        ("0 0 15W * *", "only supported in 6-field"),
        ("0 0 ? * *", "only supported in 6-field"),
        ("0 0 * * ?", "only supported in 6-field"),
        ("0 0 * * MON#1", "only supported in 6-field"),
        ("0 0 * * 5L", "only supported in 6-field"),
        ("60 * * * *", "60 is outside 0-59"),
        ("a-b * * * *", "'A' is not a number"),
    ],
)
def test_invalid_patterns_are_rejected_with_a_helpful_message(pattern, problem):
    with pytest.raises(ValueError) as caught:
        CronSchedule(pattern)
    message = str(caught.value)
    assert repr(pattern) in message
    assert problem in message
    assert "'0 0 12 * * ?'" in message  # a valid 6-field example
    assert "'0 12 * * *'" in message  # a valid 5-field example


@pytest.mark.parametrize("pattern", ["", "   "])
def test_empty_pattern_is_rejected(pattern):
    with pytest.raises(ValueError, match="empty"):
        CronSchedule(pattern)


def test_pattern_must_be_a_string():
    with pytest.raises(TypeError):
        CronSchedule(None)  # type: ignore[arg-type]


@pytest.mark.parametrize("zone", ["WRONG", None, ""])
def test_invalid_zone_is_rejected(zone):
    with pytest.raises(ValueError):
        CronSchedule("0 * * * * ?", zone)


# ------------------------------------------------------------------ value semantics


def test_equality_hash_and_repr():
    a = CronSchedule("0  0 12 * *   ?", ROME)
    assert a == CronSchedule("0 0 12 * * ?", ZoneInfo(ROME))
    assert hash(a) == hash(CronSchedule("0 0 12 * * ?", ROME))
    assert a != CronSchedule("0 0 12 * * ?")
    assert a != CronSchedule("0 0 12 * * *", ROME)  # equal by text, not by meaning
    assert a.pattern == "0 0 12 * * ?"
    assert repr(a) == "CronSchedule('0 0 12 * * ?', zone='Europe/Rome')"
    assert CronSchedule("0 0 12 * * ?").zone == ZoneInfo("UTC")


def test_flags():
    assert CronSchedule("0 0 12 * * ?").is_deterministic is True
    assert CronSchedule("0 12 * * *").is_disabled is False


def test_factory_matches_constructor():
    assert Schedules.cron("0 0 12 * * ?", ROME) == CronSchedule("0 0 12 * * ?", ROME)


def test_half_hour_gap_real_time_before_shifted_time():
    # Lord Howe springs forward 30 minutes: 2020-10-04 02:00 (+10:30) -> 02:30 (+11:00).
    # 02:20 is in the gap (runs at 02:50); 02:35 is real and earlier. Both run, earliest first.
    assert run("0 20,35 2 * * ?", utc(2020, 10, 3, 14, 30), 3, "Australia/Lord_Howe") == [
        utc(2020, 10, 3, 15, 35),  # 02:35 +11:00
        utc(2020, 10, 3, 15, 50),  # 02:20 shifted to 02:50 +11:00
        utc(2020, 10, 4, 15, 20),  # next day 02:20 +11:00
    ]
