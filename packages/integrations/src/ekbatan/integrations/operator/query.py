"""The executions page's query string, read strictly: a bad value is a 400 naming it."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from ekbatan.integrations.operator.listing import ExecutionQuery, PageKey
from ekbatan.integrations.operator.states import ExecutionState
from ekbatan.integrations.operator.typed_times import parse_typed_time

__all__ = ["DEFAULT_PAGE_SIZE", "MAX_PAGE_SIZE", "ORDERS", "QueryError", "parse_query"]

#: ``order``: soonest due first (the default), or latest first
ORDERS = ("due", "newest")
DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 500


class QueryError(ValueError):
    """A query parameter the page cannot use; the message names it and its value."""


def parse_query(params: Mapping[str, str]) -> ExecutionQuery:
    state_text = params.get("state") or None
    state = None
    if state_text is not None:
        try:
            state = ExecutionState(state_text)
        except ValueError:
            names = ", ".join(s.value for s in ExecutionState)
            raise QueryError(f"state must be one of {names}, got {state_text!r}") from None
    order = params.get("order") or "due"
    if order not in ORDERS:
        raise QueryError(f"order must be one of {', '.join(ORDERS)}, got {order!r}")
    due_from, due_until = _time(params, "from"), _time(params, "until")
    if due_from is not None and due_until is not None and due_until <= due_from:
        raise QueryError(
            f"until ({due_until:%Y-%m-%dT%H:%M:%S}) must come after from ({due_from:%Y-%m-%dT%H:%M:%S})"
        )
    return ExecutionQuery(
        task_name=params.get("task") or None,
        state=state,
        instance_prefix=params.get("prefix") or None,
        due_from=due_from,
        due_until=due_until,
        newest_first=order == "newest",
        page_size=_page_size(params.get("page_size")),
        after=_after(params, held=state is not None and state.held),
    )


def _time(params: Mapping[str, str], name: str) -> datetime | None:
    text = params.get(name) or None
    if text is None:
        return None
    try:
        return parse_typed_time(text)
    except ValueError as error:
        raise QueryError(f"{name}: {error}") from None


def _page_size(text: str | None) -> int:
    if text is None or text == "":
        return DEFAULT_PAGE_SIZE
    try:
        size = int(text)
    except ValueError:
        size = 0
    if not 1 <= size <= MAX_PAGE_SIZE:
        raise QueryError(f"page_size must be a whole number from 1 to {MAX_PAGE_SIZE}, got {text!r}")
    return size


def _after(params: Mapping[str, str], *, held: bool) -> PageKey | None:
    task, instance, time_text = (
        params.get("after_task"),
        params.get("after_instance"),
        params.get("after_time"),
    )
    if task is None and instance is None and time_text is None:
        return None
    if task is None or instance is None or (time_text is None and not held):
        raise QueryError("after_task, after_instance and after_time go together (the next page's link)")
    if held or time_text is None:
        return PageKey(task, instance)
    try:
        at = datetime.fromisoformat(time_text)
    except ValueError:
        raise QueryError(f"after_time must be an ISO-8601 time, got {time_text!r}") from None
    if at.tzinfo is None:
        raise QueryError(f"after_time must have a UTC offset, got {time_text!r}")
    return PageKey(task, instance, at)
