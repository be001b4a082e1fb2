"""The engine's metrics served by ``prometheus_client``, read from the process's own counters
and histograms at each scrape: no OpenTelemetry SDK in between, and nothing per run beyond the
local recording.

Names follow what OpenTelemetry's Prometheus exporter makes of the OpenTelemetry names, so a
dashboard works with either: dots become underscores, a unit of seconds adds ``_seconds``, a
counter ends in ``_total``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ekbatan.distributed_jobs.scheduler._telemetry.gauges import GAUGES, TableGauges
from ekbatan.distributed_jobs.scheduler._telemetry.instruments import Described
from ekbatan.distributed_jobs.scheduler._telemetry.metrics import EngineMetrics


def prometheus_name(described: Described) -> str:
    """``ekbatan.execution.duration`` in seconds → ``ekbatan_execution_duration_seconds``."""
    name = described.name.replace(".", "_")
    return f"{name}_seconds" if described.unit == "s" else name


class EngineCollector:
    """A ``prometheus_client`` collector (register it on a ``CollectorRegistry``)."""

    def __init__(self, metrics: EngineMetrics | None, gauges: TableGauges | None) -> None:
        self.metrics = metrics
        self.gauges = gauges

    def describe(self) -> list[Any]:
        return []  # nothing is collected when registered: the first scrape reads the table

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        if self.metrics is not None:
            for counter in self.metrics.counters:
                d = counter.described
                counted = CounterMetricFamily(prometheus_name(d), d.description, labels=d.keys)
                for key, total in counter.snapshot():
                    counted.add_metric(list(key), total)
                if counted.samples:  # as OpenTelemetry's exporter: no series, no family
                    yield counted
            for histogram in self.metrics.histograms:
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
        if self.gauges is not None:
            counts = self.gauges.counts()
            for described, pick in GAUGES:
                gauge = GaugeMetricFamily(prometheus_name(described), described.description, labels=["task"])
                for task, value in ({} if counts is None else getattr(counts, pick)).items():
                    gauge.add_metric([task], value)
                if gauge.samples:
                    yield gauge


def _le(bound: float) -> str:
    return repr(float(bound))
