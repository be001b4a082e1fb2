"""The statements of ``<table>_history``: insert a batch, read pages and summaries, prune."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from ekbatan.distributed_jobs.scheduler._history.records import (
    HistoryEntry,
    HistoryRetention,
    RunResult,
    TaskHistorySummary,
)
from ekbatan.distributed_jobs.scheduler._table.held_ddl import history_table_name
from ekbatan.distributed_jobs.scheduler._table.held_rows import ErrorRecord
from ekbatan.distributed_jobs.scheduler._table.repository import TaskRepository
from ekbatan.distributed_jobs.scheduler.dialects import Dialect

#: the columns a run writes (its ``id`` is the table's own), in their order
COLUMNS = (
    "task_name", "task_instance", "execution_time", "picked_by", "version", "started", "finished",
    "duration_ms", "result", "attempt", "error_class", "error_message", "error_traceback", "task_data",
)  # fmt: skip
#: a row on its way to the table: the values of :data:`COLUMNS` in their order, times aware, the
#: result its string. A plain tuple, not a dict: one is built and written per run, thousands a
#: second, by the process that runs them, and :meth:`HistoryTable.insert` hands it to the driver
#: as it is (PostgreSQL's COPY takes it; MySQL's literals are written from it)
HistoryRow = tuple[Any, ...]
#: the positions of the times in a row (encoded per dialect where no COPY takes them as they are)
_TIMES = tuple(COLUMNS.index(c) for c in ("execution_time", "started", "finished"))
_SELECT = "id, " + ", ".join(COLUMNS)
#: the PostgreSQL types of :data:`COLUMNS`, for the binary COPY
_COPY_TYPES = (
    "text", "text", "timestamptz", "text", "int8", "timestamptz", "timestamptz",
    "int8", "text", "int4", "text", "text", "text", "bytea",
)  # fmt: skip
#: durations read per task for its percentiles (the newest runs in the window)
SUMMARY_SAMPLE = 1_000
#: the longest multi-row INSERT written at once on MySQL, in characters: its data is hex and its
#: times and names ASCII, so about 1 MiB, 4 at the very most in UTF-8, well within the server's
#: ``max_allowed_packet`` (16 MiB by default on MariaDB, 64 on MySQL); and still thousands of the
#: rows of trivial runs (about 250 characters each)
STATEMENT_CHARS = 1 << 20


class HistoryTable:
    def __init__(self, repository: TaskRepository) -> None:
        self.repository = repository
        self.dialect = repository.dialect
        self.name = history_table_name(repository.table_name)
        values = ", ".join(f":{c}" for c in COLUMNS)
        self._insert = sa.text(f"INSERT INTO {self.name} ({', '.join(COLUMNS)}) VALUES ({values})")
        # PostgreSQL through psycopg: a binary COPY, about 4 µs of client CPU per row where an
        # INSERT of one array per column costs 36 (psycopg adapts arrays element by element in
        # Python) and an executemany more; elsewhere the driver folds the executemany (PyMySQL:
        # one multi-row INSERT)
        engine = repository.engine
        self._copy: str | None = None
        self._literal_insert: str | None = None
        if self.dialect.dialect is Dialect.POSTGRESQL and engine.dialect.driver == "psycopg":
            self._copy = f"COPY {self.name} ({', '.join(COLUMNS)}) FROM STDIN (FORMAT BINARY)"
        elif self.dialect.dialect in (Dialect.MYSQL, Dialect.MARIADB) and engine.dialect.driver == "pymysql":
            # PyMySQL escapes each parameter in Python (42 µs a row for these 14 columns);
            # the same quoting, by the connection's own escape (which knows the server's
            # NO_BACKSLASH_ESCAPES mode), written once per value type, costs 18
            self._literal_insert = f"INSERT INTO {self.name} ({', '.join(COLUMNS)}) VALUES "

    def insert(self, rows: Sequence[HistoryRow]) -> None:
        """Insert ``rows`` in one transaction."""
        with self.repository.engine.begin() as conn:
            if self._literal_insert is not None:
                driver = conn.connection.driver_connection
                assert driver is not None
                quote = _quoting(driver.escape)  # what PyMySQL's cursors quote a string with
                utc = self.dialect.encode_time
                with driver.cursor() as cur:
                    for values in _statements(rows, quote, utc):
                        cur.execute(self._literal_insert + values)  # no parameters: nothing else formats it
                return
            if self._copy is None:
                conn.execute(self._insert, [self._parameters(row) for row in rows])
                return
            driver = conn.connection.driver_connection
            assert driver is not None
            with driver.cursor() as cur, cur.copy(self._copy) as copy:
                copy.set_types(_COPY_TYPES)
                for row in rows:
                    copy.write_row(row)  # aware times are what a timestamptz takes

    def _parameters(self, row: HistoryRow) -> dict[str, Any]:
        values = list(row)
        for i in _TIMES:
            values[i] = self.dialect.encode_time(row[i])
        return dict(zip(COLUMNS, values, strict=True))

    @staticmethod
    def encode(row: Mapping[str, Any]) -> HistoryRow:
        """A row for :meth:`insert` from a mapping of every column (the result a
        :class:`RunResult` or its string)."""
        return tuple(RunResult(row[c]).value if c == "result" else row[c] for c in COLUMNS)

    # ------------------------------------------------------------------ reading
    def read(
        self,
        *,
        task_name: str | None = None,
        instance_id: str | None = None,
        since: datetime | None = None,
        result: RunResult | None = None,
        failed: bool = False,
        limit: int = 100,
        before: tuple[datetime, int] | None = None,
    ) -> list[HistoryEntry]:
        """Runs newest first; ``failed``: every result but ``succeeded``; ``before`` (an
        entry's ``cursor``) reads the page after it."""
        d = self.dialect
        conditions: list[str] = []
        params: dict[str, Any] = {}
        if task_name is not None:
            conditions.append("task_name = :task_name")
            params["task_name"] = task_name
        if instance_id is not None:
            conditions.append("task_instance = :task_instance")
            params["task_instance"] = instance_id
        if since is not None:
            conditions.append("finished >= :since")
            params["since"] = d.encode_time(since)
        if result is not None:
            conditions.append("result = :result")
            params["result"] = result.value
        if failed:
            conditions.append("result <> 'succeeded'")
        if before is not None:
            conditions.append("(finished < :before_time OR (finished = :before_time AND id < :before_id))")
            params.update(before_time=d.encode_time(before[0]), before_id=before[1])
        where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
        sql = sa.text(
            f"SELECT {_SELECT} FROM {self.name}{where} ORDER BY finished DESC, id DESC{d.limit(limit)}"
        )
        with self.repository._reading() as conn:
            return [self._entry(r) for r in conn.execute(sql, params).all()]

    def _entry(self, r: Sequence[Any]) -> HistoryEntry:
        d = self.dialect
        return HistoryEntry(
            id=int(r[0]),
            task_name=r[1],
            instance_id=r[2],
            execution_time=d.decode_required_time(r[3]),
            picked_by=r[4],
            version=r[5],
            started=d.decode_time(r[6]),
            finished=d.decode_required_time(r[7]),
            duration_ms=r[8],
            result=RunResult(r[9]),
            attempt=r[10],
            error=ErrorRecord(r[11], r[12], r[13]),
            raw_data=d.decode_bytes(r[14]),
        )

    def summary(self, since: datetime) -> list[TaskHistorySummary]:
        """Per task name since ``since``: runs, failures, p50/p95 duration of its newest runs
        (at most :data:`SUMMARY_SAMPLE`), and its last run."""
        d = self.dialect
        # A missed-slots row is not a run: counted apart, and never the "last run". Grouped by
        # an expression, not the column: MariaDB grouped along (task_name, finished) and so read
        # every row ever kept (1.0 s at 1.1 M rows) instead of the window along `finished`.
        counts = sa.text(
            "SELECT COALESCE(task_name, ''), SUM(CASE WHEN result = 'missed' THEN 0 ELSE 1 END), "
            "SUM(CASE WHEN result IN ('succeeded', 'missed') THEN 0 ELSE 1 END), "
            "MAX(CASE WHEN result = 'missed' THEN NULL ELSE finished END), "
            "SUM(CASE WHEN result = 'missed' THEN 1 ELSE 0 END) "
            f"FROM {self.name} WHERE finished >= :since GROUP BY COALESCE(task_name, '') ORDER BY 1"
        )
        durations = sa.text(
            f"SELECT duration_ms, result FROM {self.name} WHERE task_name = :task_name AND finished >= :since "
            f"AND result <> 'missed' ORDER BY finished DESC{d.limit(SUMMARY_SAMPLE)}"
        )
        summaries = []
        with self.repository._reading() as conn:
            for name, runs, failures, last, missed in conn.execute(
                counts, {"since": d.encode_time(since)}
            ).all():
                rows = conn.execute(durations, {"task_name": name, "since": d.encode_time(since)}).all()
                taken = sorted(r[0] for r in rows if r[0] is not None)
                summaries.append(
                    TaskHistorySummary(
                        task_name=name,
                        runs=int(runs),
                        failures=int(failures or 0),
                        p50_ms=_percentile(taken, 0.50),
                        p95_ms=_percentile(taken, 0.95),
                        last_finished=d.decode_time(last),
                        last_result=RunResult(rows[0][1]) if rows else None,
                        missed=int(missed or 0),
                    )
                )
        return summaries

    # ------------------------------------------------------------------ pruning
    def prune(
        self,
        now: datetime,
        retention: HistoryRetention,
        *,
        budget: float | None = None,
        stop: Callable[[], bool] = lambda: False,
    ) -> int:
        """Delete runs past their retention, then each task's runs beyond the cap, in batches of
        ``retention.batch_size`` (one short transaction each); how many rows went. Stops early
        after ``budget`` seconds or when ``stop()`` says so: what is left goes next time."""
        deadline = None if budget is None else time.monotonic() + budget

        def halt() -> bool:
            return stop() or (deadline is not None and time.monotonic() > deadline)

        d = self.dialect
        removed = 0
        for results, keep in (
            (["succeeded"], retention.succeeded),
            ([r.value for r in RunResult if r is not RunResult.SUCCEEDED], retention.failed),
        ):
            placeholders = ", ".join(f":r{i}" for i in range(len(results)))
            condition = f"result IN ({placeholders}) AND finished < :cutoff"
            params = {f"r{i}": r for i, r in enumerate(results)} | {"cutoff": d.encode_time(now - keep)}
            removed += self._delete_batches(condition, params, retention.batch_size, halt)
        if retention.max_runs_per_task is not None and not halt():
            removed += self._cap_per_task(retention.max_runs_per_task, retention.batch_size, halt)
        return removed

    def _cap_per_task(self, cap: int, batch: int, halt: Callable[[], bool]) -> int:
        over = sa.text(f"SELECT task_name FROM {self.name} GROUP BY task_name HAVING COUNT(*) > :cap")
        # the finished time of the task's newest run beyond the cap: older ones go
        edge = sa.text(
            f"SELECT finished, id FROM {self.name} WHERE task_name = :task_name "
            f"ORDER BY finished DESC, id DESC{self.dialect.limit(1)} OFFSET :cap"
        )
        removed = 0
        with self.repository._reading() as conn:
            names = [r[0] for r in conn.execute(over, {"cap": cap}).all()]
        for name in names:
            with self.repository._reading() as conn:
                row = conn.execute(edge, {"task_name": name, "cap": cap}).first()
            if row is None:
                continue
            condition = (
                "task_name = :task_name AND (finished < :edge OR (finished = :edge AND id <= :edge_id))"
            )
            params = {"task_name": name, "edge": row[0], "edge_id": row[1]}
            removed += self._delete_batches(condition, params, batch, halt)
        return removed

    def _delete_batches(
        self, condition: str, params: dict[str, Any], batch: int, halt: Callable[[], bool]
    ) -> int:
        """Delete the rows matching ``condition``, oldest first, ``batch`` at a time. Each batch
        starts after the last one's highest id (the key's own index, in insertion order, which is
        the order runs expire in): the index entries of rows just deleted stay until vacuum or
        purge, and a scan from the start would wade through all of them again, batch after
        batch. Runs finished at the same instant (a batch of them) cost nothing extra."""
        pick = sa.text(
            f"SELECT id FROM {self.name} WHERE id > :lower AND {condition} ORDER BY id{self.dialect.limit(batch)}"
        )
        delete = sa.text(f"DELETE FROM {self.name} WHERE id IN :ids").bindparams(
            sa.bindparam("ids", expanding=True)
        )
        lower = 0
        removed = 0
        while not halt():
            with self.repository.engine.begin() as conn:
                ids = [r[0] for r in conn.execute(pick, {**params, "lower": lower}).all()]
                if ids:
                    removed += conn.execute(delete, {"ids": ids}).rowcount
            if len(ids) < batch:
                break
            lower = ids[-1]
        return removed


def _statements(
    rows: Sequence[HistoryRow], quote: Callable[[str], str], utc: Callable[[datetime], datetime]
) -> Iterator[str]:
    """The ``VALUES`` lists of ``rows``, each at most :data:`STATEMENT_CHARS` long (a row longer
    than that alone in its own): the server refuses a statement over its ``max_allowed_packet``,
    and rows that keep large task data reach it in a few hundred."""
    values: list[str] = []
    size = 0
    for row in rows:
        literal = "(" + ", ".join(_mysql_literal(v, quote, utc) for v in row) + ")"
        if values and size + len(literal) > STATEMENT_CHARS:
            yield ", ".join(values)
            values, size = [], 0
        values.append(literal)
        size += len(literal) + 2
    if values:
        yield ", ".join(values)


def _quoting(escape: Callable[[str], str]) -> Callable[[str], str]:
    """``escape`` remembering what it quoted, for one batch: its task names, node names and
    results repeat row after row."""
    quoted: dict[str, str] = {}

    def quote(value: str) -> str:
        literal = quoted.get(value)
        if literal is None:
            literal = quoted[value] = escape(value)
        return literal

    return quote


def _mysql_literal(value: Any, quote: Callable[[str], str], utc: Callable[[datetime], datetime]) -> str:
    """``value`` as a MySQL literal: a string quoted by ``quote`` as PyMySQL quotes parameters, a
    time as the table keeps it (``utc``: the dialect's naive UTC); only the types a history row
    holds (anything else is a bug, refused rather than guessed)."""
    if value is None:
        return "NULL"
    if isinstance(value, str):
        return quote(value)
    if isinstance(value, datetime):
        if value.tzinfo is UTC:
            # the engine's own times: the text without its "+00:00" is the naive UTC one, at a
            # third of the cost of making the naive time first
            return "'" + value.isoformat(sep=" ")[:-6] + "'"
        return "'" + utc(value).isoformat(sep=" ") + "'"
    if isinstance(value, bytes):
        return "X'" + value.hex() + "'"
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise TypeError(f"a history column got a {type(value).__name__}: {value!r}")


def _percentile(values: list[int], share: float) -> float | None:
    """The nearest-rank percentile of sorted ``values``."""
    if not values:
        return None
    return float(values[max(0, math.ceil(share * len(values)) - 1)])
