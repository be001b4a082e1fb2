"""The poll loop and its strategies.

* **auto** (the default): lock-and-fetch, sized by :class:`ClaimSizing`, where the server has
  ``SKIP LOCKED`` (PostgreSQL, MySQL ≥ 8.0.1, MariaDB ≥ 10.6 — the version is read on the first
  poll); fetch on SQLite and older servers.

* **fetch** (every dialect): read up to ``upper`` due rows, queue each; a worker claims its
  row with an optimistic ``UPDATE … WHERE version = ?`` just before running it. Candidates
  queued by an older poll are dropped when a newer poll has happened. When claims start
  losing to other instances, an instance reads a wider window and tries a random sample of
  it (``contention.py``).
* **lock-and-fetch** (PostgreSQL, MySQL 8, MariaDB ≥ 10.6): claim up to
  ``upper − queued`` rows in one go with ``FOR UPDATE SKIP LOCKED``; queued rows are already
  picked (and, until a worker starts them, not heartbeating).

Either way a new poll is triggered early when the queue runs low and the database probably
holds more due rows.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from ekbatan.distributed_jobs.scheduler._clock import Clock
from ekbatan.distributed_jobs.scheduler._context import SchedulerState
from ekbatan.distributed_jobs.scheduler._execution import Execution
from ekbatan.distributed_jobs.scheduler._liveness.outage import (
    DEFAULT_OUTAGE_POLICY,
    FailureLog,
    OutagePolicy,
)
from ekbatan.distributed_jobs.scheduler._observability import (
    CandidateEventType,
    Listeners,
    SchedulerEventType,
)
from ekbatan.distributed_jobs.scheduler._polling.claimed_rows import QueuedClaims
from ekbatan.distributed_jobs.scheduler._polling.contention import ClaimContention
from ekbatan.distributed_jobs.scheduler._polling.strategy_config import (
    ClaimSizing,
)
from ekbatan.distributed_jobs.scheduler._polling.waiter import Sleeper
from ekbatan.distributed_jobs.scheduler._running.runner import CLAIM_LEAD, ExecutionRunner
from ekbatan.distributed_jobs.scheduler._running.worker_pool import WorkerPool
from ekbatan.distributed_jobs.scheduler._table.repository import TaskRepository

log = logging.getLogger("ekbatan.distributed_jobs.scheduler.polling")


@dataclass(frozen=True, slots=True)
class PollResult:
    fetched: int
    possibly_more: bool
    #: the claim skipped rows other transactions held (``SKIP LOCKED``): a due row may be left
    #: behind at or before the poll's horizon, and the next wake-up must look for it
    skips_locked: bool = False


class _Batch:
    """One fetch-mode poll's candidates: triggers one early re-poll when it runs low."""

    __slots__ = ("_lock", "generation", "left", "lower", "possibly_more", "stale", "triggered")

    def __init__(self, generation: int, size: int, possibly_more: bool, lower: int) -> None:
        self._lock = threading.Lock()
        self.generation = generation
        self.left = size
        self.possibly_more = possibly_more
        self.lower = lower
        self.stale = False
        self.triggered = False

    def one_done(self) -> bool:
        """Count one candidate done; True when this should trigger a new poll."""
        with self._lock:
            self.left -= 1
            if self.stale or self.triggered or not self.possibly_more or self.left > self.lower:
                return False
            self.triggered = True
            return True


class FetchStrategy:
    def __init__(
        self,
        repository: TaskRepository,
        runner: ExecutionRunner,
        pool: WorkerPool,
        clock: Clock,
        state: SchedulerState,
        listeners: Listeners,
        lower: int,
        upper: int,
        trigger: Callable[[], None],
        contention: ClaimContention,
    ) -> None:
        self.repository = repository
        self.runner = runner
        self.pool = pool
        self.clock = clock
        self.state = state
        self.listeners = listeners
        self.lower = lower
        self.upper = upper
        self.trigger = trigger
        self.contention = contention
        self._generation = 0

    def run(self, now: datetime | None = None) -> PollResult:
        """One poll for rows due by ``now`` (default: the clock's now)."""
        window = self.contention.window(self.upper)
        fetched = self.repository.get_due(now or self.clock.now(), window)
        due = self.contention.choose(fetched, self.upper)
        self._generation += 1
        possibly_more = len(fetched) == window or len(due) < len(fetched)
        batch = _Batch(self._generation, len(due), possibly_more, self.lower)
        for execution in due:
            self.pool.submit(self._job(execution, batch), self._done(batch))
        self.listeners.on_scheduler_event(SchedulerEventType.RAN_EXECUTE_DUE)
        return PollResult(len(due), batch.possibly_more)

    def _done(self, batch: _Batch) -> Callable[[], None]:
        def done() -> None:
            if batch.one_done():
                self.trigger()

        return done

    def _job(self, candidate: Execution, batch: _Batch) -> Callable[[], None]:
        def job() -> None:
            if self.state.is_shutting_down:
                log.debug("shutting down; skipping candidate %s", candidate)
                return
            if batch.generation < self._generation:
                batch.stale = True
                self.listeners.on_candidate_event(CandidateEventType.STALE)
                return
            picked = self.repository.pick(candidate, self.clock.now())
            self.contention.record(won=picked is not None)
            if picked is None:
                log.debug("candidate %s was picked by another scheduler", candidate)
                self.listeners.on_candidate_event(CandidateEventType.ALREADY_PICKED)
                return
            self.runner.execute(picked)

        return job


class LockAndFetchStrategy:
    def __init__(
        self,
        repository: TaskRepository,
        runner: ExecutionRunner,
        pool: WorkerPool,
        clock: Clock,
        listeners: Listeners,
        lower: int,
        upper: int,
        trigger: Callable[[], None],
        claims: QueuedClaims,
        sizing: ClaimSizing | None = None,
    ) -> None:
        self.repository = repository
        self.runner = runner
        self.pool = pool
        self.clock = clock
        self.listeners = listeners
        self.lower = lower
        self.upper = upper
        self.trigger = trigger
        self.claims = claims
        self.sizing = sizing
        self._more_in_db = False

    def run(self, now: datetime | None = None) -> PollResult:
        """One claim of rows due by ``now`` (default: the clock's now)."""
        upper = self.upper if self.sizing is None else self.sizing.upper()
        to_fetch = upper - self.pool.in_queue_or_processing
        if to_fetch <= 0:
            result = PollResult(0, True)
        else:
            picked = self.repository.lock_and_fetch(now or self.clock.now(), to_fetch)
            self._more_in_db = len(picked) == to_fetch
            for execution in picked:
                token = self.claims.add(execution)
                if not self.pool.submit(self._job(token), self._done):
                    # Not accepted: shutting down. Given back here, since the shutdown's own
                    # give-back may have run already (a poller slow to stop claims after it);
                    # None when that give-back took it first.
                    refused = self.claims.take(token)
                    if refused is not None:
                        self.repository.unpick([refused])
            result = PollResult(len(picked), self._more_in_db, skips_locked=True)
        # every poll, as fetch does (db-scheduler too): listeners count polls, not only fruitful ones
        self.listeners.on_scheduler_event(SchedulerEventType.RAN_EXECUTE_DUE)
        return result

    def _job(self, token: int) -> Callable[[], None]:
        timed = None if self.sizing is None else self.sizing.record
        return self.claims.job(token, self.runner, self.listeners, timed)

    def _done(self) -> None:
        if self._more_in_db and self.pool.in_queue_or_processing <= self._refill_at():
            self.trigger()

    def _refill_at(self) -> int:
        """Poll again when this few are left. A sized claim of many short executions refills at
        half of what it may hold, while the threads still have queued work: refilling only once
        they are running out would leave them idle for the claim's round trips."""
        if self.sizing is None:
            return self.lower
        return max(self.lower, self.sizing.upper() // 2)


class AutoStrategy:
    """The default: on its first poll, read whether the server has ``SKIP LOCKED`` and become
    sized lock-and-fetch, or fetch where it has not (a failed read fails that poll only, and
    the next one reads again)."""

    def __init__(
        self,
        repository: TaskRepository,
        lock_and_fetch: Callable[[], LockAndFetchStrategy],
        fetch: Callable[[], FetchStrategy],
    ) -> None:
        self.repository = repository
        self._lock_and_fetch = lock_and_fetch
        self._fetch = fetch
        self.chosen: FetchStrategy | LockAndFetchStrategy | None = None

    def choose(self) -> FetchStrategy | LockAndFetchStrategy:
        if self.chosen is None:
            if self.repository.server_has_skip_locked():
                self.chosen = self._lock_and_fetch()
                log.info("polling strategy: lock-and-fetch (the server has SKIP LOCKED)")
            else:
                self.chosen = self._fetch()
                log.info(
                    "polling strategy: fetch (%s has no SELECT … FOR UPDATE SKIP LOCKED)",
                    self.repository.server_description(),
                )
        return self.chosen

    def run(self, now: datetime | None = None) -> PollResult:
        return self.choose().run(now)


#: after a wake-up hint given from inside a commit (before it lands), poll again this long
#: after each following poll, in turn: a commit may take longer than the hint's head start
COMMIT_RECHECKS = (0.05, 0.25, 1.0)

#: a due row that a lock-and-fetch claim passed over (another transaction held it) is looked
#: for again this soon, the delay doubling while rows stay held, up to the cap
PASSED_OVER_FIRST_RECHECK = 0.05
PASSED_OVER_MAX_RECHECK = 1.0


class PassedOverRechecks:
    """When to poll again for due rows a ``SKIP LOCKED`` claim passed over.

    Such a row is usually held for milliseconds (another instance's claim, a completion in
    flight), so the first look is soon; a row held longer (a user's open transaction) is
    looked for at a doubling delay, so a poller does not spin on a lock it cannot take."""

    def __init__(self) -> None:
        self._next = PASSED_OVER_FIRST_RECHECK

    def delay(self) -> float:
        delay, self._next = self._next, min(self._next * 2, PASSED_OVER_MAX_RECHECK)
        return delay

    def reset(self) -> None:
        self._next = PASSED_OVER_FIRST_RECHECK


class PollLoop:
    """The poller thread: run the strategy, then sleep until the polling interval ends, the
    earliest known due time arrives, or someone triggers an early poll."""

    def __init__(
        self,
        strategy: FetchStrategy | LockAndFetchStrategy | AutoStrategy,
        repository: TaskRepository,
        clock: Clock,
        state: SchedulerState,
        listeners: Listeners,
        polling_interval: timedelta,
        waiter: Sleeper,
        before_poll: Callable[[], None] | None = None,
        outage: OutagePolicy = DEFAULT_OUTAGE_POLICY,
    ) -> None:
        self.strategy = strategy
        self.repository = repository
        self.clock = clock
        self.state = state
        self.listeners = listeners
        self.interval = polling_interval.total_seconds()
        self.waiter = waiter
        self.before_poll = before_poll
        self.failures = FailureLog("polling for due executions", log, policy=outage)
        self._thread: threading.Thread | None = None
        self._rechecks: list[float] = []
        self._announced_lock = threading.Lock()
        self._announced: datetime | None = None  # the earliest due time known to be coming
        self._passed_over = PassedOverRechecks()
        #: the clock's time when the last poll completed without an error (None before the first)
        self.last_successful_poll: datetime | None = None

    def announce(self, due: datetime) -> float:
        """Something becomes due at ``due``; the seconds from now until the poller should wake
        for it (``CLAIM_LEAD`` early; 0 when that moment has come)."""
        with self._announced_lock:
            if self._announced is None or due < self._announced:
                self._announced = due
        return max(0.0, (due - self.clock.now()).total_seconds() - CLAIM_LEAD)

    def _claim_horizon(self, now: datetime) -> datetime:
        """Poll for rows due by ``now``, or by the announced due time when it is at most
        ``CLAIM_LEAD`` away (that due time is then consumed)."""
        with self._announced_lock:
            announced = self._announced
            if announced is None or (announced - now).total_seconds() > CLAIM_LEAD:
                return now
            self._announced = None
        return max(now, announced)

    def recheck_soon(self) -> None:
        """Something due now is being committed: poll a few more times shortly."""
        self._rechecks = list(COMMIT_RECHECKS)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="ekbatan-poller", daemon=True)
        self._thread.start()

    def _stopping(self) -> bool:
        # a call, not the property read inline: the poll in between may have changed it
        return self.state.is_shutting_down

    def _run(self) -> None:
        while not self.state.is_shutting_down:
            wait = self.interval
            if not self.state.is_paused:
                try:
                    if self.before_poll is not None:
                        self.before_poll()
                    horizon = self._claim_horizon(self.clock.now())
                    began = time.perf_counter()
                    result = self.strategy.run(horizon)
                    if self.listeners:
                        self.listeners.on_poll(time.perf_counter() - began, result.fetched)
                    self.last_successful_poll = self.clock.now()
                    self.failures.succeeded()
                    if not result.possibly_more:
                        wait = self._until_next_due(wait, horizon, result.skips_locked)
                    log.debug(
                        "polled for executions due by %s: %d claimed%s; next poll within %.3f s",
                        horizon,
                        result.fetched,
                        ", possibly more" if result.possibly_more else "",
                        wait,
                    )
                except Exception as exc:
                    # A database that is down fails every poll alike: one line per streak and
                    # a summary now and then, and longer pauses so as not to hammer it.
                    wait = self.failures.policy.backoff(self.interval, self.failures.failed(exc))
                    self.listeners.on_scheduler_event(SchedulerEventType.UNEXPECTED_ERROR)
                if self._rechecks:
                    wait = min(wait, self._rechecks.pop(0))
            if self._stopping():
                break
            self.waiter.wait(wait)

    def _until_next_due(self, wait: float, polled: datetime, skips_locked: bool = False) -> float:
        """Shorten the sleep to the earliest due time in the table after ``polled`` (the poll
        just made took what was due by then), if sooner.

        After a claim that skips locked rows, "what was due by then" is not all taken: a row
        another transaction held was passed over and is still due. Reading only past
        ``polled`` would then sleep a whole interval with that row due, so the earliest
        unpicked row is read whatever its time, and one at or before ``polled`` is looked for
        again soon (:class:`PassedOverRechecks`)."""
        if not skips_locked:
            next_due = self.repository.next_execution_time(polled)
            return wait if next_due is None else min(wait, self.announce(next_due))
        earliest = self.repository.earliest_claimable()
        if earliest is not None and earliest <= polled:
            delay = self._passed_over.delay()
            log.debug(
                "a due execution (due %s) was held by another transaction; polling again in %.2f s",
                earliest,
                delay,
            )
            return min(wait, delay)
        self._passed_over.reset()
        return wait if earliest is None else min(wait, self.announce(earliest))

    def join(self, timeout: float) -> bool:
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        return self._thread is None or not self._thread.is_alive()


def run_due_here(repository: TaskRepository, runner: ExecutionRunner, clock: Clock, limit: int) -> int:
    """Fetch, claim and run due executions on the calling thread, ``limit`` per fetch, until a
    fetch comes back short or nothing of it could be claimed; how many ran."""
    executed = 0
    while True:
        due = repository.get_due(clock.now(), limit)
        ran = 0
        for candidate in due:
            picked = repository.pick(candidate, clock.now())
            if picked is not None:
                runner.execute(picked)
                ran += 1
        executed += ran
        if len(due) < limit or ran == 0:
            return executed
