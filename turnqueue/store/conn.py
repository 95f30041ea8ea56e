r"""How :class:`~turnqueue.store.tx.SqlTx` reaches the database: :class:`Conn`.

Every statement returns a :class:`Buffered` result (rows already fetched), whichever way it ran:

* :class:`DriverConn` — PostgreSQL: the asyncpg connection itself; statements run as
  precompiled :class:`~turnqueue.store.statement.Plan`\ s (no SQLAlchemy execution; see
  ``turnqueue.store.statement`` for why).
* :class:`SqliteConn` — SQLite write transactions: the ``sqlite3`` connection of
  :class:`SqliteWriter`, statements run synchronously on the event loop (why, and its hazards:
  ``turnqueue.store.sql``).
* :class:`AsyncConn` — an SQLAlchemy ``AsyncConnection`` (SQLite reads on aiosqlite).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

from sqlalchemy import Executable
from sqlalchemy.engine import Dialect, Engine
from sqlalchemy.exc import MultipleResultsFound, NoResultFound
from sqlalchemy.ext.asyncio import AsyncConnection

from turnqueue.errors import StoreError
from turnqueue.store.statement import Plan, Statement, plan_for

#: A result row: a :class:`~turnqueue.store.statement.Record` or SQLAlchemy's ``Row``; both
#: offer ``row[0]``, ``row.name`` and ``row._mapping["name"]``.
AnyRow = Any
Params = Mapping[str, Any] | None


class Buffered:
    """A statement's whole result, fetched where it ran: rows and ``rowcount``."""

    __slots__ = ("_rows", "rowcount")

    def __init__(self, rows: list[AnyRow], rowcount: int) -> None:
        self._rows = rows
        self.rowcount = rowcount

    @classmethod
    def of(cls, result: Any) -> Buffered:
        return cls(result.all() if result.returns_rows else [], result.rowcount)

    def __iter__(self) -> Iterator[AnyRow]:
        return iter(self._rows)

    def all(self) -> list[AnyRow]:
        return self._rows

    def one_or_none(self) -> AnyRow | None:
        if len(self._rows) > 1:
            raise MultipleResultsFound("more than one row where one was expected")
        return self._rows[0] if self._rows else None

    def one(self) -> AnyRow:
        row = self.one_or_none()
        if row is None:
            raise NoResultFound("no row where one was expected")
        return row

    def scalar(self) -> Any:
        return self._rows[0][0] if self._rows else None

    def scalar_one_or_none(self) -> Any:
        row = self.one_or_none()
        return row[0] if row is not None else None

    def scalars(self) -> list[Any]:
        return [row[0] for row in self._rows]


class Conn(Protocol):
    async def execute(
        self, statement: Statement | Executable, params: Params = None
    ) -> Buffered: ...

    async def scalar(self, statement: Statement | Executable, params: Params = None) -> Any: ...

    async def scalars(
        self, statement: Statement | Executable, params: Params = None
    ) -> list[Any]: ...


class _Shortcuts:
    """``scalar`` and ``scalars`` of a :class:`Conn`, from its ``execute``."""

    __slots__ = ()

    async def execute(self, statement: Statement | Executable, params: Params = None) -> Buffered:
        raise NotImplementedError

    async def scalar(self, statement: Statement | Executable, params: Params = None) -> Any:
        return (await self.execute(statement, params)).scalar()

    async def scalars(self, statement: Statement | Executable, params: Params = None) -> list[Any]:
        return (await self.execute(statement, params)).scalars()


class AsyncConn(_Shortcuts):
    """:class:`Conn` over an SQLAlchemy ``AsyncConnection`` (its drivers buffer the rows)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn

    async def execute(self, statement: Statement | Executable, params: Params = None) -> Buffered:
        clause = statement.clause if isinstance(statement, Statement) else statement
        return Buffered.of(await self._conn.execute(clause, params))


def _rowcount(status: str) -> int:
    """Rows affected, from a PostgreSQL command tag (``UPDATE 3``, ``INSERT 0 1``)."""
    last = status.rpartition(" ")[2]
    return int(last) if last.isdigit() else -1


class DriverConn(_Shortcuts):
    """:class:`Conn` on an asyncpg connection, inside a transaction its owner started."""

    __slots__ = ("_dialect", "_driver")

    def __init__(self, driver: Any, dialect: Dialect) -> None:
        self._driver = driver
        self._dialect = dialect

    async def execute(self, statement: Statement | Executable, params: Params = None) -> Buffered:
        plan = plan_for(statement, self._dialect, params)
        args = plan.args(params)
        if plan.record is None:
            return Buffered([], _rowcount(await self._driver.execute(plan.sql, *args)))
        rows = plan.rows(await self._driver.fetch(plan.sql, *args))
        return Buffered(rows, len(rows))


class SqliteWriter:
    """SQLite's one write connection (``sqlite3``), used from the event loop. Owned and closed
    by ``SqlStore``; opened by the first write.

    ``engine`` (pysqlite) makes the connection with the store's pragmas and driver settings;
    statements run on the ``sqlite3`` connection directly (:func:`run_sqlite`)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self.dialect = engine.dialect
        self._pooled: Any = None
        self.closed = False

    def connection(self) -> sqlite3.Connection:
        if self.closed:
            raise StoreError("the store is closed")
        if self._pooled is None:
            self._pooled = self._engine.raw_connection()
            # Never wait inside a statement (it would block the event loop): the store waits
            # for the write lock itself, between attempts at BEGIN IMMEDIATE (see store.sql).
            self._pooled.driver_connection.execute("PRAGMA busy_timeout=0")
        conn: sqlite3.Connection = self._pooled.driver_connection
        return conn

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self._pooled is not None:
            self._pooled.close()
        self._engine.dispose()


def run_sqlite(conn: sqlite3.Connection, plan: Plan, params: Params) -> Buffered:
    """One statement on the write connection, its rows fetched."""
    cursor = conn.execute(plan.sql, plan.args(params))
    if plan.record is None:
        return Buffered([], cursor.rowcount)
    rows = plan.rows(cursor.fetchall())
    return Buffered(rows, len(rows))


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


class SqliteConn(_Shortcuts):
    """:class:`Conn` of one SQLite write transaction: statements run synchronously on the
    event loop (see ``turnqueue.store.sql`` for why and for the hazards)."""

    __slots__ = ("_conn", "_dialect")

    def __init__(self, conn: sqlite3.Connection, dialect: Dialect) -> None:
        self._conn = conn
        self._dialect = dialect

    async def execute(self, statement: Statement | Executable, params: Params = None) -> Buffered:
        return run_sqlite(self._conn, plan_for(statement, self._dialect, params), params)
