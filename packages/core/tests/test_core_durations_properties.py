"""Properties of the ISO-8601 duration grammar (hypothesis; examples derandomized, see the root
conftest): what is formatted parses back, the grammar's values are read exactly, shorthands are
refused with the ISO form to write, and nothing else ever escapes as another exception."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given, settings, strategies as st

from ekbatan.core.config import DurationFormatError, format_iso_duration, parse_iso_duration

DURATIONS = st.timedeltas(min_value=timedelta(days=-(10**6)), max_value=timedelta(days=10**6))


@settings(max_examples=300)
@given(DURATIONS)
def test_what_is_formatted_parses_back(value):
    assert parse_iso_duration(format_iso_duration(value)) == value


@st.composite
def iso_texts(draw: st.DrawFn) -> tuple[str, timedelta]:
    """A text in the grammar (signs, lower case, ',' fractions included) and the value it means."""
    signed = st.integers(-(10**6), 10**6)

    def part(value: int) -> str:
        return f"+{value}" if value >= 0 and draw(st.booleans()) else str(value)

    days, hours, minutes, seconds = (draw(st.none() | signed) for _ in range(4))
    micros = draw(st.none() | st.integers(0, 999_999)) if seconds is not None else None
    if all(v is None for v in (days, hours, minutes, seconds)):
        days = 0
    text = "P" + (f"{part(days)}D" if days is not None else "")
    value = timedelta(days=days or 0, hours=hours or 0, minutes=minutes or 0, seconds=seconds or 0)
    if any(v is not None for v in (hours, minutes, seconds)):
        text += "T" + "".join(
            f"{part(v)}{unit}" for v, unit in ((hours, "H"), (minutes, "M")) if v is not None
        )
        if seconds is not None:
            whole = "-0" if seconds == 0 and draw(st.booleans()) else part(seconds)
            fraction = ""
            if micros is not None:
                fraction = draw(st.sampled_from(".,")) + f"{micros:06d}"
                # the fraction carries the sign of its seconds ("PT-0.5S" is -0.5 s, as in Java)
                value += timedelta(microseconds=-micros if whole.startswith("-") else micros)
            text += f"{whole}{fraction}S"
    if draw(st.booleans()):
        text, value = "-" + text, -value
    if draw(st.booleans()):
        text = text.lower()
    return text, value


@settings(max_examples=300)
@given(iso_texts())
def test_every_text_of_the_grammar_reads_as_its_value(text_and_value):
    text, value = text_and_value
    assert parse_iso_duration(text) == value


UNITS = {"ms": timedelta(milliseconds=1), "s": timedelta(seconds=1), "m": timedelta(minutes=1)}
UNITS |= {
    "h": timedelta(hours=1),
    "d": timedelta(days=1),
    "min": timedelta(minutes=1),
    "sec": timedelta(seconds=1),
}


@settings(max_examples=200)
@given(st.integers(1, 100_000), st.sampled_from(sorted(UNITS)), st.booleans())
def test_shorthands_are_refused_with_the_iso_form_to_write(amount, unit, upper):
    text = f"{amount}{unit.upper() if upper else unit}"
    with pytest.raises(DurationFormatError) as raised:
        parse_iso_duration(text)
    message = str(raised.value)
    assert repr(text) in message
    suggestion = format_iso_duration(amount * UNITS[unit])
    assert suggestion in message
    assert parse_iso_duration(suggestion) == amount * UNITS[unit]


@settings(max_examples=300)
@given(st.one_of(st.text(max_size=20), st.text(alphabet="PTDHMSpt+-.,0123456789 ", max_size=20)))
def test_any_text_parses_or_fails_with_a_duration_format_error_naming_it(text):
    try:
        parse_iso_duration(text)
    except DurationFormatError as e:
        assert repr(text) in str(e)
