"""What the outbox raises. Each error's message names the bad value and what to do instead."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ekbatan.core.sharding._shard_identifier import ShardIdentifier


class OutboxError(Exception):
    """Base class of the outbox's own errors."""


class EventTypeCollisionError(OutboxError, ValueError):
    """Two different event classes have the same simple name (the stored ``event_type``)."""


class InvalidActionParamsError(OutboxError, ValueError):
    """The action's params do not serialise to a JSON object."""


class InvalidEventError(OutboxError, ValueError):
    """An event is not a ``ModelEvent`` or does not serialise to a JSON object."""


class NoActionRunningError(OutboxError, RuntimeError):
    """``current_plan()`` was called outside ``ActionExecutor.execute``."""


class ActionNotRegisteredError(OutboxError, LookupError):
    """``execute(SomeAction, ...)`` named a class the executor has no instance of."""


class UnexpectedRowCountError(OutboxError):
    """A planned statement with ``expected_rowcount=`` matched a different number of rows."""

    def __init__(self, statement: object, expected: int, actual: int) -> None:
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"expected {expected} row(s) to be changed but {actual} were: {str(statement).splitlines()[0]!r}; "
            "the action was rolled back"
        )


class CrossShardError(OutboxError):
    """A plan writes to more than one shard and the call did not allow it. Nothing was written."""

    def __init__(self, action_name: str, shards: Sequence[ShardIdentifier], names: Sequence[str]) -> None:
        self.action_name = action_name
        self.shards = tuple(shards)
        listed = ", ".join(f"{shard} {name}" for shard, name in zip(shards, names, strict=True))
        super().__init__(
            f"{action_name} would write to {len(shards)} shards ({listed}) in one execution; an action "
            "writes to one shard unless the call allows more. Nothing was written. Pass "
            "allow_cross_shard=True to execute() to write each shard in its own transaction "
            "(committed one after another, no two-phase commit)"
        )


class PartiallyCommittedError(OutboxError):
    """A cross-shard action committed on some shards, then a commit failed on another.

    Committed shards keep their rows (there is no two-phase commit); the failed shard and the
    ones after it were rolled back. ``__cause__`` is the commit failure.
    """

    def __init__(
        self,
        action_name: str,
        action_id: uuid.UUID,
        committed: Sequence[ShardIdentifier],
        failed: ShardIdentifier,
        rolled_back: Sequence[ShardIdentifier],
    ) -> None:
        self.action_name = action_name
        self.action_id = action_id
        self.committed = tuple(committed)
        self.failed = failed
        self.rolled_back = tuple(rolled_back)
        super().__init__(
            f"{action_name} (action_id {action_id}) partially committed: committed on "
            f"{', '.join(map(str, committed))}; commit failed on {failed}"
            + (f"; rolled back on {', '.join(map(str, rolled_back))}" if rolled_back else "")
        )
