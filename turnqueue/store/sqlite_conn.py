"""SQLite's connections as ``SqliteStore`` (``turnqueue.store.sqlite``) uses them, on the event
loop: the one write connection (:class:`SqliteWriter`), the read connections
(:class:`SqliteReaders`), a transaction's begin (:func:`begin`, waiting for a busy file without
blocking the loop) and end (:func:`finish`), and :class:`SqliteConn`, the
:class:`~turnqueue.store.statement.Conn` whose statements run synchronously on the loop. Why on
the loop, and the hazards that come with it: ``turnqueue.store.sqlite``.

Every connection's busy timeout is 0: a statement never waits inside SQLite (it would block the
loop); only :func:`begin` waits, with ``asyncio.sleep``.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from sqlalchemy import Executable
from sqlalchemy.engine import Dialect, Engine

from turnqueue.errors import StoreError
from turnqueue.store.statement import (
    Buffered,
    CompiledSql,
    Conn,
    Params,
    Record,
    Statement,
    only,
    plan_for,
)

T = TypeVar("T")


class SqliteWriter:
    """SQLite's one write connection (``sqlite3``), used from the event loop. Owned and closed
    by ``SqliteStore``; opened by the first write.

    ``engine`` (pysqlite) makes the connection with the store's pragmas and driver settings;
    statements run on the ``sqlite3`` connection directly (:func:`run_sqlite`)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self.dialect = engine.dialect
        self._pooled: Any = None
        self._conn: sqlite3.Connection | None = None
        self.closed = False

    def connection(self) -> sqlite3.Connection:
        if self.closed:
            raise StoreError("the store is closed")
        if self._conn is None:
            self._pooled = self._engine.raw_connection()
            self._conn = self._pooled.driver_connection
            assert self._conn is not None
            # Never wait inside a statement (it would block the event loop): the store waits
            # for the write lock itself, between attempts at BEGIN IMMEDIATE.
            self._conn.execute("PRAGMA busy_timeout=0")
        return self._conn

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self._pooled is not None:
            self._pooled.close()
        self._engine.dispose()


class SqliteReaders:
    """SQLite's read connections (``sqlite3``), used from the event loop; one per read
    transaction in flight (most never suspend, so one or two), kept for the next. Owned and
    closed by ``SqliteStore``. The engine only makes them (it pools none: a pool's limit would
    be waited for on the loop); at most ``MOST`` are open, and a read beyond them waits here
    without blocking the loop."""

    #: read transactions in flight at most (each holds a connection while its body suspends)
    MOST = 32

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self.dialect = engine.dialect
        self._idle: list[Any] = []  # pooled connections (their driver connection inside)
        self._slots = asyncio.Semaphore(self.MOST)
        self._open: list[Any] = []
        self.closed = False

    async def acquire(self) -> Any:
        await self._slots.acquire()
        if self.closed:
            self._slots.release()
            raise StoreError("the store is closed")
        if self._idle:
            return self._idle.pop()
        try:
            pooled = self._engine.raw_connection()
        except BaseException:
            self._slots.release()
            raise
        conn = pooled.driver_connection
        assert conn is not None
        conn.execute("PRAGMA busy_timeout=0")  # never wait inside a statement
        self._open.append(pooled)
        return pooled

    def release(self, pooled: Any) -> None:
        if not self.closed:
            self._idle.append(pooled)
        self._slots.release()

    def close(self) -> None:
        self.closed = True
        for pooled in self._open:
            pooled.close()
        self._open.clear()
        self._idle.clear()


def run_sqlite(conn: sqlite3.Connection, plan: CompiledSql, params: Params) -> Buffered:
    """One statement on the write connection, its rows fetched."""
    cursor = conn.execute(plan.sql, plan.args(params))
    if plan.record is None:
        return Buffered([], cursor.rowcount)
    rows = plan.rows(cursor.fetchall())
    return Buffered(rows, len(rows))


def rows_sqlite(conn: sqlite3.Connection, plan: CompiledSql, params: Params) -> list[Record]:
    """The rows of one statement on the write connection (``run_sqlite`` without the
    :class:`Buffered` around them, for the callers that read one row)."""
    cursor = conn.execute(plan.sql, plan.args(params))
    return plan.rows(cursor.fetchall()) if plan.record is not None else []


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
    """:class:`~turnqueue.store.statement.Conn` of one write transaction: statements run
    synchronously on the event loop (see above for why and for the hazards)."""

    __slots__ = ("_conn", "_dialect")

    def __init__(self, conn: sqlite3.Connection, dialect: Dialect) -> None:
        self._conn = conn
        self._dialect = dialect

    async def execute(self, statement: Statement | Executable, params: Params = None) -> Buffered:
        return run_sqlite(self._conn, plan_for(statement, self._dialect, params), params)

    # ``one`` and ``maybe`` as ``Conn``'s, without a ``Buffered`` and a nested coroutine:
    # they are on every write's path (the lock, the revision bumps).
    async def one(self, statement: Statement | Executable, params: Params, key: str) -> Record:
        row = only(rows_sqlite(self._conn, plan_for(statement, self._dialect, params), params))
        if row is None:
            raise KeyError(key)
        return row

    async def maybe(
        self, statement: Statement | Executable, params: Params, build: Callable[[Record], T]
    ) -> T | None:
        row = only(rows_sqlite(self._conn, plan_for(statement, self._dialect, params), params))
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
