"""Instance statements of :class:`~turnqueue.store.tx.SqlTx`: liveness, orphans and NOTIFY (M4, M6).

An *orphan* is work whose owner (``owner``, ``reserved_by``) is NULL or an instance without a
fresh heartbeat. Recovering one is idempotent (``end_turn`` ends only RUNNING turns; a release
touches only in-flight entries), so two instances may race to do it.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from sqlalchemy import ColumnElement, Select, delete, false, or_, select, true, update

from turnqueue.domain import PROMPTABLE, SessionState, utcnow
from turnqueue.store.protocol import Orphans
from turnqueue.store.rows import RUNNING
from turnqueue.store.statement import Statements
from turnqueue.store.tables import (
    agent_processes,
    clarifications,
    instances,
    queue_entries,
    queue_session_locks,
    queue_session_state,
    session_holds,
    sessions,
    turns,
)

qe, locks, holds = queue_entries, queue_session_locks, session_holds


def _not_live(column: Any, live: Iterable[int]) -> ColumnElement[bool]:
    ids = list(live)
    return or_(column.is_(None), column.not_in(ids)) if ids else true()


class InstanceStatements(Statements):
    def notify(self, payload: str) -> None:
        """Deliver ``payload`` to every instance's listener if and when this commits (M4): a
        no-op here, as SQLite has a single process (``PostgresTx`` sends it)."""

    async def register_instance(self, instance: int) -> None:
        now = utcnow()
        await self.unregister_instance(instance)
        await self._conn.execute(
            instances.insert().values(id=instance, started_at=now, heartbeat_at=now)
        )

    async def unregister_instance(self, instance: int) -> None:
        await self._conn.execute(delete(instances).where(instances.c.id == instance))

    async def heartbeat(self, instance: int, lease_seconds: float) -> bool:
        """Refresh this instance's lease; False when its row is gone (declared dead)."""
        now = utcnow()
        # Forgets long-dead instances on the way (their work was recovered long ago).
        await self._conn.execute(
            delete(instances).where(
                instances.c.heartbeat_at < now - timedelta(seconds=10 * lease_seconds)
            )
        )
        result = await self._conn.execute(
            update(instances).where(instances.c.id == instance).values(heartbeat_at=now)
        )
        return bool(result.rowcount)

    async def live_instances(self, lease_seconds: float) -> set[int]:
        cutoff = utcnow() - timedelta(seconds=lease_seconds)
        rows = await self._conn.scalars(
            select(instances.c.id).where(instances.c.heartbeat_at >= cutoff)
        )
        return {int(i) for i in rows}

    async def orphans(self, live: Iterable[int], *, host: str, grace: float) -> Orphans:
        """What instances not in ``live`` left (M6): their processes on ``host``; the stuck
        sessions of :attr:`Orphans.stuck`, a STARTING one after ``grace`` seconds."""
        live = list(live)
        running = select(turns.c.session_id, turns.c.id).where(
            turns.c.status == RUNNING, _not_live(turns.c.owner, live)
        )
        in_flight = (
            select(qe.c.session_id, qe.c.id)
            .where(qe.c.in_flight == true(), _not_live(qe.c.reserved_by, live))
            .order_by(qe.c.session_id, qe.c.position, qe.c.id)
        )
        marks = (
            select(locks.c.session_id, locks.c.cancel_mark)
            .select_from(locks.outerjoin(turns, turns.c.id == locks.c.cancel_mark))
            .where(locks.c.cancel_mark.is_not(None), _not_live(turns.c.owner, live))
        )
        held = select(holds.c.session_id).where(_not_live(holds.c.instance, live)).distinct()
        processes = select(agent_processes.c.pgid).where(
            agent_processes.c.host == host, _not_live(agent_processes.c.instance, live)
        )
        running_turn = select(turns.c.id).where(
            turns.c.session_id == sessions.c.id, turns.c.status == RUNNING
        )
        starting_since = utcnow() - timedelta(seconds=grace)
        stuck = select(sessions.c.id).where(
            or_(
                sessions.c.state == SessionState.RUNNING.value,
                (sessions.c.state == SessionState.STARTING.value)
                & (sessions.c.updated_at < starting_since),
            ),
            ~running_turn.exists(),
        )
        return Orphans(
            turns=await self._by_session(running),
            entries=await self._by_session(in_flight),
            cancel_marks={str(sid): str(m) for sid, m in await self._conn.execute(marks)},
            holds={str(sid) for sid in await self._conn.scalars(held)},
            processes=sorted(int(pgid) for pgid in await self._conn.scalars(processes)),
            stuck={str(sid) for sid in await self._conn.scalars(stuck)},
        )

    async def _by_session(self, stmt: Select[Any]) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}
        for session_id, row_id in await self._conn.execute(stmt):
            found.setdefault(session_id, []).append(row_id)
        return found

    async def eligible_sessions(self) -> list[str]:
        """Sessions whose queue may run now by the durable rules (promptable, no clarification,
        auto-run not OFF, a visible entry): the start-up sweep drains them (Q9/M6)."""
        has_entries = select(qe.c.id).where(
            qe.c.session_id == sessions.c.id, qe.c.in_flight == false()
        )
        paused = select(queue_session_state.c.session_id).where(
            queue_session_state.c.session_id == sessions.c.id,
            queue_session_state.c.auto_run == false(),
        )
        asked = select(clarifications.c.id).where(clarifications.c.session_id == sessions.c.id)
        stmt = select(sessions.c.id).where(
            sessions.c.state.in_([s.value for s in PROMPTABLE]),
            has_entries.exists(),
            ~paused.exists(),
            ~asked.exists(),
        )
        return sorted(str(sid) for sid in await self._conn.scalars(stmt))

    # -- agent process groups (M6) ------------------------------------------------------------
    async def record_process(
        self, host: str, pgid: int, instance: int, session_id: str | None
    ) -> None:
        """An agent process group ``instance`` runs on ``host`` (M6 kills it after a crash)."""
        await self.forget_process(host, pgid)  # a reused id: ours now
        await self._conn.execute(
            agent_processes.insert().values(
                host=host, pgid=pgid, instance=instance, session_id=session_id, started_at=utcnow()
            )
        )

    async def forget_process(self, host: str, pgid: int) -> None:
        await self._conn.execute(
            delete(agent_processes).where(
                agent_processes.c.host == host, agent_processes.c.pgid == pgid
            )
        )

    async def process_owners(self, session_id: str) -> set[int]:
        """The instances that run an agent process of the session (A8: where to close it)."""
        stmt = select(agent_processes.c.instance).where(agent_processes.c.session_id == session_id)
        return {int(instance) for instance in await self._conn.scalars(stmt)}
