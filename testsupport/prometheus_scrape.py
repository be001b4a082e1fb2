"""A real scrape of a ``/metrics`` endpoint, parsed with ``prometheus_client``'s text parser."""

from __future__ import annotations

import urllib.request
from dataclasses import dataclass
from typing import Any

#: labels a metric must never carry: one series per execution or event would grow without bound
PER_ITEM_LABELS = frozenset({"instance", "task_instance", "event_id", "notification_id", "id"})


@dataclass
class Scrape:
    text: str
    headers: dict[str, str]
    families: list[Any]

    def value(self, sample_name: str, **labels: str) -> float:
        """The sum of the samples named ``sample_name`` whose labels include ``labels``."""
        return sum(
            sample.value
            for family in self.families
            for sample in family.samples
            if sample.name == sample_name and all(sample.labels.get(k) == v for k, v in labels.items())
        )

    def family_names(self) -> set[str]:
        return {family.name for family in self.families}

    def label_names(self, prefix: str = "ekbatan_") -> set[str]:
        return {
            label
            for family in self.families
            if family.name.startswith(prefix)
            for sample in family.samples
            for label in sample.labels
        }


def scrape(url: str, *, accept: str | None = None) -> Scrape:
    """GET ``url`` and parse the body with the parser of the format it came in (Prometheus text
    or OpenMetrics); a non-200 answer raises (urllib's HTTPError)."""
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics
    from prometheus_client.parser import text_string_to_metric_families as prometheus_text

    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    with urllib.request.urlopen(request, timeout=10) as response:
        text = response.read().decode("utf-8")
        headers = {k.lower(): v for k, v in response.headers.items()}
    parse = (
        openmetrics
        if headers.get("content-type", "").startswith("application/openmetrics-text")
        else prometheus_text
    )
    return Scrape(text, headers, list(parse(text)))
