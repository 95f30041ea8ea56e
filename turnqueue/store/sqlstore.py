"""``SqlStore``: what both backends' stores share — the reads used by queries and the metrics,
each in one read transaction of the backend's own (:meth:`SqlStore.read`), and the keyset pages
(the backends: ``turnqueue.store.sql``)."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

from sqlalchemy import Select, func, select

from turnqueue.domain import Session, Task, Turn
from turnqueue.store.pages import Listing, page
from turnqueue.store.protocol import Page, SessionKey, TaskKey, TurnKey, Window
from turnqueue.store.rows import select_sessions, session_from, task_from, turn_from
from turnqueue.store.statement import Record
from turnqueue.store.tables import queue_entries, sessions, tasks, turns
from turnqueue.store.tx import SqlTx


class SqlStore:
    """The :class:`~turnqueue.store.Store` methods both backends share; the others are each
    backend's own (mypy refuses a backend that lacks one where the engine is given it)."""

    #: ``"sqlite"`` or ``"postgresql"``
    dialect: str

    def read(self) -> AbstractAsyncContextManager[SqlTx]:
        raise NotImplementedError

    # -- shared reads -------------------------------------------------------------------------
    async def queue_depth(self) -> tuple[int, int]:
        stmt = select(queue_entries.c.in_flight, func.count()).group_by(queue_entries.c.in_flight)
        counts = {bool(flag): int(n) for flag, n in await self._all(stmt)}
        return counts.get(False, 0), counts.get(True, 0)

    async def _all(self, stmt: Select[Any]) -> list[Record]:
        async with self.read() as tx:
            return await tx.fetch(stmt)

    async def sessions_of_tasks(self, task_ids: Sequence[str]) -> dict[str, list[Session]]:
        result: dict[str, list[Session]] = {task_id: [] for task_id in task_ids}
        if not task_ids:
            return result
        stmt = (
            select_sessions()
            .where(sessions.c.task_id.in_(list(task_ids)))
            .order_by(sessions.c.created_at, sessions.c.id)
        )
        for row in await self._all(stmt):
            session = session_from(row)
            result[session.task_id].append(session)
        return result

    async def sessions(self, session_ids: Sequence[str]) -> dict[str, Session]:
        if not session_ids:
            return {}
        stmt = select_sessions().where(sessions.c.id.in_(list(session_ids)))
        return {s.id: s for s in map(session_from, await self._all(stmt))}

    async def tasks(self, task_ids: Sequence[str]) -> dict[str, Task]:
        if not task_ids:
            return {}
        stmt = select(tasks).where(tasks.c.id.in_(list(task_ids)))
        return {t.id: t for t in map(task_from, await self._all(stmt))}

    async def next_turn(self, session_id: str, after_turn_id: str | None) -> Turn | None:
        stmt = select(turns).where(turns.c.session_id == session_id)
        if after_turn_id is not None:
            after = select(turns.c.seq).where(turns.c.id == after_turn_id).scalar_subquery()
            stmt = stmt.where(turns.c.seq > after)
        rows = await self._all(stmt.order_by(turns.c.seq).limit(1))
        return turn_from(rows[0]) if rows else None

    async def tasks_page(self, owner: str, window: Window[TaskKey]) -> Page[TaskKey, Task]:
        listing = Listing(
            base=select(tasks).where(tasks.c.owner == owner),
            columns=(tasks.c.created_at, tasks.c.id),
            descending=True,
            item_of=task_from,
        )
        return await self._page(listing, window)

    async def sessions_page(
        self, task_id: str, window: Window[SessionKey]
    ) -> Page[SessionKey, Session]:
        listing = Listing(
            base=select_sessions().where(sessions.c.task_id == task_id),
            columns=(sessions.c.created_at, sessions.c.id),
            descending=False,
            item_of=session_from,
        )
        return await self._page(listing, window)

    async def turns_page(self, session_id: str, window: Window[TurnKey]) -> Page[TurnKey, Turn]:
        listing = Listing(
            base=select(turns).where(turns.c.session_id == session_id),
            columns=(turns.c.seq,),
            descending=False,
            item_of=turn_from,
        )
        return await self._page(listing, window)

    async def _page(self, listing: Listing, window: Window[Any]) -> Page[Any, Any]:
        async with self.read() as tx:
            return await page(tx, listing, window)
