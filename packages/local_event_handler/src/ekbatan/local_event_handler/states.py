"""The states of an ``eventlog.event_notifications`` row.

``PENDING`` (new) → ``SUCCEEDED`` (terminal) or ``FAILED`` (a retry is scheduled) →
``SUCCEEDED``, ``FAILED`` again or ``EXPIRED`` (terminal: the retention window ended). A
``PENDING`` row whose event is already older than the window goes straight to ``EXPIRED``
without its handler being called.
"""

from __future__ import annotations

from enum import StrEnum


class NotificationState(StrEnum):
    PENDING = "PENDING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    EXPIRED = "EXPIRED"


#: the states the handling job still works on
OPEN_STATES = (NotificationState.PENDING.value, NotificationState.FAILED.value)
#: the states nothing moves a row out of
TERMINAL_STATES = (NotificationState.SUCCEEDED.value, NotificationState.EXPIRED.value)
