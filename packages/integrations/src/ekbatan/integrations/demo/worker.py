"""One demo worker: ``python -m ekbatan.integrations.demo.worker CONFIG NODE``.

It builds the shop from the demo's ``application.yml`` with :func:`build_runtime`, as any
application would, adds the one-time task through the scheduler's escape hatch, and runs until
SIGTERM.
"""

from __future__ import annotations

import logging
import os
import sys

from ekbatan.distributed_jobs import StopSignals


def main(config: str, node: str) -> int:
    from ekbatan.integrations.demo import shop
    from ekbatan.integrations.metrics_exposition import serve_metrics
    from ekbatan.integrations.runtime import build_runtime

    os.environ[shop.NODE_VARIABLE] = node
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {node} %(levelname)s %(name)s: %(message)s")

    # signals recorded from before the build until the runtime has stopped: the first one ends it
    with StopSignals() as stop:
        runtime = build_runtime(
            config,
            ["ekbatan.integrations.demo.shop"],
            customize_scheduler=lambda b: b.tasks(shop.send_invoice).threads(8).scheduler_name(node),
        )
        shop.bind_one_time_tasks(runtime.database_registry.primary().engine)
        with runtime:
            served = ""
            if runtime.metrics_registry is not None:
                # any free port: three workers on one machine; the demo reads the address printed here
                metrics = serve_metrics(runtime.metrics_registry, "127.0.0.1", 0)
                served = f", metrics at {metrics.url}"
            print(f"{node}: running (pid {os.getpid()}){served}", flush=True)
            stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
