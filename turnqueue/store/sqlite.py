"""The store on SQLite: ``SqliteStore`` and ``SqliteTx``. Every statement runs synchronously on
the event loop, on a ``sqlite3`` connection (``store/sqlite_conn.py``): it takes microseconds
(WAL, ``synchronous=NORMAL``: a COMMIT does not wait for the disk), less than handing it to a
thread and back, and a reader thread's objects would go to a second malloc arena.

``transaction()`` holds one ``asyncio.Lock`` from before ``BEGIN IMMEDIATE`` until after
COMMIT/ROLLBACK, on the one write connection: one writer at a time, and concurrent tasks queue
instead of failing with "database is locked" (Q3: so :meth:`SqlTx.lock` only reads). ``read()``
is a WAL snapshot on a read connection of its own, in parallel with the writer.

Hazards of running on the loop, and how each is handled:

* Waiting for the file lock would block it: every busy timeout is 0, and a transaction's begin
  is retried with ``asyncio.sleep`` back-off up to the store's timeout (another process, e.g.
  ``turnqueue migrate``, holds the lock; a WAL reset); its later statements never wait.
* Starving other tasks: statements never suspend, so each transaction yields once first.
* Cancellation: a statement cannot be cancelled half-way; a task cancelled between statements
  rolls back at once.
* A WAL checkpoint (every ~1,000 pages) runs inside a COMMIT: milliseconds of disk I/O on the
  loop, now and then. Reads are indexed and paged (at most ``MAX_PAGE`` rows).
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import ClassVar

from sqlalchemy import String, bindparam, func, insert, select
from sqlalchemy.dialects import sqlite
from sqlalchemy.exc import SQLAlchemyError

from turnqueue.domain import OutputRecord, utcnow
from turnqueue.errors import StoreError
from turnqueue.store.drivers import create_sqlite_writer_engine
from turnqueue.store.notify import Listener
from turnqueue.store.queue_state import Upserts
from turnqueue.store.rows import RUNNING
from turnqueue.store.sqlite_conn import READ, WRITE, SqliteConn, SqliteConnections, begin, finish
from turnqueue.store.sqlstore import SqlStore
from turnqueue.store.statement import Statement
from turnqueue.store.tables import UtcDateTime, epochs, turn_output, turns
from turnqueue.store.tx import SqlTx

#: What fails when the database does (SQLAlchemy's own wrap the driver's on the read engine).
DATABASE_ERRORS = (SQLAlchemyError, sqlite3.Error)
_NEXT_EPOCH = Statement(
    insert(epochs).values(created_at=bindparam("p_now", type_=UtcDateTime)).returning(epochs.c.id)
)

#: A flush's records (see ``store/output.py``): which of its turns are still RUNNING (their ids
#: as one JSON array), then one prepared insert run for every record of those (``executemany``,
#: a C loop; one statement over ``json_each`` of the records costs more, since SQLite before
#: 3.45 parses the JSON again for every field it extracts).
_RUNNING_AMONG = Statement(
    select(turns.c.id).where(
        turns.c.status == RUNNING,
        turns.c.id.in_(
            select(func.json_each(bindparam("p_ids", type_=String)).table_valued("value").c.value)
        ),
    )
)
#: Every column, given by name.
_INSERT_RECORD = Statement(insert(turn_output))


class SqliteTx(SqlTx):
    _upserts: ClassVar[Upserts] = Upserts.of(sqlite.insert)
    _conn: SqliteConn

    async def next_epoch(self) -> int:
        # AUTOINCREMENT never reuses an id, even after deletes (R2).
        return int(await self._conn.scalar(_NEXT_EPOCH, {"p_now": utcnow()}))

    async def _append_records(self, batches: Mapping[str, Sequence[OutputRecord]]) -> set[str]:
        ids = json.dumps(list(batches))
        running = {row.id for row in await self._conn.execute(_RUNNING_AMONG, {"p_ids": ids})}
        self._insert_records(running, batches)
        return running

    async def _append_running(self, batches: Mapping[str, Sequence[OutputRecord]]) -> None:
        self._insert_records(batches, batches)

    def _insert_records(
        self, turn_ids: Iterable[str], batches: Mapping[str, Sequence[OutputRecord]]
    ) -> None:
        """One prepared insert run for every record of ``turn_ids``."""
        self._conn.execute_many(
            _INSERT_RECORD,
            [
                {
                    "turn_id": turn_id,
                    "seq": r.seq,
                    "offset": r.offset,
                    "kind": r.kind.value,
                    "item_key": r.key,
                    "text": r.text,
                    "data": None if r.data is None else dict(r.data),
                }
                for turn_id in turn_ids
                for r in batches[turn_id]
            ],
        )


class SqliteStore(SqlStore):
    def __init__(self, url: str, *, timeout: float = 30.0) -> None:
        self._write_lock = asyncio.Lock()
        self._timeout = timeout
        self._conns = SqliteConnections(create_sqlite_writer_engine(url, timeout=timeout))

    @property
    def shared(self) -> bool:
        return False  # one process owns the database (M4 is PostgreSQL's)

    def listen(self, on_payload: Callable[[str], None], on_resync: Callable[[], None]) -> Listener:
        raise StoreError("LISTEN needs PostgreSQL: a SQLite database has one instance")

    async def notify(self, payloads: Sequence[str]) -> None:
        """No other instance to tell."""

    async def ping(self) -> None:
        async with self.read():
            pass  # beginning it read the file (``READ``)

    def transaction(self) -> _SqliteWrite:
        return _SqliteWrite(self)

    def read(self) -> _SqliteRead:
        return _SqliteRead(self)

    lease = transaction  # one writer: the lease needs no connection of its own

    async def close(self) -> None:
        self._conns.close()


def _database_error(error: BaseException) -> StoreError:
    return StoreError(f"database error: {error}")


class _SqliteWrite:
    """``SqliteStore.transaction()`` (a class, not a generator context manager: it is on every
    write's path)."""

    __slots__ = ("_conn", "_store", "_tx")

    def __init__(self, store: SqliteStore) -> None:
        self._store = store

    async def __aenter__(self) -> SqliteTx:
        await asyncio.sleep(0)  # statements never suspend: give the loop away once per write
        store = self._store
        await store._write_lock.acquire()
        try:
            self._conn = conn = store._conns.writer()
            await begin(conn, WRITE, store._timeout)
        except BaseException as exc:
            store._write_lock.release()
            if isinstance(exc, DATABASE_ERRORS):
                raise _database_error(exc) from exc
            raise
        self._tx = SqliteTx(SqliteConn(conn, store._conns.dialect))
        return self._tx

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, _: object
    ) -> None:
        failed: BaseException | None = None
        if kind is None:
            try:
                await self._tx.prepare_commit()  # Q13: the last statements, before COMMIT
            except BaseException as exc:
                failed = error = exc
        try:
            finish(self._conn, commit=kind is None and failed is None)
        except DATABASE_ERRORS as exc:
            raise _database_error(exc) from exc
        finally:
            self._store._write_lock.release()
        if isinstance(error, DATABASE_ERRORS):  # a statement of the block failed
            raise _database_error(error) from error
        if failed is not None:
            raise failed
        if kind is None:  # committed; callbacks run outside the writer lock
            await self._tx.run_after_commit()


class _SqliteRead:
    """``SqliteStore.read()``."""

    __slots__ = ("_conns", "_pooled", "_timeout")

    def __init__(self, store: SqliteStore) -> None:
        self._conns = store._conns
        self._timeout = store._timeout

    async def __aenter__(self) -> SqliteTx:
        await asyncio.sleep(0)  # statements never suspend: give the loop away once per read
        self._pooled = await self._conns.acquire()
        conn: sqlite3.Connection = self._pooled.driver_connection
        try:
            await begin(conn, READ, self._timeout)
        except BaseException as exc:
            finish(conn, commit=False)
            self._conns.release(self._pooled)
            if isinstance(exc, DATABASE_ERRORS):
                raise _database_error(exc) from exc
            raise
        return SqliteTx(SqliteConn(conn, self._conns.dialect))

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, _: object
    ) -> None:
        try:
            finish(self._pooled.driver_connection, commit=False)  # nothing to keep: it read
        except DATABASE_ERRORS as exc:
            raise _database_error(exc) from exc
        finally:
            self._conns.release(self._pooled)
        if isinstance(error, DATABASE_ERRORS):  # a statement of the block failed
            raise _database_error(error) from error
