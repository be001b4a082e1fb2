"""The demo's look at the metrics each worker serves: where they are (each worker prints its
``/metrics`` address), and how many runs of a task a worker's counters hold, read from a real
scrape parsed with ``prometheus_client``'s parser."""

from __future__ import annotations

import importlib.util
import re
import urllib.request
from collections.abc import Iterable

#: what a demo worker prints once its metrics are served
_SERVED = re.compile(r"^(?:\S+ )*?(?P<node>worker-\d+): running \(pid \d+\), metrics at (?P<url>\S+)$")


def metrics_available() -> bool:
    """Whether the workers can serve metrics (``prometheus-client`` and ``opentelemetry-api``)."""
    return all(importlib.util.find_spec(name) is not None for name in ("prometheus_client", "opentelemetry"))


def served_at(lines: Iterable[str]) -> dict[str, str]:
    """Each worker's ``/metrics`` address, from the workers' log."""
    found: dict[str, str] = {}
    for line in lines:
        match = _SERVED.match(line.strip())
        if match:
            found[match["node"]] = match["url"]
    return found


def runs_counted(url: str, task: str, result: str = "succeeded") -> int:
    """``ekbatan_executions_total`` of ``task`` and ``result`` in one scrape of ``url`` (a dead
    execution revived is counted apart, as ``revived``, besides its run again)."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode("utf-8")
    return int(
        sum(
            sample.value
            for family in text_string_to_metric_families(text)
            if family.name == "ekbatan_executions"
            for sample in family.samples
            if sample.name == "ekbatan_executions_total"
            and sample.labels.get("task") == task
            and sample.labels.get("result") == result
        )
    )
