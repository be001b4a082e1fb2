"""The event pipeline's OpenTelemetry metrics and traces (``opentelemetry-api``): built only when
a pipeline job is asked for them, so a pipeline without them pays nothing and imports nothing."""
