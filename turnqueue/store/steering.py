"""Steer-request statements of :class:`~turnqueue.store.tx.SqlTx` (Q16): a message offered to a
running turn, decided exactly once by a conditional ``UPDATE … WHERE state = 'PENDING'`` (the
instance running the turn, or the requester once that turn has ended: one of them wins)."""

from __future__ import annotations

from sqlalchemy import bindparam, select, update

from turnqueue.domain import SteerRequest
from turnqueue.store.conn import Statements
from turnqueue.store.rows import RowMap
from turnqueue.store.sent import Kept
from turnqueue.store.statement import Statement
from turnqueue.store.tables import steer_requests

PENDING = "PENDING"
_sr = steer_requests
_ADD = Kept(_sr, "session_id", ("id", "session_id", "turn_id", "entry_id"), state=PENDING)
_GET = Statement(select(_sr).where(_sr.c.id == bindparam("p_id")))
_REQUEST = RowMap(SteerRequest)
_PENDING_OF = Statement(
    select(_sr)
    .where(_sr.c.session_id == bindparam("p_session_id"), _sr.c.state == PENDING)
    .order_by(_sr.c.created_at, _sr.c.id)
)
_DECIDE = Statement(
    update(_sr)
    .where(_sr.c.id == bindparam("p_id"), _sr.c.state == PENDING)
    .values(state=bindparam("p_state"))
    .returning(_sr.c.id)
)


class SteerStatements(Statements):
    async def add_steer_request(self, session_id: str, turn_id: str, entry_id: str) -> str:
        params = {"p_session_id": session_id, "p_turn_id": turn_id, "p_entry_id": entry_id}
        return await _ADD.add_new(self._conn, params)

    async def steer_request(self, request_id: str) -> SteerRequest | None:
        return await self._conn.maybe(_GET, {"p_id": request_id}, _REQUEST)

    async def pending_steers(self, session_id: str) -> list[SteerRequest]:
        rows = await self._conn.execute(_PENDING_OF, {"p_session_id": session_id})
        return [_REQUEST(row) for row in rows.all()]

    async def decide_steer(self, request_id: str, state: str) -> bool:
        result = await self._conn.execute(_DECIDE, {"p_id": request_id, "p_state": state})
        return result.one_or_none() is not None
