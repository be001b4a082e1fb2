"""Which scheduler nodes hold executions now: per ``picked_by``, how many picked rows it has
and the newest and oldest of their heartbeats.

Read along ``last_heartbeat_idx``: a claim always writes a heartbeat and a finished run clears
it, so the rows with one are (about) the picked rows — a few among millions — and the read
never walks the whole table. A picked row without a heartbeat (written by hand) is not seen.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

import sqlalchemy as sa

if TYPE_CHECKING:
    from ekbatan.distributed_jobs.scheduler._table.repository import TaskRepository


@dataclass(frozen=True, slots=True)
class NodeClaims:
    """One node's picked executions. Heartbeats are written by the node's own clock: one in
    the future of the reader's clock means the two clocks disagree."""

    picked_by: str | None
    running: int
    newest_heartbeat: datetime | None
    oldest_heartbeat: datetime | None


def read_node_claims(repository: TaskRepository) -> list[NodeClaims]:
    """Per ``picked_by``, in name order, from one grouped read."""
    d = repository.dialect
    sql = sa.text(
        "SELECT picked_by, COUNT(*), MAX(last_heartbeat), MIN(last_heartbeat) "
        f"FROM {repository.table_name} WHERE last_heartbeat IS NOT NULL AND picked = :true "
        "GROUP BY picked_by ORDER BY picked_by"
    )
    with repository._reading() as conn:
        rows = conn.execute(sql, {"true": d.encode_bool(True)}).all()
    return [NodeClaims(r[0], int(r[1]), d.decode_time(r[2]), d.decode_time(r[3])) for r in rows]
