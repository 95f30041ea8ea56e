"""SQLite's connections, used on the event loop (why, and the hazards: ``store/sqlite.py``): the
write connection, the read connections, a transaction's :func:`begin` (the one wait: for a busy
file, with ``asyncio.sleep``) and :func:`finish`, and :class:`SqliteConn`."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from sqlalchemy import Executable
from sqlalchemy.engine import Dialect, Engine

from turnqueue.errors import StoreError
from turnqueue.store.statement import Buffered, Conn, Params, Record, Statement, only, plan_for

T = TypeVar("T")


class SqliteConnections:
    """The store's ``sqlite3`` connections, made by ``engine`` (pysqlite, with the store's
    pragmas; it pools none: waiting for a pool's limit would block the loop). The one write
    connection is opened by the first write; the read connections are one per read transaction
    in flight (most never suspend, so one or two), kept for the next, at most :data:`MOST`:
    a read beyond them waits here without blocking the loop."""

    #: read transactions in flight at most (each holds a connection while its body suspends)
    MOST = 32

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self.dialect = engine.dialect
        self._writer: sqlite3.Connection | None = None
        #: pooled connections (their driver connection inside): every one made, and idle readers
        self._open: list[Any] = []
        self._idle: list[Any] = []
        self._slots = asyncio.Semaphore(self.MOST)
        self.closed = False

    def _connect(self) -> Any:
        if self.closed:
            raise StoreError("the store is closed")
        pooled: Any = self._engine.raw_connection()
        self._open.append(pooled)
        # Never wait inside a statement (it would block the loop): only ``begin`` waits.
        pooled.driver_connection.execute("PRAGMA busy_timeout=0")
        return pooled

    def writer(self) -> sqlite3.Connection:
        if self._writer is None or self.closed:
            self._writer = self._connect().driver_connection
        return self._writer

    async def acquire(self) -> Any:
        await self._slots.acquire()
        try:
            if self._idle and not self.closed:
                return self._idle.pop()
            return self._connect()
        except BaseException:
            self._slots.release()
            raise

    def release(self, pooled: Any) -> None:
        if not self.closed:
            self._idle.append(pooled)
        self._slots.release()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for pooled in self._open:
            pooled.close()
        self._open.clear()
        self._idle.clear()
        self._engine.dispose()


def finish(conn: sqlite3.Connection, *, commit: bool) -> None:
    """End the write connection's transaction (if one is open): COMMIT, or ROLLBACK. A failed
    COMMIT is rolled back before its error is raised, so the connection is clean again."""
    if not conn.in_transaction:
        return
    if not commit:
        conn.execute("ROLLBACK")
        return
    try:
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


class SqliteConn(Conn):
    """:class:`~turnqueue.store.statement.Conn` of one transaction: statements run synchronously
    on the event loop."""

    __slots__ = ("_conn", "_dialect")

    def __init__(self, conn: sqlite3.Connection, dialect: Dialect) -> None:
        self._conn = conn
        self._dialect = dialect

    async def execute(self, statement: Statement | Executable, params: Params = None) -> Buffered:
        plan = plan_for(statement, self._dialect, params)
        cursor = self._conn.execute(plan.sql, plan.args(params))
        if plan.record is None:
            return Buffered([], cursor.rowcount)
        rows = plan.rows(cursor.fetchall())
        return Buffered(rows, len(rows))

    # ``one`` and ``maybe`` as ``Conn``'s, without a ``Buffered`` and a nested coroutine:
    # they are on every write's path (the lock, the revision bumps).
    def _row(self, statement: Statement | Executable, params: Params) -> Record | None:
        plan = plan_for(statement, self._dialect, params)
        cursor = self._conn.execute(plan.sql, plan.args(params))
        return only(plan.rows(cursor.fetchall())) if plan.record is not None else None

    async def one(self, statement: Statement | Executable, params: Params, key: str) -> Record:
        row = self._row(statement, params)
        if row is None:
            raise KeyError(key)
        return row

    async def maybe(
        self, statement: Statement | Executable, params: Params, build: Callable[[Record], T]
    ) -> T | None:
        row = self._row(statement, params)
        return build(row) if row is not None else None

    def execute_many(self, statement: Statement, many: Sequence[Params]) -> None:
        """One prepared statement run for each parameter set (its rows, if any, not read)."""
        if many:
            plan = statement.plan(self._dialect)
            self._conn.executemany(plan.sql, [plan.args(params) for params in many])


#: BEGIN a write: take the write lock now, so the transaction's statements never wait for it.
WRITE = ("BEGIN IMMEDIATE",)
#: BEGIN a read and take its snapshot now (a read of the schema).
READ = ("BEGIN", "SELECT 1 FROM sqlite_schema LIMIT 1")


async def begin(conn: sqlite3.Connection, statements: tuple[str, ...], timeout: float) -> None:
    """Run ``statements`` (:data:`WRITE` or :data:`READ`), waiting without blocking the loop
    while SQLite answers BUSY (another process holds the file), rolled back between attempts,
    up to ``timeout``: the transaction's later statements then never wait."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    delay = 0.001
    while True:
        try:
            for statement in statements:
                conn.execute(statement).fetchall()
            return
        except sqlite3.OperationalError as exc:
            finish(conn, commit=False)
            if exc.sqlite_errorcode & 0xFF != sqlite3.SQLITE_BUSY or loop.time() >= deadline:
                raise
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.05)
