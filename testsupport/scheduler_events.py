"""Listeners and handlers that record what happened, for assertions."""

from __future__ import annotations

import collections
import threading

from ekbatan.distributed_jobs.scheduler import (
    CandidateEventType,
    ExecutionComplete,
    SchedulerEventType,
    SchedulerListener,
)


class EventRecorder(SchedulerListener):
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.scheduler_events: collections.Counter[SchedulerEventType] = collections.Counter()
        self.candidate_events: collections.Counter[CandidateEventType] = collections.Counter()
        self.completed: list[ExecutionComplete] = []
        self.scheduled: list[tuple[object, object]] = []
        self.dead: list[object] = []

    def on_scheduler_event(self, event: SchedulerEventType) -> None:
        with self.lock:
            self.scheduler_events[event] += 1

    def on_candidate_event(self, event: CandidateEventType) -> None:
        with self.lock:
            self.candidate_events[event] += 1

    def on_execution_complete(self, complete: ExecutionComplete) -> None:
        with self.lock:
            self.completed.append(complete)

    def on_execution_scheduled(self, key: object, execution_time: object) -> None:
        with self.lock:
            self.scheduled.append((key, execution_time))

    def on_execution_dead(self, execution: object) -> None:
        with self.lock:
            self.dead.append(execution)

    def count(self, event: SchedulerEventType) -> int:
        with self.lock:
            return self.scheduler_events[event]

    def successes(self) -> list[ExecutionComplete]:
        with self.lock:
            return [c for c in self.completed if c.is_success]

    def failures(self) -> list[ExecutionComplete]:
        with self.lock:
            return [c for c in self.completed if not c.is_success]
