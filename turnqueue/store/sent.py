"""Sent-message statements of :class:`~turnqueue.store.tx.SqlTx` (Q15): a send that carried a
client's ``clientMessageId``, and what it did, read back by a retry of the same key.

Both run inside the caller's unit of work, under the session's lock row, so two sends racing
with one key are serialised: the second reads what the first committed. A session's rows older
than :data:`KEPT` go with its next keyed send (no background task).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from sqlalchemy import Table, bindparam, delete, insert, select

from turnqueue.domain import SentMessage, new_id, utcnow
from turnqueue.store.conn import Conn, Statements
from turnqueue.store.rows import RowMap, values_of
from turnqueue.store.statement import Statement
from turnqueue.store.tables import UtcDateTime, sent_messages

#: Q15: keys are kept at least this long.
KEPT = timedelta(hours=24)


class Kept:
    """The insert of a table whose rows are kept at least :data:`KEPT`: it first deletes the
    rows of its ``scope`` (a column, the parameter ``p_<scope>``) created longer ago. It writes
    ``columns`` from the parameters ``p_<column>``, ``fixed`` as given, and ``created_at``."""

    def __init__(self, table: Table, scope: str, columns: Sequence[str], **fixed: Any) -> None:
        self._scope = f"p_{scope}"
        self._prune = Statement(
            delete(table).where(
                table.c[scope] == bindparam(self._scope),
                table.c.created_at < bindparam("p_before", type_=UtcDateTime),
            )
        )
        created_at = bindparam("p_now", type_=UtcDateTime)
        values: dict[str, Any] = {column: bindparam(f"p_{column}") for column in columns}
        self._insert = Statement(insert(table).values(**values, **fixed, created_at=created_at))

    async def add(self, conn: Conn, params: Mapping[str, Any]) -> None:
        now = utcnow()
        await conn.execute(self._prune, {self._scope: params[self._scope], "p_before": now - KEPT})
        await conn.execute(self._insert, {**params, "p_now": now})

    async def add_new(self, conn: Conn, params: Mapping[str, Any]) -> str:
        """:meth:`add` a row with a new id (the parameter ``p_id``); that id."""
        row_id = new_id()
        await self.add(conn, {**params, "p_id": row_id})
        return row_id


_sm = sent_messages
_FIND = Statement(
    select(_sm).where(
        _sm.c.session_id == bindparam("p_session_id"), _sm.c.key == bindparam("p_key")
    )
)
_RECORD = Kept(
    _sm,
    "session_id",
    ("session_id", "key", "digest", "outcome", "entry_id", "turn_id", "position", "queued_at"),
)
_SENT = RowMap(SentMessage)


class SentMessageStatements(Statements):
    async def sent_message(self, session_id: str, key: str) -> SentMessage | None:
        params = {"p_session_id": session_id, "p_key": key}
        return await self._conn.maybe(_FIND, params, _SENT)

    async def record_sent_message(self, session_id: str, sent: SentMessage) -> None:
        await _RECORD.add(self._conn, {"p_session_id": session_id, **values_of(sent, "p_")})
