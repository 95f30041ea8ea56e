"""Request statements of :class:`~turnqueue.store.tx.SqlTx`: three kinds of request kept as rows
at least :data:`KEPT`, each written inside the caller's unit of work: keyed sends (Q15, read back
by a retry of the same key; both under the session's lock row, so two sends racing with one key
are serialised), steer requests (Q16) and owner requests (M4).

A request moves on by a conditional ``UPDATE … WHERE state = …``, so of two sides racing (an
owner claiming a request, its requester withdrawing it) exactly one wins. Old rows go with the
next insert of their scope (no background task).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from sqlalchemy import BigInteger, Table, bindparam, delete, insert, select, update

from turnqueue.domain import OwnerRequest, RequestState, SentMessage, SteerRequest, new_id, utcnow
from turnqueue.store.rows import RowMap, values_of
from turnqueue.store.statement import Conn, Statement, Statements
from turnqueue.store.tables import UtcDateTime, owner_requests, sent_messages, steer_requests

#: Q15: keys are kept at least this long (and the other requests as long).
KEPT = timedelta(hours=24)
PENDING = RequestState.PENDING.value  # the steer requests' PENDING too


class Kept:
    """The insert of a table whose rows are kept at least :data:`KEPT`: it first deletes the
    rows of its ``scope`` (a column, the parameter ``p_<scope>``) created longer ago. It writes
    ``fixed`` as given, ``created_at``, and every other column from the parameter
    ``p_<column>``."""

    def __init__(self, table: Table, scope: str, **fixed: Any) -> None:
        self._scope = f"p_{scope}"
        self._prune = Statement(
            delete(table).where(
                table.c[scope] == bindparam(self._scope),
                table.c.created_at < bindparam("p_before", type_=UtcDateTime),
            )
        )
        created_at = bindparam("p_now", type_=UtcDateTime)
        values: dict[str, Any] = {c.key: bindparam(f"p_{c.key}") for c in table.c}
        values.update(fixed, created_at=created_at)
        self._insert = Statement(insert(table).values(**values))

    async def add(self, conn: Conn, params: Mapping[str, Any]) -> None:
        now = utcnow()
        await conn.execute(self._prune, {self._scope: params[self._scope], "p_before": now - KEPT})
        await conn.execute(self._insert, {**params, "p_now": now})

    async def add_new(self, conn: Conn, params: Mapping[str, Any]) -> str:
        """:meth:`add` a row with a new id (the parameter ``p_id``); that id."""
        row_id = new_id()
        await self.add(conn, {**params, "p_id": row_id})
        return row_id


_sm, _sr, _r = sent_messages, steer_requests, owner_requests
_SENT = RowMap(SentMessage)
_FIND_SENT = Statement(
    select(_sm).where(
        _sm.c.session_id == bindparam("p_session_id"), _sm.c.key == bindparam("p_key")
    )
)
_RECORD_SENT = Kept(_sm, "session_id")
_STEER = RowMap(SteerRequest)
_ADD_STEER = Kept(_sr, "session_id", state=PENDING)
_GET_STEER = Statement(select(_sr).where(_sr.c.id == bindparam("p_id")))
_PENDING_STEERS = Statement(
    select(_sr)
    .where(_sr.c.session_id == bindparam("p_session_id"), _sr.c.state == PENDING)
    .order_by(_sr.c.created_at, _sr.c.id)
)
_DECIDE_STEER = Statement(
    update(_sr)
    .where(_sr.c.id == bindparam("p_id"), _sr.c.state == PENDING)
    .values(state=bindparam("p_state"))
    .returning(_sr.c.id)
)
_REQUEST = RowMap(OwnerRequest)
_ADD_REQUEST = Kept(_r, "owner", state=PENDING, outcome=None)
_GET_REQUEST = Statement(select(_r).where(_r.c.id == bindparam("p_id")))
_PENDING_REQUESTS = Statement(
    select(_r.c.id)
    .where(_r.c.owner == bindparam("p_owner", type_=BigInteger), _r.c.state == PENDING)
    .order_by(_r.c.created_at, _r.c.id)
)
_MOVE_REQUEST = Statement(
    update(_r)
    .where(_r.c.id == bindparam("p_id"), _r.c.state == bindparam("p_from"))
    .values(state=bindparam("p_to"), outcome=bindparam("p_outcome"))
    .returning(_r.c.id)
)


class RequestStatements(Statements):
    # -- keyed sends (Q15) ----------------------------------------------------------------------
    async def sent_message(self, session_id: str, key: str) -> SentMessage | None:
        """What a send of the session with this ``clientMessageId`` did, if one was recorded."""
        params = {"p_session_id": session_id, "p_key": key}
        return await self._conn.maybe(_FIND_SENT, params, _SENT)

    async def record_sent_message(self, session_id: str, sent: SentMessage) -> None:
        """Record what a keyed send did (and forget the session's keys past their day)."""
        await _RECORD_SENT.add(self._conn, {"p_session_id": session_id, **values_of(sent, "p_")})

    # -- steer requests (Q16) -------------------------------------------------------------------
    async def add_steer_request(self, session_id: str, turn_id: str, entry_id: str) -> str:
        """Offer the queued entry to the running turn; the request's id (PENDING)."""
        params = {"p_session_id": session_id, "p_turn_id": turn_id, "p_entry_id": entry_id}
        return await _ADD_STEER.add_new(self._conn, params)

    async def steer_request(self, request_id: str) -> SteerRequest | None:
        return await self._conn.maybe(_GET_STEER, {"p_id": request_id}, _STEER)

    async def pending_steers(self, session_id: str) -> list[SteerRequest]:
        """The session's undecided requests, oldest first."""
        rows = await self._conn.execute(_PENDING_STEERS, {"p_session_id": session_id})
        return [_STEER(row) for row in rows.all()]

    async def decide_steer(self, request_id: str, state: str) -> bool:
        """Decide a PENDING request (``state``: a SendOutcome), exactly once: False when it was
        decided already."""
        params = {"p_id": request_id, "p_state": state}
        return (await self._conn.execute(_DECIDE_STEER, params)).one_or_none() is not None

    # -- owner requests (M4) --------------------------------------------------------------------
    async def add_request(self, owner: int, origin: int, op: str, args: str) -> str:
        """Ask instance ``owner`` to run ``op`` (``args``: JSON); the request's id (PENDING)."""
        params = {"p_owner": owner, "p_origin": origin, "p_op": op, "p_args": args}
        return await _ADD_REQUEST.add_new(self._conn, params)

    async def owner_request(self, request_id: str) -> OwnerRequest | None:
        return await self._conn.maybe(_GET_REQUEST, {"p_id": request_id}, _REQUEST)

    async def pending_requests(self, owner: int) -> list[str]:
        """The ids of the PENDING requests asked of ``owner``, oldest first."""
        return list(await self._conn.scalars(_PENDING_REQUESTS, {"p_owner": owner}))

    async def move_request(
        self,
        request_id: str,
        from_state: RequestState,
        to_state: RequestState,
        outcome: str | None = None,
    ) -> bool:
        """Move a request on, exactly once: False when it was not in ``from_state`` (the other
        side moved it first)."""
        params = {
            "p_id": request_id,
            "p_from": from_state.value,
            "p_to": to_state.value,
            "p_outcome": outcome,
        }
        return (await self._conn.execute(_MOVE_REQUEST, params)).one_or_none() is not None
