"""Metrics served by ``prometheus_client``, read from the process's own counters and histograms
at each scrape: no OpenTelemetry SDK in between, and nothing per run beyond the local recording.

Names follow what OpenTelemetry's Prometheus exporter makes of the OpenTelemetry names, so a
dashboard works with either: dots become underscores, a unit of seconds adds ``_seconds``, a
counter ends in ``_total``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from ekbatan.distributed_jobs.scheduler._telemetry.gauges import GAUGES, TableGauges
from ekbatan.distributed_jobs.scheduler._telemetry.instruments import Described, LocalCounter, LocalHistogram
from ekbatan.distributed_jobs.scheduler._telemetry.metrics import EngineMetrics

#: what a collector's gauges read at a scrape: each gauge and its values by key tuple
GaugeReading = Iterable[tuple[Described, Mapping[tuple[str, ...], float]]]


def prometheus_name(described: Described) -> str:
    """``ekbatan.execution.duration`` in seconds → ``ekbatan_execution_duration_seconds``."""
    name = described.name.replace(".", "_")
    return f"{name}_seconds" if described.unit == "s" else name


class LocalCollector:
    """A ``prometheus_client`` collector (register it on a ``CollectorRegistry``) of local
    counters and histograms, and of gauges read when scraped (``gauges`` returns them)."""

    def __init__(
        self,
        counters: Iterable[LocalCounter] = (),
        histograms: Iterable[LocalHistogram] = (),
        gauges: Callable[[], GaugeReading] | None = None,
    ) -> None:
        self.counters = tuple(counters)
        self.histograms = tuple(histograms)
        self.gauges = gauges

    def describe(self) -> list[Any]:
        return []  # nothing is collected when registered: the first scrape reads the table

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        for counter in self.counters:
            d = counter.described
            counted = CounterMetricFamily(prometheus_name(d), d.description, labels=d.keys)
            for key, total in counter.snapshot():
                counted.add_metric(list(key), total)
            if counted.samples:  # as OpenTelemetry's exporter: no series, no family
                yield counted
        for histogram in self.histograms:
            d = histogram.described
            spread = HistogramMetricFamily(prometheus_name(d), d.description, labels=d.keys)
            bounds = [*(_le(b) for b in histogram.buckets), "+Inf"]
            for key, state in histogram.snapshot():
                cumulative, buckets = 0, []
                for bound, count in zip(bounds, state.counts, strict=True):
                    cumulative += count
                    buckets.append((bound, cumulative))
                spread.add_metric(list(key), buckets, state.total)
            if spread.samples:
                yield spread
        for d, values in () if self.gauges is None else self.gauges():
            gauge = GaugeMetricFamily(prometheus_name(d), d.description, labels=d.keys)
            for key, value in values.items():
                gauge.add_metric(list(key), value)
            if gauge.samples:
                yield gauge


def engine_collector(metrics: EngineMetrics | None, gauges: TableGauges | None) -> LocalCollector:
    """The engine's metrics and its table gauges as one collector."""

    def read_gauges() -> GaugeReading:
        counts = None if gauges is None else gauges.counts()
        if counts is None:
            return []
        return [
            (described, {(task,): value for task, value in getattr(counts, pick).items()})
            for described, pick in GAUGES
        ]

    return LocalCollector(
        () if metrics is None else metrics.counters,
        () if metrics is None else metrics.histograms,
        None if gauges is None else read_gauges,
    )


def _le(bound: float) -> str:
    return repr(float(bound))
