from datetime import timedelta

import pytest

from ekbatan.core.config import DurationFormatError, format_iso_duration, parse_iso_duration


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("PT10S", timedelta(seconds=10)),
        ("PT0.2S", timedelta(milliseconds=200)),
        ("PT0,2S", timedelta(milliseconds=200)),
        ("pt5m", timedelta(minutes=5)),
        ("PT1H30M", timedelta(hours=1, minutes=30)),
        ("P2D", timedelta(days=2)),
        ("P1DT1S", timedelta(days=1, seconds=1)),
        ("PT0S", timedelta(0)),
        ("PT-1S", timedelta(seconds=-1)),
        ("-PT10M", timedelta(minutes=-10)),
        ("-PT-6H+3M", timedelta(hours=6, minutes=-3)),
        ("PT-0.5S", timedelta(milliseconds=-500)),
        ("PT0.0005S", timedelta(microseconds=500)),
        ("PT1.S", timedelta(seconds=1)),
        ("+PT1S", timedelta(seconds=1)),
        ("PT0.123456000S", timedelta(microseconds=123456)),
    ],
)
def test_iso_durations_parse_like_java(text, expected):
    assert parse_iso_duration(text) == expected


@pytest.mark.parametrize(
    ("text", "suggestion"),
    [
        ("10s", "PT10S"),
        ("200ms", "PT0.2S"),
        ("5m", "PT5M"),
        ("1h", "PT1H"),
        ("10", "PT10S"),
        ("00:00:10", "PT10S"),
        ("P", "PT10S"),
        ("PT", "PT10S"),
        ("P1Y", "PT10S"),
        ("P1W", "PT10S"),
        ("P1M", "PT10S"),
        ("PT1.1234567891S", "PT10S"),
        ("", "PT10S"),
        ("PT10S ", "PT10S"),
    ],
)
def test_everything_else_is_rejected_with_the_iso_form_to_write(text, suggestion):
    with pytest.raises(DurationFormatError) as raised:
        parse_iso_duration(text)
    message = str(raised.value)
    assert repr(text) in message
    assert suggestion in message


def test_nanosecond_fractions_that_timedelta_cannot_hold_are_refused():
    with pytest.raises(DurationFormatError, match="finer than a microsecond"):
        parse_iso_duration("PT0.0000001S")


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (timedelta(seconds=10), "PT10S"),
        (timedelta(milliseconds=200), "PT0.2S"),
        (timedelta(0), "PT0S"),
        (timedelta(seconds=-1), "PT-1S"),
        (timedelta(days=1, minutes=1), "PT24H1M"),
        (timedelta(microseconds=500), "PT0.0005S"),
    ],
)
def test_format_round_trips(value, text):
    assert format_iso_duration(value) == text
    assert parse_iso_duration(text) == value
