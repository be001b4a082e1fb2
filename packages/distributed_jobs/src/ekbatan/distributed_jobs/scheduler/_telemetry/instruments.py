"""Counters and histograms kept in the process: what the engine records into on every run.

An OpenTelemetry SDK instrument costs several microseconds per call (a measurement object, the
attributes hashed, locks), which at thousands of runs a second is a share of a worker's time.
Recording here is a dictionary update (and, for a histogram, a bisection) under a lock. The
totals are then read by whoever exports them: OpenTelemetry's observable counters at each
collection, a Prometheus collector at each scrape. A histogram can also pass each value on to
an SDK histogram (``sink``): OpenTelemetry has no way to take pre-aggregated buckets.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

#: seconds: an execution's duration and lag, a poll's duration (OpenTelemetry's default
#: buckets are made for milliseconds: they would put every run below one second in one bucket)
SECONDS_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)


@dataclass(frozen=True, slots=True)
class Described:
    """An instrument's public contract: its OpenTelemetry name, unit and description, and the
    attribute keys its values are split by (in the order of each value's key tuple)."""

    name: str
    unit: str
    description: str
    keys: tuple[str, ...]

    def attributes(self, key: tuple[str, ...]) -> dict[str, str]:
        """The attributes of one series; an empty value leaves its key out."""
        return {k: v for k, v in zip(self.keys, key, strict=True) if v != ""}


class LocalCounter:
    def __init__(self, described: Described) -> None:
        self.described = described
        self._totals: dict[tuple[str, ...], int] = {}
        self._lock = threading.Lock()

    def add(self, key: tuple[str, ...], amount: int = 1) -> None:
        with self._lock:
            self._totals[key] = self._totals.get(key, 0) + amount

    def snapshot(self) -> list[tuple[tuple[str, ...], int]]:
        with self._lock:
            return list(self._totals.items())

    def observe_with(self, meter: Any) -> None:
        """Report the totals through an OpenTelemetry observable counter of ``meter``."""
        d = self.described

        def observe(options: Any) -> Iterable[Any]:
            from opentelemetry.metrics import Observation

            return [Observation(total, d.attributes(key)) for key, total in self.snapshot()]

        meter.create_observable_counter(d.name, callbacks=[observe], unit=d.unit, description=d.description)


@dataclass(slots=True)
class HistogramState:
    counts: list[int]  # per bucket, the last one above the highest boundary
    total: float = 0.0
    count: int = 0


class LocalHistogram:
    def __init__(self, described: Described, buckets: tuple[float, ...] = SECONDS_BUCKETS) -> None:
        self.described = described
        self.buckets = buckets
        self._states: dict[tuple[str, ...], HistogramState] = {}
        self._lock = threading.Lock()
        #: each value passed on as well (an OpenTelemetry SDK histogram's record), or None
        self.sink: Callable[[float, tuple[str, ...]], None] | None = None

    def record(self, value: float, key: tuple[str, ...]) -> None:
        slot = bisect.bisect_left(self.buckets, value)  # a value on a boundary counts below it (le)
        with self._lock:
            state = self._states.get(key)
            if state is None:
                state = self._states[key] = HistogramState([0] * (len(self.buckets) + 1))
            state.counts[slot] += 1
            state.total += value
            state.count += 1
        if self.sink is not None:
            self.sink(value, key)

    def snapshot(self) -> list[tuple[tuple[str, ...], HistogramState]]:
        with self._lock:
            return [
                (key, HistogramState(list(s.counts), s.total, s.count)) for key, s in self._states.items()
            ]

    def record_with(self, meter: Any) -> None:
        """Pass each value on to an OpenTelemetry histogram of ``meter`` too."""
        d = self.described
        histogram = meter.create_histogram(
            d.name, unit=d.unit, description=d.description, explicit_bucket_boundaries_advisory=self.buckets
        )
        attributes: dict[tuple[str, ...], dict[str, str]] = {}

        def sink(value: float, key: tuple[str, ...]) -> None:
            attrs = attributes.get(key)
            if attrs is None:
                attrs = attributes[key] = d.attributes(key)
            histogram.record(value, attrs)

        self.sink = sink
