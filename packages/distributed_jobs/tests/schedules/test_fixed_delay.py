from datetime import UTC, datetime, timedelta, timezone

import pytest

from ekbatan.distributed_jobs.scheduler.schedules import FixedDelay, Schedules

NOON = datetime(2018, 3, 1, 12, 0, tzinfo=UTC)


def test_next_is_time_done_plus_delay():
    done = datetime(2018, 3, 1, 12, 0, 7, 123456, tzinfo=UTC)
    assert FixedDelay(timedelta(minutes=5)).next_execution_time(done) == datetime(
        2018, 3, 1, 12, 5, 7, 123456, tzinfo=UTC
    )


def test_initial_time_is_now():
    schedule = FixedDelay.of_hours(1)
    assert schedule.initial_execution_time(NOON) == NOON
    assert schedule.next_execution_time(NOON) == datetime(2018, 3, 1, 13, 0, tzinfo=UTC)


def test_zero_delay_is_allowed_for_the_constructor_and_the_factory():
    assert FixedDelay(timedelta(0)).next_execution_time(NOON) == NOON
    assert Schedules.fixed_delay(timedelta(0)) == FixedDelay(timedelta(0))


def test_negative_delay_is_rejected():
    with pytest.raises(ValueError, match="negative"):
        FixedDelay(timedelta(seconds=-1))
    with pytest.raises(ValueError, match="negative"):
        Schedules.fixed_delay(timedelta(milliseconds=-1))


def test_delay_must_be_a_timedelta():
    with pytest.raises(TypeError, match="timedelta"):
        FixedDelay(10)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("factory", "amount", "expected"),
    [
        (FixedDelay.of_millis, 1500, timedelta(milliseconds=1500)),
        (FixedDelay.of_seconds, 10, timedelta(seconds=10)),
        (FixedDelay.of_minutes, 3, timedelta(minutes=3)),
        (FixedDelay.of_hours, 2, timedelta(hours=2)),
    ],
)
def test_factories(factory, amount, expected):
    assert factory(amount).delay == expected


@pytest.mark.parametrize("factory", [FixedDelay.of_millis, FixedDelay.of_seconds, FixedDelay.of_minutes])
@pytest.mark.parametrize("amount", [0, -1])
def test_factories_reject_non_positive_amounts(factory, amount):
    with pytest.raises(ValueError, match=f"positive, got {amount}"):
        factory(amount)


def test_hours_factory_rejects_zero():
    with pytest.raises(ValueError, match="positive"):
        FixedDelay.of_hours(0)


@pytest.mark.parametrize("amount", [1.5, "10", True])
def test_factories_want_an_int(amount):
    with pytest.raises(TypeError, match="int"):
        FixedDelay.of_seconds(amount)


def test_flags():
    schedule = FixedDelay.of_seconds(1)
    assert schedule.is_deterministic is False
    assert schedule.is_disabled is False


def test_equality_is_by_duration():
    assert FixedDelay.of_seconds(60) == FixedDelay.of_minutes(1)
    assert hash(FixedDelay.of_seconds(60)) == hash(FixedDelay.of_minutes(1))
    assert FixedDelay.of_seconds(61) != FixedDelay.of_minutes(1)
    assert FixedDelay.of_seconds(1) != "FIXED_DELAY|1s"


def test_repr():
    assert repr(FixedDelay.of_seconds(10)) == "FixedDelay(datetime.timedelta(seconds=10))"


def test_naive_datetimes_are_refused():
    with pytest.raises(ValueError, match="naive"):
        FixedDelay.of_seconds(1).next_execution_time(datetime(2018, 3, 1, 12, 0))
    with pytest.raises(ValueError, match="naive"):
        FixedDelay.of_seconds(1).initial_execution_time(datetime(2018, 3, 1, 12, 0))


def test_other_offsets_come_back_as_utc():
    done = datetime(2018, 3, 1, 14, 0, tzinfo=timezone(timedelta(hours=2)))
    result = FixedDelay.of_minutes(1).next_execution_time(done)
    assert result == datetime(2018, 3, 1, 12, 1, tzinfo=UTC)
    assert result.utcoffset() == timedelta(0)
