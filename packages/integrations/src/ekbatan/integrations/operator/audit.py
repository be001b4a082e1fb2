"""Every confirmed action of the operator view, said once: who, what, on which execution, task
or handler, why, and what came of it.

By default each goes to the ``ekbatan.integrations.operator.audit`` logger — done at INFO,
refused (a changed row, a bad form) at WARNING — so that the application's log shipping keeps
them; ``operator_app(audit=...)`` hands each :class:`AuditEntry` to the application instead (to
store in a table of its own, say). A pause is kept with its row as well (``paused_by``,
``reason``). Forms only asked (not yet confirmed), and requests refused before the action is
read (403: read-only, not allowed, bad CSRF token), are not actions and are not audited.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

__all__ = ["AuditEntry", "Audit", "log_audit"]

log = logging.getLogger("ekbatan.integrations.operator.audit")

#: the form fields that name what an action was done on
_TARGET_FIELDS = ("task", "instance", "handler", "states", "state", "at", "version")


@dataclass(frozen=True)
class AuditEntry:
    actor: str
    #: the action's name (``pause-task``, ``retry-dead``, ``redrive`` …) and its kind
    action: str
    kind: str
    #: what it named: task, instance, handler, states, state, at, version (those given)
    target: Mapping[str, str]
    reason: str | None
    #: whether it was done; ``status`` is the HTTP answer (303 done, 400 or 409 refused)
    done: bool
    status: int
    #: what the page said of it
    message: str
    at: datetime = field(default_factory=lambda: datetime.now(UTC))

    @classmethod
    def of(
        cls,
        params: Mapping[str, str],
        *,
        actor: str,
        action: str,
        kind: str,
        reason: str | None,
        done: bool,
        status: int,
        message: str,
    ) -> AuditEntry:
        target = {name: params[name] for name in _TARGET_FIELDS if params.get(name)}
        return cls(actor, action, kind, target, reason, done, status, message)

    def describe(self) -> str:
        named = " ".join(f"{k}={v!r}" for k, v in self.target.items()) or "-"
        why = f" reason={self.reason!r}" if self.reason else ""
        outcome = "done" if self.done else f"refused ({self.status})"
        return f"{self.actor!r} {self.action} [{named}]{why}: {outcome}: {self.message}"


#: what ``operator_app(audit=...)`` takes
Audit = Callable[[AuditEntry], None]


def log_audit(entry: AuditEntry) -> None:
    """The default: one log line per action."""
    log.log(logging.INFO if entry.done else logging.WARNING, "operator action %s", entry.describe())
