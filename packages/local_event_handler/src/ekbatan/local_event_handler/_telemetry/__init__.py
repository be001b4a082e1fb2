"""The event pipeline's metrics and traces (``opentelemetry-api``; the metrics can also be served
by ``prometheus_client`` with no SDK): built only when a pipeline job is asked for them, so a
pipeline without them pays nothing and imports nothing."""
