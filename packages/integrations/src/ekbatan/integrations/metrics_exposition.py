"""The metrics in Prometheus' text format: the registry a runtime serves them from, one rendering
shared by FastAPI's ``metrics_router``, Flask's ``metrics_blueprint`` and ``ekbatan worker
--metrics-port``, and the worker's own small HTTP server.

The exposition format is ``prometheus_client``'s (Prometheus text, or OpenMetrics when the
scraper asks for it): never written by hand here.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("ekbatan.integrations")

__all__ = [
    "METRICS_OFF",
    "MetricsServer",
    "new_metrics_registry",
    "render_metrics",
    "require_prometheus_client",
    "serve_metrics",
]

#: what a metrics endpoint answers (404) when the runtime serves no metrics
METRICS_OFF = (
    "ekbatan metrics are off: set ekbatan.observability.metrics: true in application.yml "
    "(and leave ekbatan.observability.prometheus at its default, true)\n"
)

_INSTALL = (
    "pip install 'ekbatan-integrations[observability]' (it brings prometheus-client and opentelemetry-api)"
)


def require_prometheus_client() -> None:
    """Refuse, saying what to install or to write instead, when ``prometheus-client`` is missing."""
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        raise RuntimeError(
            "ekbatan.observability.metrics is on and serves the metrics in Prometheus' format "
            f"(prometheus: true, the default), which needs prometheus-client: {_INSTALL}; or set "
            "ekbatan.observability.prometheus: false to report them to your OpenTelemetry SDK only"
        ) from None


def new_metrics_registry() -> Any:
    """A ``CollectorRegistry`` of a runtime's own, with the process's standard collectors
    (``process_*``, ``python_info``, ``python_gc_*``), as the global registry has them."""
    require_prometheus_client()
    from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector

    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry


class RuntimeMetrics:
    """A runtime's metrics on a registry it does not own (the application's): registered there
    as one collector reading a registry of the runtime's, so that stopping the runtime takes
    them all off again (a runtime built anew on the same registry serves its own, once)."""

    def __init__(self, served_from: Any) -> None:
        require_prometheus_client()
        from prometheus_client import CollectorRegistry

        self.served_from = served_from
        #: where the scheduler and the pipeline jobs register their collectors
        self.registry = CollectorRegistry()
        served_from.register(self)

    def describe(self) -> list[Any]:
        return []  # registering reads nothing: the first scrape does

    def collect(self) -> Any:
        return self.registry.collect()

    def close(self) -> None:
        try:
            self.served_from.unregister(self)
        except KeyError:
            pass  # already taken off


def render_metrics(registry: Any, accept: str | None) -> tuple[bytes, str]:
    """The body and content type of a scrape of ``registry``, in the format ``accept`` asks for
    (OpenMetrics when the scraper says so, Prometheus text otherwise)."""
    from prometheus_client.exposition import choose_encoder

    encode, content_type = choose_encoder(accept or "")
    return encode(registry), content_type


@dataclass
class MetricsServer:
    """``/metrics`` served on a thread of its own; :meth:`close` stops it."""

    server: Any
    thread: Any

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.server.server_address[:2]
        return str(host), int(port)

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://{f'[{host}]' if ':' in host else host}:{port}/metrics"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def serve_metrics(registry: Any, host: str, port: int) -> MetricsServer:
    """Serve ``registry`` at ``http://host:port/metrics`` (port 0: any free one) on a daemon thread."""
    from prometheus_client import start_http_server

    server, thread = start_http_server(port, addr=host, registry=registry)
    served = MetricsServer(server, thread)
    log.info("metrics served at %s", served.url)
    return served
