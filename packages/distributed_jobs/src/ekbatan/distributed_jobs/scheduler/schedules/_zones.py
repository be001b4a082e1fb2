"""Time-zone plumbing shared by the calendar schedules (:class:`Daily` and cron).

Both evaluate *local wall-clock* times and turn each matching wall time into one instant with a
single rule, the one ``java.time.ZonedDateTime.of`` uses:

* a wall time inside a spring-forward gap (it never shows on a clock) is moved forward by the
  length of the gap — 02:30 in Europe/Rome on 2020-03-29 becomes 03:30 CEST (01:30Z);
* a wall time inside a fall-back overlap (it shows twice) takes the **earlier** offset, so it
  happens once — 02:30 in Europe/Rome on 2020-10-25 is 02:30 CEST (00:30Z), never 02:30 CET.

With :mod:`zoneinfo` both are what ``fold=0`` means (PEP 495: the offset in force *before* the
transition), so :func:`wall_to_utc` is a one-liner; the rest of this module is input checking.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

_DAY = timedelta(days=1)
_SECOND = timedelta(seconds=1)


def resolve_zone(zone: str | ZoneInfo | tzinfo) -> ZoneInfo:
    """Return ``zone`` as a :class:`ZoneInfo` with a key; unknown or keyless zones raise ``ValueError``.

    ``datetime.UTC`` / ``timezone.utc`` are accepted as a convenience and mean ``"UTC"``.
    """
    if isinstance(zone, ZoneInfo):
        if zone.key is None:
            raise ValueError(
                f"time zone {zone!r} has no key (built from a file?); use a named zone such as 'Europe/Rome'"
            )
        return zone
    if zone is UTC:
        return ZoneInfo("UTC")
    if isinstance(zone, str):
        if not zone or zone != zone.strip():
            raise ValueError(f"unknown time zone {zone!r}; use an IANA name such as 'UTC' or 'Europe/Rome'")
        try:
            return ZoneInfo(zone)
        except (ZoneInfoNotFoundError, ValueError, OSError) as e:
            raise ValueError(
                f"unknown time zone {zone!r}; use an IANA name such as 'UTC' or 'Europe/Rome'"
            ) from e
    if zone is None:
        raise ValueError("time zone must not be None; pass an IANA name such as 'UTC' or 'Europe/Rome'")
    raise TypeError(f"time zone must be a str or ZoneInfo, not {type(zone).__name__}")


def zone_key(zone: ZoneInfo) -> str:
    """The IANA name of a zone returned by :func:`resolve_zone` (always set)."""
    assert zone.key is not None
    return zone.key


def wall_to_utc(wall: datetime, zone: ZoneInfo) -> datetime:
    """The instant of the naive local ``wall`` time in ``zone``: gap → shifted forward, overlap → earlier."""
    return wall.replace(tzinfo=zone, fold=0).astimezone(UTC)


def wall_of(instant: datetime, zone: ZoneInfo) -> datetime:
    """The naive local wall-clock time ``zone`` shows at the aware ``instant``."""
    return instant.astimezone(zone).replace(tzinfo=None, fold=0)


def scan_start(done: datetime, zone: ZoneInfo) -> datetime:
    """A naive wall time such that every wall time whose instant is after ``done`` lies strictly after it.

    Usually that is simply the wall clock at ``done``. Right after a spring-forward transition it is
    earlier: a wall time inside the gap that was just skipped maps (shifted forward) to an instant
    that can still be after ``done``, so a search must start from inside the gap.
    """
    offset_now = done.astimezone(zone).utcoffset()
    assert offset_now is not None
    try:
        offset_before = (done - _DAY).astimezone(zone).utcoffset()
    except OverflowError:
        offset_before = offset_now
    assert offset_before is not None
    if offset_before < offset_now:
        gap = offset_now - offset_before
        # The gap's wall times map to `wall - offset_before`; some are after `done` only while the
        # transition is less than one gap-length in the past.
        if (done - gap).astimezone(zone).utcoffset() == offset_before:
            return (done + offset_before).replace(tzinfo=None)
    return (done + offset_now).replace(tzinfo=None)


def gap_end(inside: datetime, real: datetime, zone: ZoneInfo) -> datetime:
    """The first real wall time after ``inside`` (a wall time in a gap), at most ``real`` (a real one).

    Binary search to the second; "real" means the wall clock actually shows it at some instant.
    """
    low, high = inside, real
    while high - low > _SECOND:
        middle = (low + (high - low) / 2).replace(microsecond=0)
        if wall_of(wall_to_utc(middle, zone), zone) == middle:
            high = middle
        else:
            low = middle
    return high
