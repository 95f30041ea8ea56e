"""Sent-message statements of :class:`~turnqueue.store.tx.SqlTx` (Q15): a send that carried a
client's ``clientMessageId``, and what it did, read back by a retry of the same key.

Both run inside the caller's unit of work, under the session's lock row, so two sends racing
with one key are serialised: the second reads what the first committed. A session's rows older
than :data:`KEPT` go with its next keyed send (no background task).
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import String, bindparam, delete, insert, select

from turnqueue.domain import SendOutcome, SentMessage, utcnow
from turnqueue.store.conn import Conn
from turnqueue.store.statement import Statement
from turnqueue.store.tables import UtcDateTime, sent_messages

#: Q15: keys are kept at least this long.
KEPT = timedelta(hours=24)

_sm = sent_messages
_FIND = Statement(
    select(_sm).where(
        _sm.c.session_id == bindparam("p_session_id"), _sm.c.key == bindparam("p_key", String)
    )
)
_PRUNE = Statement(
    delete(_sm).where(
        _sm.c.session_id == bindparam("p_session_id"),
        _sm.c.created_at < bindparam("p_before", type_=UtcDateTime),
    )
)
_RECORD = Statement(
    insert(_sm).values(
        session_id=bindparam("p_session_id"),
        key=bindparam("p_key", String),
        digest=bindparam("p_digest", String),
        outcome=bindparam("p_outcome", String),
        entry_id=bindparam("p_entry_id", String),
        turn_id=bindparam("p_turn_id", String),
        position=bindparam("p_position"),
        queued_at=bindparam("p_queued_at", type_=UtcDateTime),
        created_at=bindparam("p_now", type_=UtcDateTime),
    )
)


class SentMessageStatements:
    """Mixin: needs ``self._conn``, the transaction's connection."""

    _conn: Conn

    async def sent_message(self, session_id: str, key: str) -> SentMessage | None:
        row = await self._conn.execute(_FIND, {"p_session_id": session_id, "p_key": key})
        found = row.one_or_none()
        if found is None:
            return None
        m = found._mapping
        return SentMessage(
            m["key"],
            m["digest"],
            SendOutcome(m["outcome"]),
            m["entry_id"],
            m["turn_id"],
            m["position"],
            m["queued_at"],
        )

    async def record_sent_message(self, session_id: str, sent: SentMessage) -> None:
        now = utcnow()
        await self._conn.execute(_PRUNE, {"p_session_id": session_id, "p_before": now - KEPT})
        params = {
            "p_session_id": session_id,
            "p_key": sent.key,
            "p_digest": sent.digest,
            "p_outcome": sent.outcome.value,
            "p_entry_id": sent.entry_id,
            "p_turn_id": sent.turn_id,
            "p_position": sent.position,
            "p_queued_at": sent.queued_at,
            "p_now": now,
        }
        await self._conn.execute(_RECORD, params)
