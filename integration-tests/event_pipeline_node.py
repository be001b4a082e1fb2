"""One node of an event-pipeline cluster, in its own OS process, for ``test_event_pipeline_cluster.py``.

``python integration-tests/event_pipeline_node.py --url URL --eventlog SCHEMA --node NAME --log-file PATH``
with the repository root on ``PYTHONPATH``. The node runs a ``JobRegistry`` holding both
pipeline jobs (``event_pipeline_jobs`` with handling enabled) on one shard, and 3 handlers per
event type. Every call of a handler inserts (event_id, handler_name, pid, node) into the
``handled`` table, in its own transaction: the test reads that table, not this process's memory.

Talks JSON lines on stdout: ``built`` (with the pid), ``started``, ``stopped`` (with what was
still executing), and ``completion_error`` each time an execution's completion could not be
written (the test waits on that, not on the log line that explains it). SIGTERM (or the end of
stdin) makes it call ``registry.stop()`` and exit 0. Logs go to ``--log-file``, which the test
prints when it fails.

Two handlers can misbehave on purpose, for the fault tests (``test_faults_event_pipeline.py``):

* ``--gate-file PATH``: the first call of ``GATED_HANDLER`` reports ``gate_blocked`` and waits
  while PATH exists, then reports ``gate_released`` and raises (a try that fails late, as a
  process stalled in its handler would report it);
* ``--hang-every N``: ``HUNG_HANDLER`` never returns for the events whose ``number`` is a
  multiple of N (it reports ``hung``); ``--handler-timeout-ms`` gives the handling job its
  ``handler_timeout``.

The event classes, the action and the ``handled`` table are defined here so the test process
writes the very events the nodes decode.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import sqlalchemy as sa

from ekbatan.core import (
    Action,
    ConnectionProvider,
    DatabaseRegistry,
    LocalEventHandlerConfig,
    ModelEvent,
    ShardIdentifier,
    TransactionManager,
)
from ekbatan.core.persistence import install_idle_ping
from ekbatan.local_event_handler import (
    EventEnvelope,
    EventHandler,
    EventHandlerRegistry,
    event_pipeline_jobs,
)

SHARD = ShardIdentifier(0, 0)
NAMESPACE = "it.event_pipeline_cluster"

METADATA = sa.MetaData()
HANDLED = sa.Table(
    "handled",
    METADATA,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("event_id", sa.String(36), nullable=False),
    sa.Column("handler_name", sa.String(100), nullable=False),
    sa.Column("pid", sa.Integer, nullable=False),
    sa.Column("node", sa.String(20), nullable=False),
    sa.Column("at", sa.Float, nullable=False),
)


class ClusterOrderPlaced(ModelEvent):
    number: int


class ClusterOrderPaid(ModelEvent):
    number: int
    amount: int


EVENT_CLASSES = (ClusterOrderPlaced, ClusterOrderPaid)
HANDLERS_PER_TYPE = 3
HANDLER_NAMES = tuple(
    f"{event_class.event_type()}-h{i}" for event_class in EVENT_CLASSES for i in range(HANDLERS_PER_TYPE)
)
GATED_HANDLER = HANDLER_NAMES[0]
HUNG_HANDLER = HANDLER_NAMES[-1]


@dataclass(frozen=True)
class PlaceAndPay:
    number: int


class PlaceAndPayOrder(Action[PlaceAndPay, None]):
    """Records two events (one of each type) and changes nothing else."""

    def perform(self, principal: Any, params: PlaceAndPay) -> None:
        model_id = str(uuid.uuid4())
        self.plan.emit(
            ClusterOrderPlaced(model_id=model_id, model_name="Order", number=params.number),
            ClusterOrderPaid(
                model_id=model_id, model_name="Order", number=params.number, amount=params.number
            ),
        )


class Misbehaviour:
    """What the ``--gate-file`` and ``--hang-every`` options ask of the handlers."""

    def __init__(self, gate_file: str | None, hang_every: int, stopping: threading.Event) -> None:
        self.gate_file = gate_file
        self.hang_every = hang_every
        self.stopping = stopping
        self._gate_used = threading.Lock()

    def before_handling(self, name: str, envelope: EventEnvelope[Any]) -> None:
        if name == GATED_HANDLER and self.gate_file is not None and self._gate_used.acquire(blocking=False):
            emit("gate_blocked", event_id=str(envelope.event_id))
            while os.path.exists(self.gate_file) and not self.stopping.is_set():
                time.sleep(0.02)
            emit("gate_released", event_id=str(envelope.event_id))
            raise RuntimeError("released from the gate: this try fails")
        if name == HUNG_HANDLER and self.hang_every and envelope.event.number % self.hang_every == 0:
            emit("hung", event_id=str(envelope.event_id))
            self.stopping.wait()  # never returns while the node runs
            raise RuntimeError("the node stops")


class RecordingHandler(EventHandler[Any]):
    def __init__(
        self,
        name: str,
        event_class: type[ModelEvent],
        app: sa.Engine,
        node: str,
        misbehaviour: Misbehaviour | None = None,
    ) -> None:
        self._name = name
        self._event_class = event_class
        self._app = app
        self._node = node
        self._pid = os.getpid()
        self._misbehaviour = misbehaviour

    def name(self) -> str:
        return self._name

    def event_type(self) -> type[ModelEvent]:
        return self._event_class

    def handle(self, envelope: EventEnvelope[Any]) -> None:
        if not isinstance(envelope.event, self._event_class):
            raise TypeError(f"{self._name} got a {type(envelope.event).__name__}")
        if self._misbehaviour is not None:
            self._misbehaviour.before_handling(self._name, envelope)
        with self._app.begin() as connection:
            connection.execute(
                HANDLED.insert().values(
                    event_id=str(envelope.event_id),
                    handler_name=self._name,
                    pid=self._pid,
                    node=self._node,
                    at=time.time(),
                )
            )


_out_lock = threading.Lock()


def emit(event: str, **fields: object) -> None:
    with _out_lock:
        sys.stdout.write(json.dumps({"event": event, **fields}, default=str) + "\n")
        sys.stdout.flush()


def main() -> int:
    from ekbatan.distributed_jobs import JobRegistry
    from ekbatan.distributed_jobs.scheduler import SchedulerEventType, SchedulerListener

    class CompletionErrors(SchedulerListener):
        def on_scheduler_event(self, event: SchedulerEventType) -> None:
            if event is SchedulerEventType.COMPLETIONHANDLER_ERROR:
                emit("completion_error")

    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--eventlog", required=True)
    parser.add_argument("--node", required=True)
    parser.add_argument("--log-file", required=True)
    parser.add_argument("--poll-ms", type=int, default=100)
    parser.add_argument("--pipeline-poll-ms", type=int, default=150)
    parser.add_argument("--heartbeat-ms", type=int, default=500)
    parser.add_argument("--missed-heartbeats", type=int, default=4)
    parser.add_argument("--shutdown-ms", type=int, default=4000)
    parser.add_argument("--gate-file", default=None)
    parser.add_argument("--hang-every", type=int, default=0)
    parser.add_argument("--handler-timeout-ms", type=int, default=0)
    args = parser.parse_args()
    logging.basicConfig(
        level=logging.INFO,
        filename=args.log_file,
        format=f"%(asctime)s {args.node} %(threadName)s %(levelname)s %(name)s: %(message)s",
    )
    log = logging.getLogger("event_pipeline_node")

    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stopping.set())

    def watch_stdin() -> None:
        # The parent going away (end of stdin) stops this node too.
        for _ in sys.stdin:
            pass
        stopping.set()

    threading.Thread(target=watch_stdin, name="stdin", daemon=True).start()

    app = sa.create_engine(args.url, pool_size=10, max_overflow=10, pool_timeout=60)
    # as the docs advise for engines built by hand: a connection idle past 0.5 s is checked
    # before use, so after a database restart the handlers' first writes do not fail and wait
    # out a retry backoff
    install_idle_ping(app)
    shard_pool = ConnectionProvider.from_url(args.url, maximum_pool_size=8)
    manager = TransactionManager(shard_pool, shard=SHARD, eventlog_schema=args.eventlog)
    database_registry = DatabaseRegistry([manager], default_shard=SHARD)
    handlers = EventHandlerRegistry.builder()
    misbehaviour = Misbehaviour(args.gate_file, args.hang_every, stopping)
    for event_class in EVENT_CLASSES:
        for i in range(HANDLERS_PER_TYPE):
            handlers.with_handler(
                RecordingHandler(
                    f"{event_class.event_type()}-h{i}", event_class, app, args.node, misbehaviour
                )
            )
    pipeline_poll = timedelta(milliseconds=args.pipeline_poll_ms)
    jobs = event_pipeline_jobs(
        LocalEventHandlerConfig(
            fanout_poll_delay=pipeline_poll,
            handling_poll_delay=pipeline_poll,
            handling={"enabled": True},
            handling_handler_timeout=(
                timedelta(milliseconds=args.handler_timeout_ms) if args.handler_timeout_ms else None
            ),
        ),
        database_registry=database_registry,
        event_handler_registry=handlers.build(),
    )
    jobs_pool = sa.create_engine(args.url, pool_size=5, max_overflow=5)
    install_idle_ping(jobs_pool)
    limit = args.missed_heartbeats
    registry = (
        JobRegistry.builder()
        .connection_provider(jobs_pool)
        .with_jobs(jobs)
        .poll_interval(timedelta(milliseconds=args.poll_ms))
        .heartbeat_interval(timedelta(milliseconds=args.heartbeat_ms))
        .shutdown_max_wait(timedelta(milliseconds=args.shutdown_ms))
        .register_shutdown_hook(False)
        .customize_scheduler(
            lambda b: (
                b.missed_heartbeats_limit(limit).scheduler_name(args.node).add_listener(CompletionErrors())
            )
        )
        .build()
    )
    emit("built", pid=os.getpid(), jobs=[job.name() for job in jobs])
    registry.start()
    log.info("registry started: jobs %s", registry.job_names)
    emit("started")
    while not stopping.wait(0.1):
        pass
    log.info("stopping the registry")
    began = time.monotonic()
    registry.stop()
    executing = [str(e) for e in registry.scheduler.get_currently_executing()]
    log.info("registry stopped in %.2fs; still executing: %s", time.monotonic() - began, executing)
    manager.close()
    jobs_pool.dispose()
    app.dispose()
    emit("stopped", executing=executing, seconds=round(time.monotonic() - began, 3))
    return 0


if __name__ == "__main__":
    sys.exit(main())
