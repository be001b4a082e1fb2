"""Checks the job builders run on each option as it is set, so a bad value fails at its call."""

from __future__ import annotations

from datetime import timedelta
from typing import Any


def require_timedelta(value: Any, what: str) -> None:
    if not isinstance(value, timedelta):
        raise TypeError(f"{what} must be a timedelta, e.g. timedelta(seconds=1); got {value!r}")


def require_positive(value: Any, what: str, example: str) -> None:
    if value is None or value <= type(value)(0):
        raise ValueError(f"{what} must be positive, got {value!r}; write e.g. {example}")
