"""The engine's OpenTelemetry metrics and traces (``opentelemetry-api``, an optional extra):
built only when a scheduler is asked for them, so a scheduler without them pays nothing."""
