"""A session's queue state beside its entries (``store/entries.py``), statements of
:class:`~turnqueue.store.tx.SqlTx`: the policy (Q1, Q14), the queue and cancellation revisions on
the lock row (Q13, C2), the cancel mark (Q7), the pending clarification and the runtime holds
(``session_holds``, Q9, C1). Each write that changes a queue status marks its session touched
(``_touched``, see ``SqlTx.changed_queues``). The three upserts are spelled by each dialect's
``insert``: each backend builds its :class:`Upserts` once.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

from sqlalchemy import (
    BigInteger,
    Column,
    Insert,
    Integer,
    String,
    Table,
    Update,
    bindparam,
    delete,
    exists,
    select,
    update,
)

from turnqueue.domain import Clarification, HoldReason, PauseReason, new_id, utcnow
from turnqueue.store.rows import RowMap, values_of
from turnqueue.store.statement import Statement, Statements
from turnqueue.store.tables import (
    clarifications,
    queue_session_locks,
    queue_session_state,
    session_holds,
)

locks = queue_session_locks

#: ``sqlalchemy.dialects.sqlite.insert`` or ``…postgresql.insert`` (both have ``on_conflict``).
DialectInsert = Callable[[Table], Any]


def upsert(
    insert: DialectInsert, table: Table, keys: list[str], added: Collection[str] = ()
) -> Insert:
    """``INSERT … ON CONFLICT (keys) DO UPDATE`` of every column (the parameter ``p_<column>``):
    on a conflict every other column takes the new row's value, or, named in ``added``, the
    stored value plus the new one."""
    stmt = insert(table).values({c.key: bindparam(f"p_{c.key}") for c in table.c})
    updates = {
        c.key: c + stmt.excluded[c.key] if c.key in added else stmt.excluded[c.key]
        for c in table.c
        if c.key not in keys
    }
    result: Insert = stmt.on_conflict_do_update(index_elements=keys, set_=updates)
    return result


def _bump(column: Column[int]) -> Update:
    """The lock row's ``column`` counted up, returning its new value."""
    where = locks.c.session_id == bindparam("p_session_id")
    return update(locks).where(where).values({column: column + 1}).returning(column)


# -- prebuilt statements (see turnqueue.store.rows) ---------------------------------------------
_BUMP_QUEUE_CLAUSE = _bump(locks.c.revision)
_BUMP_QUEUE = Statement(_BUMP_QUEUE_CLAUSE)
_BUMP_CANCELLATION = Statement(_bump(locks.c.cancel_revision))
_SET_CANCEL_MARK = Statement(
    update(locks)
    .where(locks.c.session_id == bindparam("p_session_id"))
    .values(cancel_mark=bindparam("p_mark"))
)
_HOLD_KEY = (
    session_holds.c.session_id == bindparam("p_session_id"),
    session_holds.c.instance == bindparam("p_instance", type_=BigInteger),
    session_holds.c.kind == bindparam("p_kind", type_=String),
)
_DROP_HOLD = Statement(
    update(session_holds)
    .where(*_HOLD_KEY)
    .values(count=session_holds.c.count - bindparam("p_n", type_=Integer))
    .returning(session_holds.c.count)
)
_DELETE_HOLD = Statement(delete(session_holds).where(*_HOLD_KEY))
_HELD = Statement(
    select(
        exists().where(
            session_holds.c.session_id == bindparam("p_session_id"),
            session_holds.c.kind == bindparam("p_kind", type_=String),
        )
    )
)
_CLARIFICATION = RowMap(Clarification)
_DELETE_POLICY = Statement(
    delete(queue_session_state).where(queue_session_state.c.session_id == bindparam("p_session_id"))
)


@dataclass(frozen=True, slots=True)
class Upserts:
    """The statements a dialect spells with its own ``insert``, built once per backend."""

    #: Q1, Q14: the policy row.
    policy: Statement
    #: The session's pending clarification (parameters: its fields, prefixed ``p_``).
    clarification: Statement
    #: Q9: ``p_count`` more operations of an instance hold a session.
    hold: Statement
    #: Q1, Q13, Q14: the policy upserted and the queue revision bumped in one statement that
    #: answers the new revision (PostgreSQL's data-modifying ``WITH``); None elsewhere.
    policy_bumped: Statement | None

    @classmethod
    def of(cls, insert: DialectInsert, *, with_bump: bool = False) -> Upserts:
        policy = upsert(insert, queue_session_state, ["session_id"])
        hold = upsert(insert, session_holds, ["session_id", "instance", "kind"], added=("count",))
        bumped = _BUMP_QUEUE_CLAUSE.add_cte(policy.cte("policy")) if with_bump else None
        return cls(
            Statement(policy),
            Statement(upsert(insert, clarifications, ["session_id"])),
            Statement(hold),
            Statement(bumped) if bumped is not None else None,
        )


def _policy(session_id: str, auto_run: bool, pause_reason: PauseReason | None) -> dict[str, Any]:
    return {
        "p_session_id": session_id,
        "p_auto_run": auto_run,
        "p_pause_reason": pause_reason.value if pause_reason is not None else None,
    }


class QueueStateStatements(Statements):
    _queue_revisions: dict[str, int]
    _upserts: ClassVar[Upserts]

    async def bump_session(self, session_id: str) -> int:
        raise NotImplementedError

    # -- clarifications ---------------------------------------------------------------------
    async def set_clarification(
        self, session_id: str, *, turn_id: str | None, question: str
    ) -> Clarification:
        """Replace the session's pending clarification; bumps the session revision."""
        clarification = Clarification(new_id(), session_id, turn_id, question, utcnow())
        await self._conn.execute(self._upserts.clarification, values_of(clarification, "p_"))
        await self.bump_session(session_id)
        self._touched[session_id] = None
        return clarification

    async def clear_clarification(self, session_id: str) -> Clarification | None:
        """Remove and return the pending clarification (None if none); bumps the session
        revision only when there was one."""
        result = await self._conn.execute(
            delete(clarifications)
            .where(clarifications.c.session_id == session_id)
            .returning(*clarifications.c)
        )
        row = result.one_or_none()
        if row is None:
            return None
        await self.bump_session(session_id)
        self._touched[session_id] = None
        return _CLARIFICATION(row)

    # -- queue policy (Q1, Q14) and revision (Q13) ------------------------------------------
    async def set_policy(
        self, session_id: str, *, auto_run: bool, pause_reason: PauseReason | None
    ) -> None:
        """Upsert the ``queue_session_state`` row."""
        await self._conn.execute(self._upserts.policy, _policy(session_id, auto_run, pause_reason))
        self._touched[session_id] = None

    async def set_policy_bumped(
        self, session_id: str, *, auto_run: bool, pause_reason: PauseReason | None
    ) -> int:
        """:meth:`set_policy`, then :meth:`bump_queue`; the queue revision. One statement
        where the dialect can (PostgreSQL), and when the revision was not bumped yet."""
        statement = self._upserts.policy_bumped
        if statement is None or session_id in self._queue_revisions:
            await self.set_policy(session_id, auto_run=auto_run, pause_reason=pause_reason)
            return await self.bump_queue(session_id)
        params = _policy(session_id, auto_run, pause_reason)
        revision = (await self._conn.one(statement, params, session_id))[0]
        self._touched[session_id] = None
        bumped = self._queue_revisions[session_id] = int(revision)
        return bumped

    async def delete_policy(self, session_id: str) -> None:
        """Remove the policy row (W3); the session then reads auto-run true again."""
        await self._conn.execute(_DELETE_POLICY, {"p_session_id": session_id})
        self._touched[session_id] = None

    # -- runtime holds (Q9) ------------------------------------------------------------------
    async def change_hold(
        self, session_id: str, instance: int, kind: HoldReason, delta: int
    ) -> bool:
        """Count ``delta`` more (or, negative, fewer) holds of ``kind`` by ``instance``; the
        session holds ``kind`` while any instance's count is above zero. Whether it does now."""
        params = {"p_session_id": session_id, "p_instance": instance, "p_kind": kind.value}
        if delta > 0:
            await self._conn.execute(self._upserts.hold, {**params, "p_count": delta})
        else:
            left = await self._conn.scalar(_DROP_HOLD, {**params, "p_n": -delta})
            if left is not None and left <= 0:
                await self._conn.execute(_DELETE_HOLD, params)
        self._touched[session_id] = None
        return bool(
            await self._conn.scalar(_HELD, {"p_session_id": session_id, "p_kind": kind.value})
        )

    async def drop_orphaned_holds(self, session_id: str, live: Iterable[int]) -> int:
        """Delete the session's holds of instances not in ``live``; how many rows."""
        result = await self._conn.execute(
            delete(session_holds).where(
                session_holds.c.session_id == session_id,
                session_holds.c.instance.not_in(list(live)),
            )
        )
        if result.rowcount:
            self._touched[session_id] = None
        return int(result.rowcount)

    async def bump_queue(self, session_id: str) -> int:
        """Increment the durable queue revision on the lock row, once per transaction (Q13): a
        second change here (a turn's end, then the turn its drain starts) commits with the
        first, so no snapshot shows the state between them; it shares the first's revision."""
        bumped = self._queue_revisions.get(session_id)
        if bumped is None:
            row = await self._conn.one(_BUMP_QUEUE, {"p_session_id": session_id}, session_id)
            bumped = self._queue_revisions[session_id] = int(row[0])
        return bumped

    async def bump_cancellation(self, session_id: str) -> int:
        """Increment the session's durable cancellation revision (C2); the new revision."""
        params = {"p_session_id": session_id}
        return int((await self._conn.one(_BUMP_CANCELLATION, params, session_id))[0])

    async def set_cancel_mark(self, session_id: str, turn_id: str | None) -> None:
        """Record (or clear, with None) the turn an accepted explicit cancel stops (Q7)."""
        await self._conn.execute(_SET_CANCEL_MARK, {"p_session_id": session_id, "p_mark": turn_id})
