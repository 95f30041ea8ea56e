"""How :class:`~turnqueue.store.tx.SqlTx` reaches the database: :class:`Conn`.

Every statement returns a :class:`Buffered` result (rows already fetched), whichever way it ran:

* :class:`AsyncConn` — an ``AsyncConnection`` (PostgreSQL/asyncpg; SQLite reads on aiosqlite).
* :class:`WriterConn` — SQLite write transactions on :class:`WriterThread`, one dedicated thread
  that owns a synchronous SQLAlchemy connection (pysqlite). A statement is compiled, executed
  and fetched there in **one** thread hop; aiosqlite makes several per statement (cursor,
  execute, fetch, close) and builds the statement on the event loop (bench P1). ``Conn.run``
  runs a block of statements (a synchronous function) in one hop.

Hazards of the writer thread (see also ``turnqueue.store.sql``):

* One connection, one thread, calls run strictly in the order they were queued. A caller that is
  cancelled while its statement is queued or running does not stop it: the statement still runs,
  and the ROLLBACK its transaction queues afterwards runs after it. ``SqlStore`` queues that
  ROLLBACK (synchronously, before its first ``await``) before it releases the writer lock, so
  the next transaction's statements always come after it.
* A caller cancelled while its COMMIT is queued or running gets ``CancelledError``, but the
  COMMIT still happens and its ``after_commit`` callbacks do not run (as with aiosqlite).
* The connection autobegins (``BEGIN IMMEDIATE``, see ``turnqueue.store.engine``) on the first
  statement of a transaction, so BEGIN costs no hop of its own; COMMIT and ROLLBACK are one hop.
* ``SqlStore.close`` is the only shutdown path: it stops the thread after the calls already
  queued; a call queued after that raises ``StoreError`` instead of waiting forever.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from sqlalchemy import Executable, Row
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import MultipleResultsFound, NoResultFound
from sqlalchemy.ext.asyncio import AsyncConnection

from turnqueue.errors import StoreError

T = TypeVar("T")
#: A row of any width (``Row[Any]`` would be a one-column row to the type checker).
AnyRow = Row[*tuple[Any, ...]]
Params = Mapping[str, Any] | Sequence[Mapping[str, Any]] | None


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
    async def execute(self, statement: Executable, params: Params = None) -> Buffered: ...

    async def run(self, fn: Callable[[Connection], T]) -> T:
        """``fn`` with a synchronous connection: several statements in one thread hop (SQLite
        writes) or one greenlet switch (asyncpg). ``fn`` must only run statements."""

    async def scalar(self, statement: Executable, params: Params = None) -> Any: ...

    async def scalars(self, statement: Executable, params: Params = None) -> list[Any]: ...


class _Shortcuts:
    """``scalar`` and ``scalars`` of a :class:`Conn`, from its ``execute``."""

    __slots__ = ()

    async def execute(self, statement: Executable, params: Params = None) -> Buffered:
        raise NotImplementedError

    async def scalar(self, statement: Executable, params: Params = None) -> Any:
        return (await self.execute(statement, params)).scalar()

    async def scalars(self, statement: Executable, params: Params = None) -> list[Any]:
        return (await self.execute(statement, params)).scalars()


class AsyncConn(_Shortcuts):
    """:class:`Conn` over an ``AsyncConnection`` (its drivers buffer the rows already)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn

    async def execute(self, statement: Executable, params: Params = None) -> Buffered:
        return Buffered.of(await self._conn.execute(statement, params))

    async def run(self, fn: Callable[[Connection], T]) -> T:
        return await self._conn.run_sync(fn)


_Call = tuple[Callable[[Connection], Any], asyncio.Future[Any], asyncio.AbstractEventLoop]


def _resolve(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.cancelled():  # the caller gave up; the work was done anyway (see hazards)
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


class WriterThread:
    """The thread that owns SQLite's write connection. Owned and closed by ``SqlStore``."""

    def __init__(self, engine: Engine, *, name: str = "turnqueue-sqlite-writer") -> None:
        self._engine = engine
        self._calls: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def call(self, fn: Callable[[Connection], T]) -> asyncio.Future[T]:
        """Queue ``fn(connection)`` now (synchronously) and return its future."""
        if self._closed:
            raise StoreError("the store is closed")
        if not self._thread.is_alive():
            self._thread.start()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._calls.put((fn, future, loop))
        return future

    async def close(self) -> None:
        """Run what is queued, close the connection and end the thread."""
        if self._closed:
            return
        started = self._thread.is_alive()
        self._closed = True
        if not started:
            self._engine.dispose()
            return
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        self._calls.put((lambda _conn: None, done, loop))
        self._calls.put(None)
        await done
        self._thread.join()  # it is past its last call: returns at once

    def _run(self) -> None:
        conn: Connection | None = None
        try:
            while (item := self._calls.get()) is not None:
                fn, future, loop = item
                result: Any = None
                error: BaseException | None = None
                try:
                    if conn is None:
                        conn = self._engine.connect()
                    result = fn(conn)
                except BaseException as exc:  # handed to the caller, never lost
                    error = exc
                try:
                    loop.call_soon_threadsafe(_resolve, future, result, error)
                except RuntimeError:  # that event loop is closed: nobody is waiting
                    pass
        finally:
            if conn is not None:
                conn.close()
            self._engine.dispose()


def finish(conn: Connection, *, commit: bool) -> None:
    """End the writer connection's transaction (if one began): COMMIT, or ROLLBACK. A failed
    COMMIT is rolled back before its error is raised, so the connection is clean again."""
    if not commit:
        conn.rollback()
        return
    try:
        conn.commit()
    except BaseException:
        conn.rollback()
        raise


class WriterConn(_Shortcuts):
    """:class:`Conn` of one write transaction on the :class:`WriterThread`."""

    __slots__ = ("_writer",)

    def __init__(self, writer: WriterThread) -> None:
        self._writer = writer

    async def execute(self, statement: Executable, params: Params = None) -> Buffered:
        return await self._writer.call(lambda conn: Buffered.of(conn.execute(statement, params)))

    async def run(self, fn: Callable[[Connection], T]) -> T:
        return await self._writer.call(fn)
