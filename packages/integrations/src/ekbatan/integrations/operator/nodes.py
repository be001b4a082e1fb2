"""The overview's "nodes seen": each scheduler node holding executions now (from the
heartbeats of its picked rows in ``scheduled_tasks``) and each that finished runs in the last
hour (from the history, when it is on).

Heartbeat ages are measured against the page's clock, while each node writes its heartbeats by
its own: an age is the node's silence plus any offset between the two clocks, and a heartbeat
newer than the page's clock (a negative age) can only be a clock running ahead.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from ekbatan.distributed_jobs.scheduler import NodeClaims
from ekbatan.integrations.operator.history_figures import NodeRuns

__all__ = ["NodeSeen", "nodes_seen"]


@dataclass(frozen=True)
class NodeSeen:
    #: ``picked_by``; None for rows that recorded no node name
    name: str | None
    #: executions it holds picked now
    running: int = 0
    #: page clock minus its newest / oldest heartbeat; negative: the node's clock is ahead
    newest_heartbeat_age: timedelta | None = None
    oldest_heartbeat_age: timedelta | None = None
    #: runs it finished in the last hour; None when the history is off
    runs_last_hour: int | None = None
    last_finished: datetime | None = None

    @property
    def clock_ahead(self) -> timedelta | None:
        """How far ahead of the page's clock the node's clock is at least, when it shows."""
        ages = [a for a in (self.newest_heartbeat_age, self.oldest_heartbeat_age) if a is not None]
        ahead = -min(ages, default=timedelta(0))
        return ahead if ahead > timedelta(0) else None


def nodes_seen(claims: list[NodeClaims], finished: list[NodeRuns] | None, now: datetime) -> list[NodeSeen]:
    """One row per node name, by name (a nameless node last); ``finished`` None: history off."""
    ran = {n.picked_by: n for n in finished or []}
    holding = {c.picked_by: c for c in claims}
    names = sorted(set(ran) | set(holding), key=lambda n: (n is None, n or ""))
    rows = []
    for name in names:
        claim, runs = holding.get(name), ran.get(name)
        rows.append(
            NodeSeen(
                name,
                running=claim.running if claim else 0,
                newest_heartbeat_age=_age(now, claim.newest_heartbeat if claim else None),
                oldest_heartbeat_age=_age(now, claim.oldest_heartbeat if claim else None),
                runs_last_hour=None if finished is None else (runs.runs if runs else 0),
                last_finished=runs.last_finished if runs else None,
            )
        )
    return rows


def _age(now: datetime, then: datetime | None) -> timedelta | None:
    return None if then is None else now - then
