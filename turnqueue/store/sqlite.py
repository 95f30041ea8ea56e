"""The store on SQLite: ``SqliteStore`` and ``SqliteTx``.

Transactions (the hazards live here):

* ``transaction()`` holds ``self._write_lock`` (one ``asyncio.Lock``) from before
  ``BEGIN IMMEDIATE`` until after COMMIT/ROLLBACK, so the process has one writer at a time and
  concurrent tasks queue instead of failing with "database is locked" (Q3: the only writer, so
  :meth:`SqlTx.lock` only reads). ``read()`` is a read transaction (a WAL snapshot, in
  parallel with the writer) on a ``sqlite3`` connection of its own, run on the event loop too
  (:class:`SqliteReaders`): handing each read to a thread and back costs more than the read,
  and a reader thread's objects go to a second malloc arena (memory per standing subscription).
* Writes run **synchronously on the event loop**, on one ``sqlite3`` connection
  (:class:`SqliteWriter`). A write statement takes microseconds (WAL, ``synchronous=NORMAL``: a
  COMMIT does not wait for the disk), less than handing it to a thread and back. Writes are
  serialised by the lock anyway, so a thread would buy no concurrency. The hazards that come
  with it, and how each is handled:

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
  - A read is a statement on the loop too: reads are indexed and paged (at most ``MAX_PAGE``
    rows), so each takes microseconds to a millisecond. A read transaction takes its snapshot
    when it begins (``BEGIN`` and a read of the schema), waiting with ``asyncio.sleep`` in the
    rare case SQLite answers BUSY (a WAL reset by another process); its later statements never
    wait.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Integer,
    String,
    Text,
    bindparam,
    func,
    insert,
    select,
)
from sqlalchemy.dialects import sqlite
from sqlalchemy.exc import SQLAlchemyError

from turnqueue.domain import OutputRecord, utcnow
from turnqueue.errors import StoreError
from turnqueue.store.drivers import create_sqlite_writer_engine
from turnqueue.store.notify import Listener
from turnqueue.store.queue_state import Upserts
from turnqueue.store.rows import RUNNING
from turnqueue.store.sqlite_conn import (
    READ,
    WRITE,
    SqliteConn,
    SqliteReaders,
    SqliteWriter,
    begin,
    finish,
)
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
_INSERT_RECORD = Statement(
    insert(turn_output).values(
        turn_id=bindparam("p_turn_id", type_=String),
        seq=bindparam("p_seq", type_=Integer),
        offset=bindparam("p_offset", type_=BigInteger),
        kind=bindparam("p_kind", type_=String),
        item_key=bindparam("p_key", type_=String),
        text=bindparam("p_text", type_=Text),
        data=bindparam("p_data", type_=JSON),
    )
)


class SqliteTx(SqlTx):
    _upserts: ClassVar[Upserts] = Upserts.of(sqlite.insert)

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
        assert isinstance(self._conn, SqliteConn)  # appends run in write transactions only
        self._conn.execute_many(
            _INSERT_RECORD,
            [
                {
                    "p_turn_id": turn_id,
                    "p_seq": r.seq,
                    "p_offset": r.offset,
                    "p_kind": r.kind.value,
                    "p_key": r.key,
                    "p_text": r.text,
                    "p_data": None if r.data is None else dict(r.data),
                }
                for turn_id in turn_ids
                for r in batches[turn_id]
            ],
        )


class SqliteStore(SqlStore):
    dialect = "sqlite"

    def __init__(self, url: str, *, timeout: float = 30.0) -> None:
        self._write_lock = asyncio.Lock()
        self._timeout = timeout
        engine = create_sqlite_writer_engine(url, timeout=timeout)
        self._writer = SqliteWriter(engine)
        self._readers = SqliteReaders(engine)

    @property
    def shared(self) -> bool:
        """One process owns the database: no other instance to hear (M4 is PostgreSQL's)."""
        return False

    def listen(self, on_payload: Callable[[str], None], on_resync: Callable[[], None]) -> Listener:
        raise StoreError("LISTEN needs PostgreSQL: a SQLite database has one instance")

    async def notify(self, payloads: Sequence[str]) -> None:
        """No other instance to tell."""

    async def ping(self) -> None:
        async with self.read():
            pass  # beginning it read the file (``READ``)

    def transaction(self) -> _SqliteWrite:
        return _SqliteWrite(self._writer, self._write_lock, self._timeout)

    def read(self) -> _SqliteRead:
        return _SqliteRead(self._readers, self._timeout)

    def lease(self) -> _SqliteWrite:
        return self.transaction()

    async def close(self) -> None:
        self._readers.close()
        self._writer.close()


class _SqliteWrite:
    """``SqliteStore.transaction()``: a write transaction on the event loop (see the hazards
    above); a class, not a generator context manager, as it is on every write's path."""

    __slots__ = ("_conn", "_lock", "_timeout", "_tx", "_writer")

    def __init__(self, writer: SqliteWriter, lock: asyncio.Lock, timeout: float) -> None:
        self._writer = writer
        self._lock = lock
        self._timeout = timeout

    async def __aenter__(self) -> SqliteTx:
        await asyncio.sleep(0)  # statements never suspend: give the loop away once per write
        await self._lock.acquire()
        try:
            self._conn = conn = self._writer.connection()
            await begin(conn, WRITE, self._timeout)
        except BaseException as exc:
            self._lock.release()
            if isinstance(exc, DATABASE_ERRORS):
                raise StoreError(f"database error: {exc}") from exc
            raise
        self._tx = SqliteTx(SqliteConn(conn, self._writer.dialect))
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
            raise StoreError(f"database error: {exc}") from exc
        finally:
            self._lock.release()
        if isinstance(error, DATABASE_ERRORS):  # a statement of the block failed
            raise StoreError(f"database error: {error}") from error
        if failed is not None:
            raise failed
        if kind is None:  # committed; callbacks run outside the writer lock
            await self._tx.run_after_commit()


class _SqliteRead:
    """``SqliteStore.read()``: a read transaction on the event loop (see the hazards above)."""

    __slots__ = ("_pooled", "_readers", "_timeout")

    def __init__(self, readers: SqliteReaders, timeout: float) -> None:
        self._readers = readers
        self._timeout = timeout

    async def __aenter__(self) -> SqliteTx:
        await asyncio.sleep(0)  # statements never suspend: give the loop away once per read
        self._pooled = await self._readers.acquire()
        conn: sqlite3.Connection = self._pooled.driver_connection
        try:
            await begin(conn, READ, self._timeout)
        except BaseException as exc:
            finish(conn, commit=False)
            self._readers.release(self._pooled)
            if isinstance(exc, DATABASE_ERRORS):
                raise StoreError(f"database error: {exc}") from exc
            raise
        return SqliteTx(SqliteConn(conn, self._readers.dialect))

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, _: object
    ) -> None:
        try:
            finish(self._pooled.driver_connection, commit=False)  # nothing to keep: it read
        except DATABASE_ERRORS as exc:
            raise StoreError(f"database error: {exc}") from exc
        finally:
            self._readers.release(self._pooled)
        if isinstance(error, DATABASE_ERRORS):  # a statement of the block failed
            raise StoreError(f"database error: {error}") from error
