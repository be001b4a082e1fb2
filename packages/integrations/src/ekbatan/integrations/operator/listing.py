"""One page of executions, read by keyset: ``scheduled_tasks`` in due order
``(execution_time, task_name, task_instance)``, the held table in key order
``(task_name, task_instance)``, either one ascending or descending (newest first);
``LIMIT page_size + 1`` tells whether a next page exists.

Only the columns a listing shows are read (never ``task_data``); times and booleans are bound
and read through the client's dialect, as the scheduler stores them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from ekbatan.distributed_jobs.scheduler import SchedulerClient, held_table_name
from ekbatan.integrations.operator.states import ExecutionState

__all__ = ["ExecutionPage", "ExecutionQuery", "ListedExecution", "PageKey", "read_page", "table_of"]


@dataclass(frozen=True)
class PageKey:
    """The last row of a page; the next page starts after it. ``execution_time`` is None for
    the held listings (ordered by key alone)."""

    task_name: str
    instance_id: str
    execution_time: datetime | None = None

    def as_query(self) -> dict[str, str]:
        out = {"after_task": self.task_name, "after_instance": self.instance_id}
        if self.execution_time is not None:
            out["after_time"] = self.execution_time.isoformat()
        return out


@dataclass(frozen=True)
class ExecutionQuery:
    """Which executions a page lists; the conditions combine."""

    task_name: str | None = None
    state: ExecutionState | None = None
    instance_prefix: str | None = None
    #: due at or after this time
    due_from: datetime | None = None
    #: due before this time
    due_until: datetime | None = None
    #: latest due time first (key order descending for the held listings)
    newest_first: bool = False
    page_size: int = 50
    after: PageKey | None = None


@dataclass(frozen=True)
class ListedExecution:
    task_name: str
    instance_id: str
    execution_time: datetime
    #: running, failing or scheduled for a row of ``scheduled_tasks``; paused or dead when held
    state: ExecutionState
    due: bool
    consecutive_failures: int
    picked_by: str | None = None
    #: the row's version (rows of ``scheduled_tasks`` only): the actions are guarded by it
    version: int | None = None


@dataclass(frozen=True)
class ExecutionPage:
    rows: list[ListedExecution]
    next_key: PageKey | None


def table_of(name: str, *columns: str) -> sa.TableClause:
    """A lightweight table clause for ``name`` (``table`` or ``schema.table``)."""
    schema, _, table = name.rpartition(".")
    return sa.table(table, *(sa.column(c) for c in columns), schema=schema or None)


def read_page(client: SchedulerClient, query: ExecutionQuery, now: datetime) -> ExecutionPage:
    """The executions of ``query``'s page, and the key of its last row when more follow."""
    if query.state is not None and query.state.held:
        rows = _held_rows(client, query, now)
    else:
        rows = _scheduled_rows(client, query, now)
    if len(rows) <= query.page_size:
        return ExecutionPage(rows, None)
    rows = rows[: query.page_size]
    last = rows[-1]
    held = query.state is not None and query.state.held
    return ExecutionPage(
        rows, PageKey(last.task_name, last.instance_id, None if held else last.execution_time)
    )


#: the columns of ``scheduled_tasks`` a listing reads, in the order it reads them (then the
#: failure count and the version)
_LISTED = ("task_name", "task_instance", "execution_time", "picked", "picked_by")


def _scheduled_rows(client: SchedulerClient, query: ExecutionQuery, now: datetime) -> list[ListedExecution]:
    repository = client.repository
    d = repository.dialect
    t = table_of(client.table_name, *_LISTED, "consecutive_failures", "version")
    c = t.c
    failures = sa.func.coalesce(c.consecutive_failures, 0)
    conditions: list[Any] = _common(c, query)
    not_picked = c.picked == d.encode_bool(False)
    state = query.state
    if state is ExecutionState.SCHEDULED:
        conditions += [not_picked, failures == 0]
    elif state is ExecutionState.DUE:
        conditions += [not_picked, c.execution_time <= d.encode_time(now)]
    elif state is ExecutionState.RUNNING:
        conditions.append(c.picked == d.encode_bool(True))
    elif state is ExecutionState.FAILING:
        conditions += [not_picked, failures > 0]
    if query.due_from is not None:
        conditions.append(c.execution_time >= d.encode_time(query.due_from))
    if query.due_until is not None:
        conditions.append(c.execution_time < d.encode_time(query.due_until))
    after = query.after
    if after is not None and after.execution_time is not None:
        conditions.append(
            _beyond(
                query,
                (c.execution_time, c.task_name, c.task_instance),
                (d.encode_time(after.execution_time), after.task_name, after.instance_id),
            )
        )
    order = _ordered(query, c.execution_time, c.task_name, c.task_instance)
    if state is None and query.instance_prefix:
        # An instance prefix is no index's prefix: the page walks execution_time_idx and tests
        # each entry. Walked for the keys alone (the index holds them), only the page's rows
        # are then read whole; MariaDB reads every row it tests otherwise (0.35 s at a million).
        keys = sa.select(c.task_name, c.task_instance).where(*conditions).order_by(*order)
        page = keys.limit(query.page_size + 1).subquery("page_keys")
        row = t.alias("listed")
        statement = (
            sa.select(
                *(row.c[name] for name in _LISTED),
                sa.func.coalesce(row.c.consecutive_failures, 0),
                row.c.version,
            )
            .select_from(
                row.join(
                    page,
                    sa.and_(row.c.task_name == page.c.task_name, row.c.task_instance == page.c.task_instance),
                )
            )
            .order_by(*_ordered(query, row.c.execution_time, row.c.task_name, row.c.task_instance))
        )
    else:
        statement = (
            sa.select(
                c.task_name, c.task_instance, c.execution_time, c.picked, c.picked_by, failures, c.version
            )
            .where(*conditions)
            .order_by(*order)
            .limit(query.page_size + 1)
        )
    with repository.engine.connect() as connection:
        found = connection.execute(statement).all()
    rows = []
    for r in found:
        execution_time = d.decode_time(r[2])
        assert execution_time is not None  # the column is NOT NULL
        picked, failed = d.decode_bool(r[3]), int(r[5] or 0)
        listed = (
            ExecutionState.RUNNING
            if picked
            else ExecutionState.FAILING
            if failed
            else ExecutionState.SCHEDULED
        )
        due = not picked and execution_time <= now
        rows.append(ListedExecution(r[0], r[1], execution_time, listed, due, failed, r[4], int(r[6])))
    return rows


def _held_rows(client: SchedulerClient, query: ExecutionQuery, now: datetime) -> list[ListedExecution]:
    assert query.state is not None
    repository = client.repository
    d = repository.dialect
    t = table_of(
        held_table_name(client.table_name),
        "task_name",
        "task_instance",
        "state",
        "execution_time",
        "consecutive_failures",
    )
    c = t.c
    conditions: list[Any] = [*_common(c, query), c.state == query.state.value]
    if query.due_from is not None:
        conditions.append(c.execution_time >= d.encode_time(query.due_from))
    if query.due_until is not None:
        conditions.append(c.execution_time < d.encode_time(query.due_until))
    after = query.after
    if after is not None:
        conditions.append(
            _beyond(query, (c.task_name, c.task_instance), (after.task_name, after.instance_id))
        )
    statement = (
        sa.select(c.task_name, c.task_instance, c.execution_time, c.consecutive_failures)
        .where(*conditions)
        .order_by(*_ordered(query, c.task_name, c.task_instance))
        .limit(query.page_size + 1)
    )
    try:
        with repository.engine.connect() as connection:
            found = connection.execute(statement).all()
    except (sa.exc.ProgrammingError, sa.exc.OperationalError):
        return []  # no held table (not migrated since it came): nothing is held
    rows = []
    for r in found:
        execution_time = d.decode_time(r[2])
        assert execution_time is not None
        rows.append(ListedExecution(r[0], r[1], execution_time, query.state, False, int(r[3] or 0)))
    return rows


def _ordered(query: ExecutionQuery, *columns: Any) -> list[Any]:
    return [column.desc() for column in columns] if query.newest_first else list(columns)


def _beyond(query: ExecutionQuery, columns: tuple[Any, ...], last: tuple[Any, ...]) -> Any:
    """The rows after ``last`` in the page's order: the keyset condition, spelled out
    (``(a, b) > (x, y)`` as ``a > x OR (a = x AND b > y)``) so that every database uses its
    index for the leading column."""
    first, *rest = columns
    value, *rest_values = last
    step = first < value if query.newest_first else first > value
    if not rest:
        return step
    return sa.or_(step, sa.and_(first == value, _beyond(query, tuple(rest), tuple(rest_values))))


def _common(c: Any, query: ExecutionQuery) -> list[Any]:
    conditions: list[Any] = []
    if query.task_name is not None:
        conditions.append(c.task_name == query.task_name)
    if query.instance_prefix:
        conditions.append(c.task_instance.startswith(query.instance_prefix, autoescape=True))
    return conditions
