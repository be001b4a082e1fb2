"""A small application of tasks the integration tests scan: a one-time task written as a
function, one written as a class with injected parameters (``async def``), a recurring task
with a persistent schedule, and a module that only re-imports a task."""
