"""Fixed-rate slots and misfire policies, as values: slots, string and JSON forms, and which
slots each policy runs, skips or reports missed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ekbatan.distributed_jobs.scheduler.schedules import (
    CronSchedule,
    FixedDelay,
    FixedRate,
    MisfirePolicy,
    Schedules,
    UnrecognizedScheduleError,
    parse_schedule,
    schedule_from_json,
    schedule_to_json,
)


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


MINUTE = FixedRate(timedelta(minutes=1))


# --------------------------------------------------------------------------- fixed rate
def test_fixed_rate_slots_are_whole_periods_from_the_epoch_whatever_the_run_took():
    rate = Schedules.fixed_rate(timedelta(seconds=30))
    assert rate.next_execution_time(utc(2024, 1, 1, 10, 0, 0)) == utc(2024, 1, 1, 10, 0, 30)
    assert rate.next_execution_time(utc(2024, 1, 1, 10, 0, 4)) == utc(2024, 1, 1, 10, 0, 30)
    assert rate.next_execution_time(utc(2024, 1, 1, 10, 0, 29, 999999)) == utc(2024, 1, 1, 10, 0, 30)
    hourly = FixedRate(timedelta(hours=1))
    assert hourly.next_execution_time(utc(2024, 3, 5, 7, 59)) == utc(2024, 3, 5, 8, 0)
    assert hourly.initial_execution_time(utc(2024, 3, 5, 7, 0)) == utc(2024, 3, 5, 8, 0)
    assert FixedRate(timedelta(seconds=7)).next_execution_time(utc(1970, 1, 1, 0, 0, 13)) == utc(
        1970, 1, 1, 0, 0, 14
    )
    assert rate.is_deterministic and not rate.is_disabled
    assert rate == FixedRate(timedelta(seconds=30)) and hash(rate) == hash(FixedRate(timedelta(seconds=30)))
    assert rate != FixedDelay(timedelta(seconds=30))


@pytest.mark.parametrize("period", [timedelta(0), timedelta(seconds=-1)])
def test_a_fixed_rate_needs_a_positive_period(period):
    with pytest.raises(ValueError, match="must be positive"):
        FixedRate(period)
    with pytest.raises(TypeError, match="timedelta"):
        FixedRate(30)  # type: ignore[arg-type]


def test_fixed_rate_string_and_json_forms():
    assert parse_schedule("FIXED_RATE|30s") == FixedRate(timedelta(seconds=30))
    assert parse_schedule("FIXED_RATE|PT1H") == FixedRate(timedelta(hours=1))
    assert parse_schedule("FIXED_RATE|PT0.5S") == FixedRate(timedelta(milliseconds=500))
    for bad in ("FIXED_RATE|0s", "FIXED_RATE|PT0S", "FIXED_RATE|10m"):
        with pytest.raises(ValueError, match=r"invalid schedule .*(positive|neither)"):
            parse_schedule(bad)
    with pytest.raises(UnrecognizedScheduleError, match="FIXED_RATE\\|30s"):
        parse_schedule("EVERY|30s")  # the examples name the new form
    assert schedule_to_json(FixedRate(timedelta(seconds=30))) == {"type": "fixedRate", "duration": 30000}
    assert schedule_from_json({"type": "fixedRate", "duration": 30000}) == FixedRate(timedelta(seconds=30))


# --------------------------------------------------------------------------- misfire: values
def test_misfire_policy_string_forms_round_trip():
    assert MisfirePolicy.parse("run_once") == MisfirePolicy.run_once()
    assert MisfirePolicy.parse("skip") == MisfirePolicy.skip()
    assert MisfirePolicy.parse("skip|PT30S") == MisfirePolicy.skip(timedelta(seconds=30))
    assert MisfirePolicy.parse("run_all") == MisfirePolicy.run_all()
    assert MisfirePolicy.parse("run_all|10") == MisfirePolicy.run_all(10)
    for policy in (
        MisfirePolicy.skip(timedelta(seconds=30)),
        MisfirePolicy.run_all(10),
        MisfirePolicy.skip(),
    ):
        assert MisfirePolicy.parse(str(policy)) == policy
    assert MisfirePolicy.skip().grace == timedelta(minutes=1) and MisfirePolicy.run_all().limit == 100


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("coalesce", "unrecognized misfire policy 'coalesce'"),
        ("RUN_ONCE", "unrecognized misfire policy"),
        ("skip|5m", "the grace '5m' is not an ISO-8601 duration"),
        ("run_all|0", "bad argument '0'"),
        ("run_once|3", "bad argument '3'"),
    ],
)
def test_bad_misfire_policies_are_refused_naming_the_forms(text, says):
    with pytest.raises(ValueError, match=says) as raised:
        MisfirePolicy.parse(text)
    assert "; write " in str(raised.value)  # and says what to write instead


# --------------------------------------------------------------------------- misfire: slots
def test_run_once_runs_an_overdue_slot_once_and_reports_the_slots_that_passed():
    policy = MisfirePolicy.run_once()
    assert policy.missed_at_start(MINUTE, utc(2024, 1, 1, 10, 0), utc(2024, 1, 1, 10, 5)) is None
    next_time, missed = policy.after_run(MINUTE, utc(2024, 1, 1, 10, 0), utc(2024, 1, 1, 10, 5, 30))
    assert next_time == utc(2024, 1, 1, 10, 6)
    assert missed is not None
    assert (missed.count, missed.more, missed.first, missed.last) == (
        5,
        False,
        utc(2024, 1, 1, 10, 1),
        utc(2024, 1, 1, 10, 5),
    )
    # on time: nothing missed, the next slot
    assert policy.after_run(MINUTE, utc(2024, 1, 1, 10, 0), utc(2024, 1, 1, 10, 0, 2)) == (
        utc(2024, 1, 1, 10, 1),
        None,
    )


def test_skip_leaves_a_slot_later_than_its_grace_unrun():
    policy = MisfirePolicy.skip(timedelta(seconds=30))
    assert policy.missed_at_start(MINUTE, utc(2024, 1, 1, 10, 0), utc(2024, 1, 1, 10, 0, 30)) is None
    missed = policy.missed_at_start(MINUTE, utc(2024, 1, 1, 10, 0), utc(2024, 1, 1, 10, 3, 10))
    assert missed is not None
    assert (missed.count, missed.first, missed.last, missed.next_time) == (
        4,
        utc(2024, 1, 1, 10, 0),
        utc(2024, 1, 1, 10, 3),
        utc(2024, 1, 1, 10, 4),
    )
    assert missed.describe().startswith("4 slots missed (2024-01-01T10:00:00+00:00")
    # a fixed delay has no calendar of slots: only the late run itself is missed
    late = policy.missed_at_start(
        FixedDelay(timedelta(minutes=1)), utc(2024, 1, 1, 10, 0), utc(2024, 1, 1, 11, 0)
    )
    assert late is not None and late.count == 1 and late.next_time == utc(2024, 1, 1, 11, 1)


def test_run_all_catches_up_each_missed_slot_oldest_first_up_to_its_limit():
    policy = MisfirePolicy.run_all(limit=5)
    # three slots passed during the run: the next is the oldest of them, due already
    assert policy.after_run(MINUTE, utc(2024, 1, 1, 10, 0), utc(2024, 1, 1, 10, 3, 30)) == (
        utc(2024, 1, 1, 10, 1),
        None,
    )
    # ten passed: more than five, so the backlog is skipped and reported
    next_time, missed = policy.after_run(MINUTE, utc(2024, 1, 1, 10, 0), utc(2024, 1, 1, 10, 10, 30))
    assert next_time == utc(2024, 1, 1, 10, 11)
    assert missed is not None and (missed.count, missed.first, missed.last) == (
        10,
        utc(2024, 1, 1, 10, 1),
        utc(2024, 1, 1, 10, 10),
    )
    # a schedule whose slots follow its runs has nothing to catch up
    delay = FixedDelay(timedelta(minutes=1))
    assert policy.after_run(delay, utc(2024, 1, 1, 10, 0), utc(2024, 1, 1, 10, 10)) == (
        utc(2024, 1, 1, 10, 11),
        None,
    )


def test_counting_missed_slots_is_bounded():
    every_second = CronSchedule("* * * * * *")
    next_time, missed = MisfirePolicy.run_once().after_run(
        every_second, utc(2024, 1, 1, 0, 0), utc(2024, 1, 2, 0, 0)
    )
    assert next_time == utc(2024, 1, 2, 0, 0, 1)
    assert missed is not None and (missed.count, missed.more) == (1000, True)
    assert missed.describe().startswith("1000+ slots missed")
