"""``SqlStore``: the :class:`~turnqueue.store.protocol.Store` on SQLite or PostgreSQL.

Transactions (the hazards live here):

* ``transaction()`` on SQLite holds ``self._write_lock`` (one ``asyncio.Lock``) from before
  ``BEGIN IMMEDIATE`` until after COMMIT/ROLLBACK, so the process has one writer at a time and
  concurrent tasks queue instead of failing with "database is locked". Its statements run on the
  store's writer thread (one connection, one hop per statement; its hazards are in
  ``turnqueue.store.conn``); reads use aiosqlite connections of the engine (WAL snapshots).
  On PostgreSQL there is no process lock: serialisation is the ``FOR UPDATE`` lock row taken by
  :meth:`SqlTx.lock`.
* ``after_commit`` callbacks run only after a successful COMMIT, *after* the writer lock and the
  connection were released, so a callback may itself open a transaction.
* Nested ``transaction()`` calls from the same task are not supported (on SQLite they deadlock
  on the writer lock).
* ``SessionView.queued`` is the lock row's ``queued`` column, kept by database triggers on
  ``queue_entries`` (migration 0004) in the same statement as the entry change: no store code
  writes it, and a migration that recreates ``queue_entries`` must recreate the triggers.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from sqlalchemy import Select, func, literal, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from turnqueue.domain import Session, Task, Turn
from turnqueue.errors import StoreError
from turnqueue.settings import Settings
from turnqueue.store.conn import AsyncConn, WriterConn, WriterThread, finish
from turnqueue.store.engine import (
    create_engine,
    create_engine_for_url,
    create_sqlite_writer_engine,
)
from turnqueue.store.notify import CHANNEL
from turnqueue.store.protocol import Store, Tx
from turnqueue.store.rows import select_sessions, session_from, task_from, turn_from
from turnqueue.store.tables import sessions, tasks, turns
from turnqueue.store.tx import SqlTx

__all__ = ["SqlStore", "SqlTx", "open_store"]

MAX_PAGE = 200


class SqlStore:
    def __init__(self, engine: AsyncEngine, *, timeout: float = 30.0) -> None:
        self._engine = engine
        self.dialect = engine.dialect.name
        self._sqlite = self.dialect == "sqlite"
        self._write_lock = asyncio.Lock()
        self._writer: WriterThread | None = None
        self._lease_engine: AsyncEngine | None = None
        url = engine.url.render_as_string(hide_password=False)
        if self._sqlite:
            self._writer = WriterThread(create_sqlite_writer_engine(url, timeout=timeout))
        else:
            # Hazard: a heartbeat waiting behind request traffic for a pooled connection would
            # let the others declare this busy instance dead (M6). The lease has its own.
            self._lease_engine = create_engine_for_url(url, pool_size=1, timeout=timeout)

    @property
    def engine(self) -> AsyncEngine:
        return self._engine

    @property
    def shared(self) -> bool:
        """Whether several server processes may share this database (PostgreSQL, M4)."""
        return not self._sqlite

    @property
    def url(self) -> str:
        return self._engine.url.render_as_string(hide_password=False)

    async def notify(self, payloads: Sequence[str]) -> None:
        """Send runtime notifications now, in order (PostgreSQL; a no-op on SQLite)."""
        if self._sqlite or not payloads:
            return
        async with self._engine.connect() as conn:
            for payload in payloads:
                await conn.execute(select(func.pg_notify(CHANNEL, payload)))
            await conn.commit()

    async def ping(self) -> None:
        """Readiness: one round trip to the database."""
        async with self._engine.connect() as conn:
            await conn.execute(select(literal(1)))

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[SqlTx]:
        writing = self._begin(write=True) if self._writer is None else self._write(self._writer)
        async with writing as tx:
            yield tx
            # NOTIFY inside the transaction: PostgreSQL delivers it at COMMIT, never on ROLLBACK.
            await tx.flush_notifications()
        # Only reached when the block and COMMIT succeeded; runs outside the writer lock.
        await tx.run_after_commit()

    @contextlib.asynccontextmanager
    async def _write(self, writer: WriterThread) -> AsyncIterator[SqlTx]:
        """SQLite: a write transaction on the writer thread (see ``turnqueue.store.conn``)."""
        if writer.closed:
            raise StoreError("the store is closed")
        async with self._write_lock:
            try:
                try:
                    yield SqlTx(WriterConn(writer), pg=False)
                except BaseException:
                    # Queued before the lock is released: it runs before the next transaction's
                    # statements even if this task is cancelled again while waiting for it.
                    await writer.call(partial(finish, commit=False))
                    raise
                await writer.call(partial(finish, commit=True))
            except SQLAlchemyError as exc:
                raise StoreError(f"database error: {exc}") from exc

    @contextlib.asynccontextmanager
    async def read(self) -> AsyncIterator[SqlTx]:
        async with self._begin(write=False) as tx:
            yield tx

    @contextlib.asynccontextmanager
    async def lease(self) -> AsyncIterator[SqlTx]:
        if self._lease_engine is None:
            async with self.transaction() as tx:
                yield tx
            return
        async with self._begin(write=True, engine=self._lease_engine) as tx:
            yield tx

    @contextlib.asynccontextmanager
    async def _begin(
        self, *, write: bool, engine: AsyncEngine | None = None
    ) -> AsyncIterator[SqlTx]:
        try:
            async with (engine or self._engine).connect() as conn:
                await self._configure(conn, write=write)
                async with conn.begin():
                    # An exception from the caller's block propagates through here and rolls
                    # back; the ``after_commit`` callbacks are then dropped with the SqlTx.
                    yield SqlTx(AsyncConn(conn), pg=not self._sqlite)
        except SQLAlchemyError as exc:
            raise StoreError(f"database error: {exc}") from exc

    async def _configure(self, conn: AsyncConnection, *, write: bool) -> None:
        # SQLite writes never come here (``_write``); its reads keep the deferred BEGIN.
        if not self._sqlite and not write:
            await conn.execution_options(
                isolation_level="REPEATABLE READ", postgresql_readonly=True
            )

    async def close(self) -> None:
        if self._writer is not None:
            await self._writer.close()
        if self._lease_engine is not None:
            await self._lease_engine.dispose()
        await self._engine.dispose()

    # -- reads used by queries ----------------------------------------------------------------
    async def _all(self, stmt: Select[Any]) -> Sequence[Any]:
        async with self._engine.connect() as conn:
            rows: Sequence[Any] = (await conn.execute(stmt)).all()
            return rows

    async def list_tasks(self, owner: str, first: int) -> list[Task]:
        stmt = (
            select(tasks)
            .where(tasks.c.owner == owner)
            .order_by(tasks.c.created_at.desc(), tasks.c.id)
            .limit(max(0, min(first, MAX_PAGE)))
        )
        return [task_from(row) for row in await self._all(stmt)]

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

    async def last_turns(self, session_id: str, last: int) -> list[Turn]:
        stmt = (
            select(turns)
            .where(turns.c.session_id == session_id)
            .order_by(turns.c.seq.desc())
            .limit(max(0, min(last, MAX_PAGE)))
        )
        return [turn_from(row) for row in reversed(await self._all(stmt))]

    async def current_turn(self, session_id: str) -> Turn | None:
        stmt = (
            select(turns)
            .where(turns.c.session_id == session_id)
            .order_by(turns.c.seq.desc())
            .limit(1)
        )
        rows = await self._all(stmt)
        return turn_from(rows[0]) if rows else None


async def open_store(settings: Settings) -> SqlStore:
    """Create the engine and the store. It does not migrate (see ``turnqueue.store.migrate``)."""
    return SqlStore(create_engine(settings), timeout=settings.db_timeout)


if TYPE_CHECKING:  # mypy proves the classes implement the protocols structurally

    def _implements(store: SqlStore, tx: SqlTx) -> tuple[Store, Tx]:
        return store, tx
