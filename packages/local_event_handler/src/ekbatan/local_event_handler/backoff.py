"""How long a failed notification waits before its next try: 30 s doubling per attempt, capped."""

from __future__ import annotations

from datetime import timedelta

BASE_DELAY = timedelta(seconds=30)
# 2**30 × 30 s is already ~1,000 years; the exponent is capped so no overflow is ever computed
_MAX_EXPONENT = 30


def backoff_delay(attempts: int, cap: timedelta) -> timedelta:
    """The wait after the ``attempts``-th failed try (1 for the first failure): 30 s, 1 min,
    2 min, … never more than ``cap``."""
    if attempts < 1:
        raise ValueError(f"attempts must be at least 1 (the count after the failure); got {attempts}")
    if cap <= timedelta(0):
        raise ValueError(f"the backoff cap must be positive; got {cap}")
    factor: int = 2 ** min(
        attempts - 1, _MAX_EXPONENT
    )  # int ** int is typed Any: a negative power is a float
    return min(BASE_DELAY * factor, cap)
