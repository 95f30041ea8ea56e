"""``SqlStore``: the :class:`~turnqueue.store.protocol.Store` on SQLite or PostgreSQL.

Transactions (the hazards live here):

* ``transaction()`` on SQLite holds ``self._write_lock`` (one ``asyncio.Lock``) from before
  ``BEGIN IMMEDIATE`` until after COMMIT/ROLLBACK, so the process has one writer at a time and
  concurrent tasks queue instead of failing with "database is locked". Reads use aiosqlite
  connections of the engine (WAL snapshots, in parallel with the writer). On PostgreSQL there
  is no process lock: serialisation is the ``FOR UPDATE`` lock row taken by :meth:`SqlTx.lock`.
* SQLite writes run **synchronously on the event loop**, on one ``sqlite3`` connection
  (``SqliteWriter``). A write statement takes microseconds (WAL, ``synchronous=NORMAL``: a
  COMMIT does not wait for the disk), less than handing it to a thread and back: bench P1 ran
  0.21× raw ``sqlite3`` with a writer thread (one hop per statement), and 0.59× with one hop
  per transaction. Writes are serialised by the lock anyway, so a thread bought no
  concurrency. The hazards that come with it, and how each is handled:

  - *Waiting for the file lock would block the loop*: the connection's busy timeout is 0, and
    ``BEGIN IMMEDIATE`` is retried with ``asyncio.sleep`` back-off until the store's timeout
    (another process, e.g. ``turnqueue migrate``, holding the lock). Once it succeeded the
    transaction holds the write lock, and WAL writes and COMMIT need no other lock.
  - *Starving other tasks*: statements never suspend, so a task writing in a loop would never
    give the loop away; each write transaction yields once before it begins.
  - *Cancellation*: a statement cannot be cancelled half-way (it is not awaited); a task
    cancelled between statements rolls back at once.
  - A WAL checkpoint (every ~1,000 pages written, by the committing connection) runs inside a
    COMMIT: a few milliseconds of disk I/O on the loop, now and then.
* PostgreSQL transactions run on asyncpg directly (``DriverConn``): an asyncpg pool (opened by
  the first transaction) and asyncpg's transaction blocks. SQLAlchemy's pool is not used on
  PostgreSQL: every checkout and return crossed a greenlet (about 14% of the CPU of a turn,
  bench P2), and a connection whose BEGIN, COMMIT or ROLLBACK failed had to be invalidated by
  hand. asyncpg's pool rolls back or closes such a connection on release.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

import asyncpg
from sqlalchemy import Select, func, literal, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from turnqueue.domain import Session, Task, Turn
from turnqueue.errors import StoreError
from turnqueue.settings import Settings
from turnqueue.store import pages
from turnqueue.store.conn import AsyncConn, DriverConn, SqliteConn, SqliteWriter, finish
from turnqueue.store.engine import create_engine, create_sqlite_writer_engine
from turnqueue.store.notify import asyncpg_dsn
from turnqueue.store.protocol import Page, SessionKey, Store, TaskKey, TurnKey, Tx, Window
from turnqueue.store.rows import select_sessions, session_from, task_from, turn_from
from turnqueue.store.tables import queue_entries, sessions, tasks, turns
from turnqueue.store.tx import SqlTx

__all__ = ["SqlStore", "SqlTx", "open_store"]

MAX_PAGE = 200
#: What the drivers raise when the database fails (SQLAlchemy's are wrapped already).
DATABASE_ERRORS = (SQLAlchemyError, sqlite3.Error, asyncpg.PostgresError, asyncpg.InterfaceError)


async def _keep_session(_connection: Any) -> None:
    """The pool's reset on release: asyncpg has already rolled back any transaction left open
    (its ``Connection._reset``); nothing of ours changes session state, so asyncpg's default
    reset query (``RESET ALL``, ``UNLISTEN *``, …) would be a wasted round trip per
    transaction."""


class SqlStore:
    def __init__(self, engine: AsyncEngine, *, timeout: float = 30.0, pool_size: int = 5) -> None:
        self._engine = engine
        self.dialect = engine.dialect.name
        self._sqlite = self.dialect == "sqlite"
        self._write_lock = asyncio.Lock()
        self._timeout = timeout
        self._pool_size = pool_size
        self._writer: SqliteWriter | None = None
        # PostgreSQL: asyncpg pools, opened by the first transaction; the lease has its own.
        self._pools: dict[bool, Any] = {}
        self._pools_lock = asyncio.Lock()
        self._closed = False
        if self._sqlite:
            url = engine.url.render_as_string(hide_password=False)
            self._writer = SqliteWriter(create_sqlite_writer_engine(url, timeout=timeout))

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
        async with self.transaction() as tx:  # one statement for all (``SqlTx.notify``)
            for payload in payloads:
                tx.notify(payload)

    async def ping(self) -> None:
        """Readiness: one round trip to the database."""
        if self._sqlite:
            async with self._engine.connect() as conn:
                await conn.execute(select(literal(1)))
            return
        try:
            async with (await self._pool(lease=False)).acquire() as driver:
                await driver.fetchval("SELECT 1")
        except (*DATABASE_ERRORS, OSError) as exc:
            raise StoreError(f"database error: {exc}") from exc

    def transaction(self) -> AbstractAsyncContextManager[SqlTx]:
        if self._writer is not None:
            return _SqliteWrite(self._writer, self._write_lock, self._timeout)
        return self._pg_write()

    @contextlib.asynccontextmanager
    async def _pg_write(self) -> AsyncIterator[SqlTx]:
        async with self._pg() as tx:
            yield tx
            # NOTIFY inside the transaction: PostgreSQL delivers it at COMMIT, never on ROLLBACK.
            await tx.flush_notifications()
        # Only reached when the block and COMMIT succeeded.
        await tx.run_after_commit()

    @contextlib.asynccontextmanager
    async def read(self) -> AsyncIterator[SqlTx]:
        reading = self._sqlite_read() if self._sqlite else self._pg(read_only=True)
        async with reading as tx:
            yield tx

    @contextlib.asynccontextmanager
    async def lease(self) -> AsyncIterator[SqlTx]:
        if self._sqlite:
            async with self.transaction() as tx:
                yield tx
            return
        async with self._pg(lease=True) as tx:
            yield tx

    @contextlib.asynccontextmanager
    async def _sqlite_read(self) -> AsyncIterator[SqlTx]:
        """SQLite: a read transaction (deferred BEGIN: a WAL snapshot) on aiosqlite."""
        try:
            async with self._engine.connect() as conn, conn.begin():
                yield SqlTx(AsyncConn(conn), pg=False)
        except DATABASE_ERRORS as exc:
            raise StoreError(f"database error: {exc}") from exc

    async def _pool(self, *, lease: bool) -> Any:
        """The asyncpg pool (``lease``: the instance lease's own one-connection pool).

        Hazard: a heartbeat waiting behind request traffic for a pooled connection would let
        the other instances declare this busy one dead (M6), hence the lease's own pool."""
        pool = self._pools.get(lease)
        if pool is None:
            async with self._pools_lock:  # one pool even when the first calls race
                if self._closed:
                    raise StoreError("the store is closed")
                pool = self._pools.get(lease)
                if pool is None:
                    pool = self._pools[lease] = await asyncpg.create_pool(
                        asyncpg_dsn(self.url),
                        min_size=0,
                        max_size=1 if lease else self._pool_size,
                        max_inactive_connection_lifetime=300,
                        reset=_keep_session,
                        timeout=self._timeout,
                        command_timeout=self._timeout,
                    )
        return pool

    @contextlib.asynccontextmanager
    async def _pg(self, *, lease: bool = False, read_only: bool = False) -> AsyncIterator[SqlTx]:
        """PostgreSQL: a transaction on a pooled asyncpg connection; reads are REPEATABLE READ
        READ ONLY (one snapshot), writes READ COMMITTED. asyncpg's transaction block rolls
        back on any exception; a connection released inside a transaction anyway (its
        ROLLBACK failed) is rolled back or closed by the pool before anyone else gets it."""
        try:
            async with (await self._pool(lease=lease)).acquire() as driver:
                isolation = "repeatable_read" if read_only else "read_committed"
                async with driver.transaction(isolation=isolation, readonly=read_only):
                    # An exception from the caller's block rolls back; the
                    # ``after_commit`` callbacks are then dropped with the SqlTx.
                    yield SqlTx(DriverConn(driver, self._engine.dialect), pg=True)
        except (*DATABASE_ERRORS, OSError) as exc:
            raise StoreError(f"database error: {exc}") from exc

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        async with self._pools_lock:
            self._closed = True
            pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            try:
                await asyncio.wait_for(pool.close(), self._timeout)
            except TimeoutError:  # a connection still checked out: close it anyway
                pool.terminate()
        await self._engine.dispose()

    async def queue_depth(self) -> tuple[int, int]:
        """(visible, in flight) entries over every session: the metrics' gauges."""
        stmt = select(queue_entries.c.in_flight, func.count()).group_by(queue_entries.c.in_flight)
        counts = {bool(flag): int(n) for flag, n in await self._all(stmt)}
        return counts.get(False, 0), counts.get(True, 0)

    # -- reads used by queries ----------------------------------------------------------------
    async def _all(self, stmt: Select[Any]) -> Sequence[Any]:
        async with self.read() as tx:
            return await tx.fetch(stmt)

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

    async def tasks_page(self, owner: str, window: Window[TaskKey]) -> Page[TaskKey, Task]:
        async with self.read() as tx:
            return await pages.tasks_page(tx, owner, window)

    async def sessions_page(
        self, task_id: str, window: Window[SessionKey]
    ) -> Page[SessionKey, Session]:
        async with self.read() as tx:
            return await pages.sessions_page(tx, task_id, window)

    async def turns_page(self, session_id: str, window: Window[TurnKey]) -> Page[TurnKey, Turn]:
        async with self.read() as tx:
            return await pages.turns_page(tx, session_id, window)


class _SqliteWrite:
    """``SqlStore.transaction()`` on SQLite: a write transaction on the event loop (see the
    hazards above). A class rather than a generator context manager: it is the whole
    overhead of a write besides its statements (bench P1)."""

    __slots__ = ("_conn", "_lock", "_timeout", "_tx", "_writer")

    def __init__(self, writer: SqliteWriter, lock: asyncio.Lock, timeout: float) -> None:
        self._writer = writer
        self._lock = lock
        self._timeout = timeout

    async def __aenter__(self) -> SqlTx:
        await asyncio.sleep(0)  # statements never suspend: give the loop away once per write
        await self._lock.acquire()
        try:
            self._conn = conn = self._writer.connection()
            await self._begin_immediate(conn)
        except BaseException as exc:
            self._lock.release()
            if isinstance(exc, DATABASE_ERRORS):
                raise StoreError(f"database error: {exc}") from exc
            raise
        self._tx = SqlTx(SqliteConn(conn, self._writer.dialect), pg=False)
        return self._tx

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, _: object
    ) -> None:
        try:
            finish(self._conn, commit=kind is None)
        except DATABASE_ERRORS as exc:
            raise StoreError(f"database error: {exc}") from exc
        finally:
            self._lock.release()
        if isinstance(error, DATABASE_ERRORS):  # a statement of the block failed
            raise StoreError(f"database error: {error}") from error
        if kind is None:  # committed; callbacks run outside the writer lock
            await self._tx.run_after_commit()

    async def _begin_immediate(self, conn: sqlite3.Connection) -> None:
        """BEGIN IMMEDIATE, waiting (without blocking the loop) while another process writes."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout
        delay = 0.001
        while True:
            try:
                conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                busy = exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY
                if not busy or loop.time() >= deadline:
                    raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.05)


async def open_store(settings: Settings) -> SqlStore:
    """Create the engine and the store. It does not migrate (see ``turnqueue.store.migrate``)."""
    return SqlStore(
        create_engine(settings), timeout=settings.db_timeout, pool_size=settings.db_pool_size
    )


if TYPE_CHECKING:  # mypy proves the classes implement the protocols structurally

    def _implements(store: SqlStore, tx: SqlTx) -> tuple[Store, Tx]:
        return store, tx
