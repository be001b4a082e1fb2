"""Which polling strategy a scheduler uses, its limits, and how auto's claims are sized."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class PollingKind(enum.StrEnum):
    """Which polling strategy; a string enum, so ``kind == "fetch"`` reads as before."""

    FETCH = "fetch"
    LOCK_AND_FETCH = "lock_and_fetch"
    #: sized lock-and-fetch where the server has ``SKIP LOCKED``, else fetch (chosen on the first poll)
    AUTO = "auto"


@dataclass(frozen=True, slots=True)
class PollingStrategyConfig:
    """Which strategy, and its limits as fractions of the worker thread count."""

    kind: PollingKind = PollingKind.FETCH
    lower_fraction: float = 0.5
    upper_fraction: float = 3.0

    def __post_init__(self) -> None:
        try:
            # a plain string still names its strategy; the enum is what is kept
            object.__setattr__(self, "kind", PollingKind(self.kind))
        except ValueError:
            raise ValueError(
                f"unknown polling strategy {self.kind!r}; use 'fetch', 'lock_and_fetch' or 'auto'"
            ) from None
        if self.lower_fraction < 0:
            raise ValueError(f"lower limit fraction must be >= 0, got {self.lower_fraction}")
        if not self.lower_fraction < self.upper_fraction:
            raise ValueError(
                f"lower limit fraction ({self.lower_fraction}) must be below the upper one ({self.upper_fraction})"
            )
        if self.upper_fraction < 1.0:
            raise ValueError(f"upper limit fraction must be >= 1.0, got {self.upper_fraction}")

    def limits(self, threads: int) -> tuple[int, int]:
        # Truncation, as db-scheduler does: 0.5 x 1 thread gives a lower limit of 0.
        return int(self.lower_fraction * threads), int(self.upper_fraction * threads)

    @classmethod
    def fetch(cls, lower: float = 0.5, upper: float = 3.0) -> PollingStrategyConfig:
        return cls(PollingKind.FETCH, lower, upper)

    @classmethod
    def lock_and_fetch(cls, lower: float = 0.5, upper: float = 1.0) -> PollingStrategyConfig:
        return cls(PollingKind.LOCK_AND_FETCH, lower, upper)

    @classmethod
    def auto(cls) -> PollingStrategyConfig:
        """Limits of the lock-and-fetch it usually becomes: the upper one only until the first
        executions are timed (:class:`ClaimSizing` takes over); fetch's own where it falls back."""
        return cls(PollingKind.AUTO, 0.5, 1.0)


#: a queued claim should start within about this many seconds (sizes auto's claims)
QUEUE_HORIZON = 1.0
#: at most this many executions per worker thread claimed (running or queued) at once
MAX_CLAIMED_PER_THREAD = 10
#: weight of the newest execution time in the running mean
_EWMA_WEIGHT = 0.2


class ClaimSizing:
    """How many executions auto's lock-and-fetch may hold (running plus queued): one per thread
    until executions have been timed; then as many more per thread as one thread gets through
    within :data:`QUEUE_HORIZON`, at most :data:`MAX_CLAIMED_PER_THREAD` in all. Short tasks are
    claimed in bulk (a claim's round trips shared by many), long ones one per free thread, and
    nothing is claimed that would wait long for a thread (queued claims heartbeat meanwhile)."""

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self.mean_seconds: float | None = None

    def record(self, seconds: float) -> None:
        # Worker threads record concurrently; a lost update only delays the mean slightly.
        mean = self.mean_seconds
        self.mean_seconds = seconds if mean is None else mean + _EWMA_WEIGHT * (seconds - mean)

    def upper(self) -> int:
        mean = self.mean_seconds
        if mean is None:
            return self.threads
        queued_per_thread = int(QUEUE_HORIZON / max(mean, 1e-6))
        return self.threads * min(MAX_CLAIMED_PER_THREAD, 1 + queued_per_thread)
