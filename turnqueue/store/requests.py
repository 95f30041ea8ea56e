"""Owner-request statements of :class:`~turnqueue.store.tx.SqlTx` (M4): an operation asked of the
instance running a session's turn, as a row (``owner_requests``).

Each transition is a conditional ``UPDATE … WHERE state = …``, so of an owner claiming a request
and its requester withdrawing it exactly one wins, and a request runs at most once.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, bindparam, select, update

from turnqueue.domain import OwnerRequest, RequestState
from turnqueue.store.conn import Statements
from turnqueue.store.rows import RowMap
from turnqueue.store.sent import Kept
from turnqueue.store.statement import Statement
from turnqueue.store.tables import owner_requests

PENDING = RequestState.PENDING.value
_r = owner_requests
#: Answered requests are read once, by their requester; a day later nobody waits for them.
_ADD = Kept(_r, "owner", ("id", "owner", "origin", "op", "args"), state=PENDING)
_GET = Statement(select(_r).where(_r.c.id == bindparam("p_id")))
_REQUEST = RowMap(OwnerRequest)
_PENDING_FOR = Statement(
    select(_r.c.id)
    .where(_r.c.owner == bindparam("p_owner", type_=BigInteger), _r.c.state == PENDING)
    .order_by(_r.c.created_at, _r.c.id)
)
_MOVE = Statement(
    update(_r)
    .where(_r.c.id == bindparam("p_id"), _r.c.state == bindparam("p_from"))
    .values(state=bindparam("p_to"), outcome=bindparam("p_outcome"))
    .returning(_r.c.id)
)


class RequestStatements(Statements):
    async def add_request(self, owner: int, origin: int, op: str, args: str) -> str:
        params = {"p_owner": owner, "p_origin": origin, "p_op": op, "p_args": args}
        return await _ADD.add_new(self._conn, params)

    async def owner_request(self, request_id: str) -> OwnerRequest | None:
        return await self._conn.maybe(_GET, {"p_id": request_id}, _REQUEST)

    async def pending_requests(self, owner: int) -> list[str]:
        return list(await self._conn.scalars(_PENDING_FOR, {"p_owner": owner}))

    async def move_request(
        self,
        request_id: str,
        from_state: RequestState,
        to_state: RequestState,
        outcome: str | None = None,
    ) -> bool:
        params = {
            "p_id": request_id,
            "p_from": from_state.value,
            "p_to": to_state.value,
            "p_outcome": outcome,
        }
        return (await self._conn.execute(_MOVE, params)).one_or_none() is not None
