"""Owner-request statements of :class:`~turnqueue.store.tx.SqlTx` (M4): an operation asked of the
instance running a session's turn, as a row (``owner_requests``).

Each transition is a conditional ``UPDATE … WHERE state = …``, so of an owner claiming a request
and its requester withdrawing it exactly one wins, and a request runs at most once.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, String, Text, bindparam, delete, insert, select, update

from turnqueue.domain import OwnerRequest, RequestState, new_id, utcnow
from turnqueue.store.conn import Conn
from turnqueue.store.sent import KEPT
from turnqueue.store.statement import Statement
from turnqueue.store.tables import UtcDateTime, owner_requests

PENDING = RequestState.PENDING.value
_r = owner_requests
_ADD = Statement(
    insert(_r).values(
        id=bindparam("p_id", String),
        owner=bindparam("p_owner", type_=BigInteger),
        origin=bindparam("p_origin", type_=BigInteger),
        op=bindparam("p_op", String),
        args=bindparam("p_args", Text),
        state=PENDING,
        created_at=bindparam("p_now", type_=UtcDateTime),
    )
)
#: Answered requests are read once, by their requester; a day later nobody waits for them.
_PRUNE = Statement(
    delete(_r).where(
        _r.c.owner == bindparam("p_owner", type_=BigInteger),
        _r.c.created_at < bindparam("p_before", type_=UtcDateTime),
    )
)
_GET = Statement(select(_r).where(_r.c.id == bindparam("p_id", String)))
_PENDING_FOR = Statement(
    select(_r.c.id)
    .where(_r.c.owner == bindparam("p_owner", type_=BigInteger), _r.c.state == PENDING)
    .order_by(_r.c.created_at, _r.c.id)
)
_MOVE = Statement(
    update(_r)
    .where(_r.c.id == bindparam("p_id", String), _r.c.state == bindparam("p_from", String))
    .values(state=bindparam("p_to", String), outcome=bindparam("p_outcome", Text))
    .returning(_r.c.id)
)


class RequestStatements:
    """Mixin: needs ``self._conn``, the transaction's connection."""

    _conn: Conn

    async def add_request(self, owner: int, origin: int, op: str, args: str) -> str:
        now = utcnow()
        await self._conn.execute(_PRUNE, {"p_owner": owner, "p_before": now - KEPT})
        request_id = new_id()
        params = {
            "p_id": request_id,
            "p_owner": owner,
            "p_origin": origin,
            "p_op": op,
            "p_args": args,
            "p_now": now,
        }
        await self._conn.execute(_ADD, params)
        return request_id

    async def owner_request(self, request_id: str) -> OwnerRequest | None:
        row = (await self._conn.execute(_GET, {"p_id": request_id})).one_or_none()
        if row is None:
            return None
        m = row._mapping
        return OwnerRequest(
            m["id"],
            int(m["owner"]),
            int(m["origin"]),
            m["op"],
            m["args"],
            RequestState(m["state"]),
            m["outcome"],
        )

    async def pending_requests(self, owner: int) -> list[str]:
        return list(await self._conn.scalars(_PENDING_FOR, {"p_owner": owner}))

    async def move_request(
        self,
        request_id: str,
        from_state: RequestState,
        to_state: RequestState,
        outcome: str | None = None,
    ) -> bool:
        """``from_state`` → ``to_state`` (with ``outcome``); False when it was not in
        ``from_state`` (the other side moved it first)."""
        params = {
            "p_id": request_id,
            "p_from": from_state.value,
            "p_to": to_state.value,
            "p_outcome": outcome,
        }
        return (await self._conn.execute(_MOVE, params)).one_or_none() is not None
