"""Running claimed executions: the worker pool, one run on a worker thread, the event loop for
``async def`` bodies, the group commit of completions, and draining at shutdown."""
