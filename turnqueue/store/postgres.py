"""The store on PostgreSQL: ``PostgresStore`` and ``PostgresTx``, on asyncpg directly.

* Transactions run on an asyncpg pool, each on a
  :class:`~turnqueue.store.postgres_conn.DriverConn` (lazy BEGIN, COMMIT with its NOTIFYs).
* Serialisation (Q3) is the ``FOR UPDATE`` lock row taken by :meth:`PostgresTx.lock`.
* The instance lease (M6) has a pool of its own, so a heartbeat never waits behind request
  traffic; LISTEN (M4) has a connection of its own (:meth:`PostgresStore.listen`).
* ``start_turn``, ``end_turn``, ``add_entry`` and a batch of output are one round trip each (a
  data-modifying ``WITH``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, ClassVar

import asyncpg
from sqlalchemy import String, select, text, true
from sqlalchemy.dialects import postgresql
from sqlalchemy.exc import SQLAlchemyError

from turnqueue.domain import OutputRecord, Session, Turn
from turnqueue.errors import StoreError
from turnqueue.store.entries import ENTRY_VALUES, qe, tail_select
from turnqueue.store.notify import Listener, asyncpg_dsn
from turnqueue.store.postgres_conn import DriverConn, keep_session, literal, prepare_connection
from turnqueue.store.protocol import SessionView
from turnqueue.store.queue_state import Upserts
from turnqueue.store.rows import RowMap
from turnqueue.store.sqlstore import SqlStore
from turnqueue.store.statement import Statement
from turnqueue.store.tables import epoch_seq
from turnqueue.store.turns import (
    consume_one,
    end_session,
    end_turn_clause,
    insert_turn,
    session_bump,
)
from turnqueue.store.tx import SqlTx
from turnqueue.timeouts import within

#: What fails when the database does (SQLAlchemy's errors: building a statement).
DATABASE_ERRORS = (SQLAlchemyError, asyncpg.PostgresError, asyncpg.InterfaceError, OSError)

# -- PostgreSQL's own statements -------------------------------------------------------------
_NEXT_EPOCH = Statement(select(epoch_seq.next_value()))
#: ``start_turn`` in one statement (data-modifying WITHs: one snapshot, different tables), keyed
#: by whether an entry is consumed.
_START_TURN = {
    consumes: Statement(
        select(_bumped.c.revision).add_cte(
            insert_turn.cte("started"), *([consume_one.cte("consumed")] if consumes else [])
        )
    )
    for consumes in (False, True)
    for _bumped in [session_bump(with_state=True).cte("bumped")]
}
_ended = end_turn_clause.cte("ended")
_ended_session = end_session(_ended.c.session_id).cte("ended_session")
#: ``end_turn`` in one statement, the turn's columns prefixed ``turn_``, the session's
#: ``session_``. No row: the turn was not RUNNING.
_END_TURN = Statement(
    select(
        *(c.label(f"turn_{c.key}") for c in _ended.c),
        *(c.label(f"session_{c.key}") for c in _ended_session.c),
    ).select_from(_ended.join(_ended_session, true()))
)
_ENDED_TURN = RowMap(Turn, prefix="turn_")
_ENDED_SESSION = RowMap(Session, prefix="session_", skip=("parts",))
#: ``add_entry`` in one round trip; the visible count before the insert.
_tail = tail_select.cte("tail")
_ADD_ENTRY = Statement(
    select(_tail.c.visible).add_cte(
        qe.insert()
        .from_select(["position", *ENTRY_VALUES], select(_tail.c.tail + 1, *ENTRY_VALUES.values()))
        .cte("inserted")
    )
)
#: Every record of a flush in one statement (lists bound as arrays), inserted only for turns
#: still RUNNING, whose rows the CTE takes first, in turn-id order (two flushes never deadlock).
_APPEND_RECORDS = Statement(
    text(
        "WITH running AS (SELECT id FROM turns WHERE id = ANY(CAST(:turn_ids AS text[])) "
        "AND status = 'RUNNING' ORDER BY id FOR UPDATE) "
        'INSERT INTO turn_output (turn_id, seq, "offset", kind, item_key, text, data) '
        "SELECT u.ti, u.s, u.o, u.k, u.ik, u.t, CAST(u.d AS json) FROM unnest("
        "CAST(:tids AS text[]), CAST(:seqs AS integer[]), CAST(:offsets AS bigint[]), "
        "CAST(:kinds AS text[]), CAST(:keys AS text[]), CAST(:texts AS text[]), "
        "CAST(:datas AS text[])) AS u(ti, s, o, k, ik, t, d) JOIN running ON running.id = u.ti "
        "RETURNING turn_id"
    ).columns(turn_id=String)
)


class PostgresTx(SqlTx):
    _upserts: ClassVar[Upserts] = Upserts.of(postgresql.insert, with_bump=True)
    _conn: DriverConn

    def notify(self, payload: str) -> None:
        self._conn.notify(payload)  # sent with the COMMIT (``DriverConn.commit``)

    async def next_epoch(self) -> int:
        return int(await self._conn.scalar(_NEXT_EPOCH))

    async def lock(self, session_id: str) -> SessionView:
        # Q3: the lock row serialises every reservation and policy write of this session.
        # HAZARD: it must be its own statement. Under READ COMMITTED a statement's snapshot is
        # taken when it starts; a joined SELECT … FOR UPDATE that waited for the lock re-reads
        # only the locked row and would return the *old* policy, entries and clarification.
        # The view is a new statement, so it sees what the previous holder committed.
        if not await self._conn.lock_row(session_id):
            raise KeyError(session_id)
        return await super().lock(session_id)

    async def _start_turn(self, turn: Turn, params: dict[str, Any], consume: Sequence[str]) -> int:
        if len(consume) > 1:
            return await super()._start_turn(turn, params, consume)
        one = {**params, "p_id": consume[0]} if consume else params
        return int((await self._conn.one(_START_TURN[bool(consume)], one, turn.session_id))[0])

    async def _end_turn(self, turn_id: str, params: dict[str, Any]) -> tuple[Turn, Session]:
        both = (await self._conn.execute(_END_TURN, params)).one_or_none()
        if both is None:
            return await self._ended_turn(turn_id, params)
        return _ENDED_TURN(both), _ENDED_SESSION(both)

    async def _insert_entry(self, params: dict[str, Any]) -> int | None:
        visible = await self._conn.scalar(_ADD_ENTRY, params)
        return int(visible) if visible is not None else None

    async def _append_records(self, batches: Mapping[str, Sequence[OutputRecord]]) -> set[str]:
        rows = [(turn_id, r) for turn_id, records in batches.items() for r in records]
        result = await self._conn.execute(
            _APPEND_RECORDS,
            {
                "turn_ids": sorted(batches),
                "tids": [turn_id for turn_id, _ in rows],
                "seqs": [r.seq for _, r in rows],
                "offsets": [r.offset for _, r in rows],
                "kinds": [r.kind.value for _, r in rows],
                "keys": [r.key for _, r in rows],
                "texts": [r.text for _, r in rows],
                "datas": [None if r.data is None else _json(r.data) for _, r in rows],
            },
        )
        return {row.turn_id for row in result}

    async def _append_running(self, batches: Mapping[str, Sequence[OutputRecord]]) -> None:
        """With the COMMIT, as literals; a record no literal can carry (a NUL) goes as
        parameters now (and the driver refuses it)."""
        try:
            values = ", ".join(
                _record_values(turn_id, r) for turn_id, records in batches.items() for r in records
            )
        except ValueError:
            await self._append_records(batches)
            return
        self._conn.at_commit(_INSERT_RECORDS_TEXT + values)


#: The head of :meth:`PostgresTx._append_running`'s insert; the rows follow as literals.
_INSERT_RECORDS_TEXT = (
    'INSERT INTO turn_output (turn_id, seq, "offset", kind, item_key, text, data) VALUES '
)


def _record_values(turn_id: str, r: OutputRecord) -> str:
    """One row of ``_INSERT_RECORDS_TEXT`` (ValueError: a value no literal can carry)."""
    key = "NULL" if r.key is None else literal(r.key)
    data = "NULL" if r.data is None else f"CAST({literal(_json(r.data))} AS json)"
    return (
        f"({literal(turn_id)}, {int(r.seq)}, {int(r.offset)}, {literal(r.kind.value)}, "
        f"{key}, {literal(r.text)}, {data})"
    )


def _json(data: object) -> str:
    return json.dumps(data, separators=(",", ":"), default=dict)  # default: a read-only mapping


class PostgresStore(SqlStore):
    def __init__(self, url: str, *, timeout: float = 30.0, pool_size: int = 5) -> None:
        self._dsn = asyncpg_dsn(url)
        self._timeout = timeout
        self._pool_size = pool_size
        # asyncpg pools, opened by the first transaction; the lease has its own (``_pool``).
        self._pools: dict[bool, asyncpg.Pool] = {}
        self._pools_lock = asyncio.Lock()
        self._closed = False

    @property
    def shared(self) -> bool:
        return True

    def listen(self, on_payload: Callable[[str], None], on_resync: Callable[[], None]) -> Listener:
        """A LISTEN connection of its own (not pooled), started by ``Listener.start``."""
        return Listener(self._dsn, on_payload, on_resync)

    async def notify(self, payloads: Sequence[str]) -> None:
        if not payloads:
            return
        async with self.transaction() as tx:  # one round trip: sent with the COMMIT
            for payload in payloads:
                tx.notify(payload)

    async def ping(self) -> None:
        """Readiness: one round trip to the database."""
        try:
            async with (await self._pool(lease=False)).acquire() as driver:
                await driver.fetchval("SELECT 1")
        except DATABASE_ERRORS as exc:
            raise StoreError(f"database error: {exc}") from exc

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[PostgresTx]:
        async with self._pg() as tx:
            yield tx
            await tx.prepare_commit()  # Q13: the last statements before COMMIT (and its NOTIFYs)
        # Only reached when the block and COMMIT succeeded.
        await tx.run_after_commit()

    def read(self) -> AbstractAsyncContextManager[PostgresTx]:
        return self._pg(read_only=True)

    def lease(self) -> AbstractAsyncContextManager[PostgresTx]:
        return self._pg(lease=True)

    async def _pool(self, *, lease: bool) -> asyncpg.Pool:
        """The asyncpg pool, opened on first use (``lease``: the lease's own one-connection
        pool: a heartbeat waiting behind request traffic would let the other instances declare
        this busy one dead, M6)."""
        pool = self._pools.get(lease)
        if pool is None:
            async with self._pools_lock:  # one pool even when the first calls race
                if self._closed:
                    raise StoreError("the store is closed")
                pool = self._pools.get(lease)
                if pool is None:
                    pool = self._pools[lease] = await asyncpg.create_pool(
                        self._dsn,
                        min_size=0,
                        max_size=1 if lease else self._pool_size,
                        max_inactive_connection_lifetime=300,
                        init=prepare_connection,
                        reset=keep_session,
                        timeout=self._timeout,
                        command_timeout=self._timeout,
                    )
        return pool

    @contextlib.asynccontextmanager
    async def _pg(
        self, *, lease: bool = False, read_only: bool = False
    ) -> AsyncIterator[PostgresTx]:
        """A transaction on a pooled connection; reads are REPEATABLE READ READ ONLY (one
        snapshot), writes READ COMMITTED. An exception from the block rolls back; a connection
        released inside a transaction anyway (a failed ROLLBACK) is rolled back or closed by
        asyncpg's pool before anyone else gets it."""
        try:
            async with (await self._pool(lease=lease)).acquire() as driver:
                conn = DriverConn(driver, read_only=read_only)
                try:
                    yield PostgresTx(conn)
                    await conn.commit()
                except BaseException:
                    await conn.rollback()  # no-op when a failed COMMIT already ended it
                    raise
        except DATABASE_ERRORS as exc:
            raise StoreError(f"database error: {exc}") from exc

    async def close(self) -> None:
        async with self._pools_lock:
            self._closed = True
            pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            try:
                await within(pool.close(), self._timeout)
            except TimeoutError:  # a connection still checked out: close it anyway
                pool.terminate()
