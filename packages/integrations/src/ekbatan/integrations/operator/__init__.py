"""The operator's web view of the scheduler: an ASGI app (Starlette) to mount in an
application — ``app.mount("/ekbatan", operator_app(runtime))`` — or to serve with
``ekbatan ui``; ``operator_wsgi`` serves it to a WSGI application (Flask). It reads (and, with ``read_only=False``, acts) through a ``SchedulerClient``
and never starts a scheduler."""

from ekbatan.integrations.operator.app import CANCEL, PAUSE, RETRY, RUN, VIEW, Actor, Authorize, operator_app
from ekbatan.integrations.operator.audit import Audit, AuditEntry
from ekbatan.integrations.operator.basic_auth import BasicAuth
from ekbatan.integrations.operator.eventlog_shards import EventlogShard, EventlogShards
from ekbatan.integrations.operator.states import ExecutionState
from ekbatan.integrations.operator.wsgi import operator_wsgi

__all__ = [
    "CANCEL",
    "PAUSE",
    "RETRY",
    "RUN",
    "VIEW",
    "Actor",
    "Audit",
    "AuditEntry",
    "Authorize",
    "BasicAuth",
    "EventlogShard",
    "EventlogShards",
    "ExecutionState",
    "operator_app",
    "operator_wsgi",
]
