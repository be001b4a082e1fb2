"""Test support shared by every package's tests: real databases, isolated per test.

Not shipped in any distribution; the test suite puts the repository root on ``sys.path``.
"""

from testsupport.databases import (
    ALL_DIALECTS,
    IsolatedDatabase,
    create_isolated_database,
    server_url,
)
from testsupport.scheduler_events import EventRecorder
from testsupport.server_sessions import kill_sessions, session_id
from testsupport.waiting import wait_until

__all__ = [
    "ALL_DIALECTS",
    "EventRecorder",
    "IsolatedDatabase",
    "create_isolated_database",
    "kill_sessions",
    "server_url",
    "session_id",
    "wait_until",
]
