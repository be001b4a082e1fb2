"""The operator's web view of the scheduler: a read-only ASGI app (Starlette) to mount in an
application — ``app.mount("/ekbatan", operator_app(runtime))`` — or to serve with
``ekbatan ui``. It reads through a ``SchedulerClient`` and never starts a scheduler."""

from ekbatan.integrations.operator.app import VIEW, Authorize, operator_app
from ekbatan.integrations.operator.basic_auth import BasicAuth
from ekbatan.integrations.operator.states import ExecutionState

__all__ = ["VIEW", "Authorize", "BasicAuth", "ExecutionState", "operator_app"]
