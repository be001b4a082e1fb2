"""Properties of schedule parsing and next-time computation, checked on generated patterns and
times (hypothesis), with croniter as a second opinion on the cron subset both understand.

Examples are derandomized (see the root conftest): every run checks the same ones.
"""

from __future__ import annotations

import functools
import re
from datetime import UTC, datetime, time, timedelta
from zoneinfo import ZoneInfo

from croniter import croniter
from hypothesis import assume, example, given, settings, strategies as st

from ekbatan.distributed_jobs.scheduler.schedules import CronSchedule, Daily, Schedules
from ekbatan.distributed_jobs.scheduler.schedules._cron_expression import CronExpression
from ekbatan.distributed_jobs.scheduler.schedules._zones import wall_of, wall_to_utc

DST_ZONES = ("Europe/Berlin", "America/New_York", "Australia/Lord_Howe")  # Lord Howe shifts 30 minutes
ZONES = ("UTC", *DST_ZONES)
DEGENERATE_RANGE = re.compile(r"\b([0-9]+)-\1\b")


# ------------------------------------------------------------------ strategies


def field(low: int, high: int, *, stars: bool = True) -> st.SearchStrategy[str]:
    """One cron field over ``low..high``: a value, a range, a step, a list of those, or ``*``."""
    number = st.integers(low, high)
    span = st.tuples(number, number).map(sorted)
    item = st.one_of(
        number.map(str),
        span.map(lambda r: f"{r[0]}-{r[1]}"),
        st.tuples(span, st.integers(1, high - low + 1)).map(lambda t: f"{t[0][0]}-{t[0][1]}/{t[1]}"),
    )
    plain = st.lists(item, min_size=1, max_size=3).map(",".join)
    if not stars:
        return plain
    return st.one_of(st.just("*"), st.integers(1, high - low + 1).map(lambda s: f"*/{s}"), plain)


# Hours and minutes near the usual transition times make gaps and overlaps likely.
HOURS = st.one_of(st.sampled_from(["0", "1", "2", "3", "1-3", "2,3", "*"]), field(0, 23))
MINUTES = st.one_of(st.sampled_from(["0", "30", "0,30", "15,45", "*/30"]), field(0, 59))
SECONDS = st.one_of(st.just("0"), field(0, 59))


@st.composite
def spring_patterns(draw: st.DrawFn) -> str:
    """Six fields, every form both croniter and the engine read the same way (day fields ANDed)."""
    dom = draw(st.one_of(st.just("?"), st.just("L"), field(1, 28)))
    dow = "?" if dom != "?" and draw(st.booleans()) else draw(field(0, 6, stars=False) | st.just("*"))
    return " ".join([draw(SECONDS), draw(MINUTES), draw(HOURS), dom, draw(field(1, 12)), dow])


@st.composite
def unix_patterns(draw: st.DrawFn) -> str:
    """Five fields; a restricted day field never starts with '*' (croniter treats '*/n' as
    restricted, classic cron and the engine do not; see docs/schedules.md)."""
    dom = draw(st.one_of(st.just("*"), field(1, 28, stars=False)))
    dow = draw(st.one_of(st.just("*"), field(0, 6, stars=False)))
    return " ".join([draw(MINUTES), draw(HOURS), dom, draw(field(1, 12)), dow])


INSTANTS = st.datetimes(datetime(2000, 1, 1), datetime(2040, 1, 1)).map(lambda d: d.replace(tzinfo=UTC))


@functools.cache
def transitions(zone: str) -> tuple[datetime, ...]:
    """The instants (UTC) at which ``zone`` changes its offset, 2020-2030, to the minute."""
    tz = ZoneInfo(zone)
    found = []
    day = datetime(2020, 1, 1, tzinfo=UTC)
    while day.year < 2030:
        following = day + timedelta(days=1)
        if day.astimezone(tz).utcoffset() != following.astimezone(tz).utcoffset():
            low, high = day, following
            while high - low > timedelta(minutes=1):
                middle = low + (high - low) / 2
                if middle.astimezone(tz).utcoffset() == day.astimezone(tz).utcoffset():
                    low = middle
                else:
                    high = middle
            found.append(high.replace(second=0, microsecond=0))
        day = following
    return tuple(found)


@st.composite
def zone_and_instant(draw: st.DrawFn) -> tuple[str, datetime]:
    """A zone and an instant, usually within two days (often two hours) of one of its DST transitions."""
    zone = draw(st.sampled_from(ZONES))
    if zone == "UTC" or draw(st.integers(0, 4)) == 0:
        return zone, draw(INSTANTS)
    near = draw(st.sampled_from(transitions(zone)))
    # often within the two hours around it: gap-shifted slots are due just after a transition
    seconds = draw(
        st.one_of(st.integers(0, 3600), st.integers(-7200, 7200), st.integers(-2 * 86400, 2 * 86400))
    )
    return zone, near + timedelta(seconds=seconds)


# ------------------------------------------------------------------ checks shared by the properties


def matches(expression: CronExpression, wall: datetime) -> bool:
    return next(expression.walls_after(wall - timedelta(seconds=1)), None) == wall


def check_next_time(
    schedule: CronSchedule | Daily, is_slot, walls_between, zone: str, done: datetime
) -> datetime:
    """Strictly after ``done``; a slot's instant (a real wall time, or one shifted out of a gap);
    no slot's instant lies between ``done`` and it."""
    tz = ZoneInfo(zone)
    result = schedule.next_execution_time(done)
    assert result > done
    assert result.tzinfo is UTC
    wall = wall_of(result, tz)
    shifts = (timedelta(0), timedelta(minutes=30), timedelta(hours=1))
    assert any(is_slot(wall - s) and wall_to_utc(wall - s, tz) == result for s in shifts), (wall, result)
    for slot in walls_between(wall_of(done, tz) - timedelta(hours=2), wall + timedelta(hours=2)):
        assert not done < wall_to_utc(slot, tz) < result, f"skipped {slot} ({wall_to_utc(slot, tz)})"
    return result


def cron_walls(expression: CronExpression, limit: int = 5000):
    def between(start: datetime, end: datetime):
        for count, wall in enumerate(expression.walls_after(start)):
            if wall > end or count >= limit:
                return
            yield wall

    return between


def daily_walls(times: tuple[time, ...]):
    def between(start: datetime, end: datetime):
        day = start.date()
        while day <= end.date():
            for t in times:
                yield datetime.combine(day, t)
            day += timedelta(days=1)

    return between


def check_successive_runs(schedule, done: datetime, zone: str, runs: int = 6) -> None:
    """Each run later than the last, and no wall time runs twice (a fall-back overlap runs once)."""
    tz = ZoneInfo(zone)
    previous_wall = None
    for _ in range(runs):
        following = schedule.next_execution_time(done)
        assert following > done
        wall = wall_of(following, tz)
        assert previous_wall is None or wall > previous_wall, (previous_wall, wall)
        done, previous_wall = following, wall


# ------------------------------------------------------------------ cron


# Just after spring-forward, a slot inside the skipped hour (or Lord Howe's half hour) is still due.
@example("0 30 2 * * ?", ("Europe/Berlin", datetime(2021, 3, 28, 1, 10, tzinfo=UTC)))
@example("0 15 2 * * ?", ("Australia/Lord_Howe", datetime(2021, 10, 2, 15, 40, tzinfo=UTC)))
@settings(max_examples=300)
@given(st.one_of(spring_patterns(), unix_patterns()), zone_and_instant())
def test_cron_next_time_is_a_slot_strictly_after_and_skips_none(pattern, zone_and_done):
    zone, done = zone_and_done
    expression = CronExpression(pattern)
    check_next_time(
        CronSchedule(pattern, zone), lambda w: matches(expression, w), cron_walls(expression), zone, done
    )


@settings(max_examples=100)
@given(st.one_of(spring_patterns(), unix_patterns()), zone_and_instant(), st.integers(0, 3 * 86400))
def test_cron_next_time_is_monotonic(pattern, zone_and_done, later_by):
    zone, done = zone_and_done
    schedule = CronSchedule(pattern, zone)
    first = schedule.next_execution_time(done)
    assert schedule.next_execution_time(done + timedelta(seconds=later_by)) >= first
    assert schedule.next_execution_time(first) > first


@settings(max_examples=100)
@given(st.one_of(spring_patterns(), unix_patterns()), zone_and_instant())
def test_cron_successive_runs_advance_and_never_repeat_a_wall_time(pattern, zone_and_done):
    zone, done = zone_and_done
    check_successive_runs(CronSchedule(pattern, zone), done, zone)


@settings(max_examples=200)
@given(st.one_of(spring_patterns(), unix_patterns()), INSTANTS)
def test_cron_agrees_with_croniter_on_the_common_subset(pattern, done):
    # croniter reads a one-value range "3-3" as "*" (docs/schedules.md); cron, Spring and the engine as 3
    assume(not DEGENERATE_RANGE.search(pattern))
    spring = len(pattern.split()) == 6
    oracle = croniter(pattern, done.replace(tzinfo=None), second_at_beginning=spring, day_or=not spring)
    expected = oracle.get_next(datetime)
    assert CronSchedule(pattern).next_execution_time(done) == expected.replace(tzinfo=UTC)


@settings(max_examples=200)
@given(st.text(alphabet="0123456789*/,-?LW#MONFRIJADEC \t", max_size=30))
def test_any_text_either_parses_or_fails_with_a_value_error_naming_it(text):
    try:
        schedule = Schedules.cron(text)
    except ValueError as e:
        assert repr(text) in str(e) or repr(" ".join(text.split())) in str(e)
        return
    if not schedule.is_disabled:
        assert schedule.next_execution_time(datetime(2024, 1, 1, tzinfo=UTC)) > datetime(
            2024, 1, 1, tzinfo=UTC
        )


@settings(max_examples=100)
@given(st.one_of(spring_patterns(), unix_patterns()), st.sampled_from(ZONES))
def test_parse_reads_the_cron_form_as_the_factory_builds_it(pattern, zone):
    assert Schedules.parse(f"CRON|{pattern}|{zone}") == Schedules.cron(pattern, zone)
    assert Schedules.parse(f"CRON|{pattern}") == Schedules.cron(pattern)


# ------------------------------------------------------------------ daily

TIMES = st.lists(
    st.builds(time, st.one_of(st.integers(0, 3), st.integers(0, 23)), st.sampled_from([0, 15, 30, 45, 59])),
    min_size=1,
    max_size=3,
)


@example([time(2, 30)], ("America/New_York", datetime(2021, 3, 14, 7, 10, tzinfo=UTC)))
@settings(max_examples=200)
@given(TIMES, zone_and_instant())
def test_daily_next_time_is_a_slot_strictly_after_and_skips_none(times, zone_and_done):
    zone, done = zone_and_done
    schedule = Daily(*times, zone=zone)
    check_next_time(schedule, lambda w: w.time() in times, daily_walls(schedule.times), zone, done)


@settings(max_examples=100)
@given(TIMES, zone_and_instant(), st.integers(0, 3 * 86400))
def test_daily_next_time_is_monotonic_and_never_repeats_a_wall_time(times, zone_and_done, later_by):
    zone, done = zone_and_done
    schedule = Daily(*times, zone=zone)
    assert schedule.next_execution_time(done + timedelta(seconds=later_by)) >= schedule.next_execution_time(
        done
    )
    check_successive_runs(schedule, done, zone)


@settings(max_examples=100)
@given(TIMES, st.sampled_from(ZONES))
def test_parse_reads_the_daily_form_as_the_factory_builds_it(times, zone):
    text = ",".join(t.strftime("%H:%M") for t in times)
    assert Schedules.parse(f"DAILY|{text}|{zone}") == Schedules.daily(*times, zone=zone)
