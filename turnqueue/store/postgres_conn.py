r"""``DriverConn``: the :class:`~turnqueue.store.statement.Conn` of ``PostgresStore``, one
transaction on a pooled asyncpg connection, and the hooks that pool runs on its connections
(:func:`prepare_connection`, :func:`keep_session`). Statements are compiled by a bare
SQLAlchemy dialect (:data:`DIALECT`: no SQLAlchemy engine or pool)."""

from __future__ import annotations

from typing import Any

import asyncpg
from sqlalchemy import Executable, bindparam, select
from sqlalchemy.dialects.postgresql.asyncpg import dialect as asyncpg_dialect
from sqlalchemy.engine import Dialect

from turnqueue.store.notify import CHANNEL
from turnqueue.store.statement import Buffered, Conn, Params, Statement, plan_for
from turnqueue.store.tables import queue_session_locks

locks = queue_session_locks

#: Compiles every statement: the dialect an asyncpg engine would have (nothing connects it).
DIALECT: Dialect = asyncpg_dialect()  # type: ignore[no-untyped-call]
#: The lock row (Q3) as a parameterised statement (see ``DriverConn.lock_row``).
_LOCK = Statement(
    select(locks.c.session_id)
    .where(locks.c.session_id == bindparam("p_session_id"))
    .with_for_update()
)


def literal(value: str) -> str:
    """``value`` as a PostgreSQL string constant, for the simple-query protocol (it takes no
    parameters). An escape string (``E'…'``, every backslash and quote doubled) reads the same
    whatever ``standard_conforming_strings`` says; asyncpg always speaks UTF-8, where no
    multi-byte character contains a quote or backslash byte.

    Hazard: a NUL would end the query text early; PostgreSQL's text holds none, so it is
    refused here."""
    if "\x00" in value:
        raise ValueError("a PostgreSQL string cannot contain NUL")
    return "E'" + value.replace("\\", "\\\\").replace("'", "''") + "'"


#: The lock row (Q3), prepared once by every pooled connection (``prepare_connection``), so
#: the simple query that carries BEGIN names it and PostgreSQL neither parses nor plans the
#: SELECT again for each transaction. Its tag is the SELECT's (``SELECT 1``: the row exists).
_LOCK_NAME = "turnqueue_lock_row"
_PREPARE_LOCK = (
    f"PREPARE {_LOCK_NAME} (text) AS "
    "SELECT 1 FROM queue_session_locks WHERE session_id = $1 FOR UPDATE"
)
_LOCK_TEXT = f"EXECUTE {_LOCK_NAME}({{}})"
#: One notification, sent with the COMMIT: the NOTIFY command, which PostgreSQL neither plans
#: nor answers with a row (``pg_notify`` would be a SELECT); the channel quoted.
_NOTIFY_TEXT = f'NOTIFY "{CHANNEL}", {{}}'
_BEGIN = {
    False: "BEGIN ISOLATION LEVEL READ COMMITTED",
    True: "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
}


class DriverConn(Conn):
    """One transaction on an asyncpg connection, ended by :meth:`commit` or :meth:`rollback`.

    Hazard: BEGIN is sent lazily, with the first statement (in its round trip when that is the
    lock row), so the transaction starts then, not when the connection is handed out. A
    transaction that sent nothing costs no round trip."""

    __slots__ = ("_at_commit", "_begin", "_driver", "_notifications")

    def __init__(self, driver: asyncpg.Connection, *, read_only: bool = False) -> None:
        self._driver = driver
        #: the BEGIN not sent yet; None once it has been
        self._begin: str | None = _BEGIN[read_only]
        self._notifications: list[str] = []
        self._at_commit: list[str] = []

    async def execute(self, statement: Statement | Executable, params: Params = None) -> Buffered:
        if self._begin is not None:
            begin, self._begin = self._begin, None
            await self._driver.execute(begin)
        plan = plan_for(statement, DIALECT, params)
        args = plan.args(params)
        if plan.record is None:
            return Buffered([], _rowcount(await self._driver.execute(plan.sql, *args)))
        rows = plan.rows(await self._driver.fetch(plan.sql, *args))
        return Buffered(rows, len(rows))

    async def lock_row(self, session_id: str) -> bool:
        """Q3: the session's lock row ``FOR UPDATE``; whether it exists. As the transaction's
        first statement it goes in BEGIN's round trip: one simple query (``BEGIN …; EXECUTE …``,
        the id as a :func:`literal`). Else, or for an id no literal can carry (a NUL, which no
        row holds), it goes as a parameter."""
        if self._begin is None or "\x00" in session_id:
            found = await self.execute(_LOCK, {"p_session_id": session_id})
            return found.one_or_none() is not None
        begin, self._begin = self._begin, None
        query = f"{begin}; {_LOCK_TEXT.format(literal(session_id))}"
        return _rowcount(await self._driver.execute(query)) == 1

    def notify(self, payload: str) -> None:
        """A NOTIFY to send with the COMMIT (M4: delivered at COMMIT, never on ROLLBACK)."""
        self._notifications.append(payload)

    def at_commit(self, sql: str) -> None:
        """A write (simple-query text, values as :func:`literal` strings) to send with the COMMIT,
        before its NOTIFYs. Hazard: it runs only then, so this transaction's later statements
        do not see it; if it fails, the COMMIT does not happen (the transaction rolls back)."""
        self._at_commit.append(sql)

    async def commit(self) -> None:
        """COMMIT with the :meth:`at_commit` writes and the NOTIFYs, in order, in one simple
        query (``INSERT …; NOTIFY "turnqueue", E'…'; …; COMMIT``); a failing part aborts the
        rest and the COMMIT."""
        notifies = [_NOTIFY_TEXT.format(literal(payload)) for payload in self._notifications]
        parts = [*self._at_commit, *notifies]
        self._notifications = []
        self._at_commit = []
        if self._begin is not None:
            if not parts:
                return
            parts.insert(0, self._begin)
            self._begin = None
        parts.append("COMMIT")
        await self._driver.execute("; ".join(parts))

    async def rollback(self) -> None:
        """ROLLBACK, once BEGIN has been sent. Hazard: not ``is_in_transaction()``: a BEGIN
        that travelled with a statement cancelled in flight (the lock row waiting for its
        lock) has opened a transaction the driver has not yet been told about; the pool
        would then reset the connection and report it as an error."""
        self._notifications = []
        self._at_commit = []
        if self._begin is None:
            await self._driver.execute("ROLLBACK")


def _rowcount(status: str) -> int:
    """Rows affected, from a PostgreSQL command tag (``UPDATE 3``, ``INSERT 0 1``)."""
    last = status.rpartition(" ")[2]
    return int(last) if last.isdigit() else -1


async def prepare_connection(connection: asyncpg.Connection) -> None:
    """Every new pooled connection: the lock row's prepared statement (``lock_row``), kept as
    long as the connection (``keep_session``)."""
    await connection.execute(_PREPARE_LOCK)


async def keep_session(_connection: Any) -> None:
    """The pool's reset on release: none. asyncpg has already rolled back any transaction left
    open, and nothing of ours changes session state, so its default reset (``RESET ALL``, …)
    would be a wasted round trip per transaction. Hazard: a reset that deallocates prepared
    statements (``DISCARD ALL``) would take the lock row's with it."""
