"""A session's queue, the queue statements of :class:`~turnqueue.store.tx.SqlTx`: its entries
(Q3, Q5, Q10, Q12, W3), the policy (Q1, Q14), the queue revision and the cancellation revision
on the lock row (Q13, C2), the cancel mark (Q7), the pending clarification and the runtime holds
(``session_holds``, Q9, C1).

Entries carry a stored sort key ``position`` (lowest first, ties by id) that may go below 1 after
a release; every returned ``QueueEntry.position`` is the 1-based ordinal among *visible* entries.
In-flight entries stay stored but hidden until ``start_turn`` consumes them (Q10).

Every statement here that changes what a queue status shows records its session as touched
(``_touched``): the transaction bumps that queue's revision before it commits (Q13), so no
revision is ever served with two states (R3).

The two upserts (the policy row, the clarification) are spelled by each dialect's ``insert``:
the backends give their own (``insert`` and ``policy_upsert`` below).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Insert,
    Integer,
    String,
    Table,
    Text,
    Update,
    bindparam,
    case,
    delete,
    exists,
    false,
    func,
    insert,
    select,
    true,
    update,
)

from turnqueue.domain import (
    Clarification,
    HoldReason,
    MessageSource,
    PauseReason,
    QueueEntry,
    new_id,
    utcnow,
)
from turnqueue.store.rows import RowMap, values_of
from turnqueue.store.statement import Record, Statement, Statements
from turnqueue.store.tables import (
    UtcDateTime,
    clarifications,
    queue_entries,
    queue_session_locks,
    queue_session_state,
    session_holds,
)

qe = queue_entries
locks = queue_session_locks
#: Visible entries: ``false()`` renders a literal on both dialects.
VISIBLE = qe.c.in_flight == false()
ENTRY_ORDER = (qe.c.position, qe.c.id)
#: An entry; its ``position`` is given: the 1-based place among visible entries (its ordinal),
#: never the stored sort key.
entry_from = RowMap(QueueEntry, skip=("position",))


def _head_entry(row: Record) -> QueueEntry:
    return entry_from(row, position=1)


def entries_from(rows: Sequence[Record]) -> list[QueueEntry]:
    return [entry_from(row, position=i) for i, row in enumerate(rows, start=1)]


# -- prebuilt statements (see turnqueue.store.rows) ---------------------------------------------
#: Visible entries of a session, FIFO.
VISIBLE_ENTRIES = Statement(
    select(qe).where(qe.c.session_id == bindparam("p_session_id"), VISIBLE).order_by(*ENTRY_ORDER)
)
#: (tail sort key, visible count). The tail is over in-flight entries too, so nothing visible
#: sorts after it; the count is the lock row's trigger-kept counter (no scan of the queue).
tail_select = select(
    select(func.coalesce(func.max(qe.c.position), 0))
    .where(qe.c.session_id == bindparam("p_session_id"))
    .scalar_subquery()
    .label("tail"),
    select(locks.c.queued)
    .where(locks.c.session_id == bindparam("p_session_id"))
    .scalar_subquery()
    .label("visible"),
)
_TAIL = Statement(tail_select)
ENTRY_VALUES = {
    "id": bindparam("p_id", type_=String),
    "session_id": bindparam("p_session_id", type_=String),
    "content": bindparam("p_content", type_=Text),
    "source": bindparam("p_source", type_=String),
    "queued_at": bindparam("p_now", type_=UtcDateTime),
    "in_flight": false(),
    "client_message_id": bindparam("p_key", type_=String),
}
_INSERT_ENTRY = Statement(
    insert(qe).values(position=bindparam("p_position", type_=BigInteger), **ENTRY_VALUES)
)
_head = qe.alias("head")
# One statement. ``VISIBLE`` is repeated outside the subquery so that a concurrent reservation
# that did not take the lock row (a caller bug) re-checks it on PostgreSQL and reserves nothing
# instead of the same entry twice. It returns only the columns ``entry_from`` reads (the
# reservation's own columns are known to the caller).
_RESERVE_HEAD = Statement(
    update(qe)
    .where(
        qe.c.id
        == select(_head.c.id)
        .where(_head.c.session_id == bindparam("p_session_id"), _head.c.in_flight == false())
        .order_by(_head.c.position, _head.c.id)
        .limit(1)
        .scalar_subquery(),
        VISIBLE,
    )
    .values(
        in_flight=true(),
        reserved_at=bindparam("p_now", type_=UtcDateTime),
        reserved_by=bindparam("p_owner", type_=BigInteger),
    )
    .returning(*(qe.c[name] for name in entry_from.columns))
)

_UPDATE_ENTRY = Statement(
    update(qe)
    .where(qe.c.id == bindparam("p_id"), VISIBLE)
    .values(content=bindparam("p_content", type_=Text))
    .returning(*qe.c)
)
_position = bindparam("p_position", type_=BigInteger)
#: Visible entries ahead of one (its ordinal - 1).
_COUNT_BEFORE = Statement(
    select(func.count()).where(
        qe.c.session_id == bindparam("p_session_id"),
        VISIBLE,
        (qe.c.position < _position)
        | ((qe.c.position == _position) & (qe.c.id < bindparam("p_id", type_=String))),
    )
)


#: ``sqlalchemy.dialects.sqlite.insert`` or ``…postgresql.insert`` (both have ``on_conflict``).
DialectInsert = Callable[[Table], Any]


def _bump(column: Column[int]) -> Update:
    """The lock row's ``column`` counted up, returning its new value."""
    where = locks.c.session_id == bindparam("p_session_id")
    return update(locks).where(where).values({column: column + 1}).returning(column)


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
    .values(count=session_holds.c.count - 1)
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


def upsert(insert: DialectInsert, table: Table, keys: list[str], **values: Any) -> Insert:
    stmt = insert(table).values(**values)
    updates = {k: stmt.excluded[k] for k in values if k not in keys}
    result: Insert = stmt.on_conflict_do_update(index_elements=keys, set_=updates)
    return result


def add_hold_statement(insert: DialectInsert) -> Statement:
    """Q9: one more operation of an instance holds a session (one prebuilt per dialect)."""
    stmt = insert(session_holds).values(
        session_id=bindparam("p_session_id", type_=String),
        instance=bindparam("p_instance", type_=BigInteger),
        kind=bindparam("p_kind", type_=String),
        count=bindparam("p_one", type_=Integer),
    )
    return Statement(
        stmt.on_conflict_do_update(
            index_elements=["session_id", "instance", "kind"],
            set_={"count": session_holds.c.count + stmt.excluded.count},
        )
    )


def policy_upsert(insert: DialectInsert) -> Insert:
    """Q1, Q14: the policy row, upserted (prebuilt once per dialect)."""
    return upsert(
        insert,
        queue_session_state,
        ["session_id"],
        session_id=bindparam("p_session_id", type_=String),
        auto_run=bindparam("p_auto_run", type_=Boolean),
        pause_reason=bindparam("p_pause_reason", type_=String),
    )


def set_policy_bumped_statement(insert: DialectInsert) -> Statement:
    """Q1, Q13, Q14: the policy upserted and the queue revision bumped, in one statement
    (PostgreSQL's data-modifying ``WITH``: both see the transaction's snapshot and write
    different tables); answers the new revision."""
    return Statement(_BUMP_QUEUE_CLAUSE.add_cte(policy_upsert(insert).cte("policy")))


def _policy(session_id: str, auto_run: bool, pause_reason: PauseReason | None) -> dict[str, Any]:
    return {
        "p_session_id": session_id,
        "p_auto_run": auto_run,
        "p_pause_reason": pause_reason.value if pause_reason is not None else None,
    }


class QueueStatements(Statements):
    """Needs ``self._queue_revisions`` (per transaction, empty at its start),
    ``self.bump_session`` and the dialect's ``_insert``, ``_set_policy`` and ``_add_hold``
    (``_set_policy_bumped`` where the dialect can write the policy and bump the revision in one
    statement)."""

    _queue_revisions: dict[str, int]
    _insert: ClassVar[DialectInsert]
    _set_policy: ClassVar[Statement]
    _set_policy_bumped: ClassVar[Statement | None] = None
    _add_hold: ClassVar[Statement]

    async def bump_session(self, session_id: str) -> int:
        raise NotImplementedError

    # -- clarifications ---------------------------------------------------------------------
    async def set_clarification(
        self, session_id: str, *, turn_id: str | None, question: str
    ) -> Clarification:
        """Replace the session's pending clarification; bumps the session revision."""
        clarification = Clarification(new_id(), session_id, turn_id, question, utcnow())
        values = values_of(clarification)
        await self._conn.execute(
            upsert(type(self)._insert, clarifications, ["session_id"], **values)
        )
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
        await self._conn.execute(self._set_policy, _policy(session_id, auto_run, pause_reason))
        self._touched[session_id] = None

    async def set_policy_bumped(
        self, session_id: str, *, auto_run: bool, pause_reason: PauseReason | None
    ) -> int:
        """:meth:`set_policy`, then :meth:`bump_queue`; the queue revision. One statement
        where the dialect can (PostgreSQL), and when the revision was not bumped yet."""
        statement = self._set_policy_bumped
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
            await self._conn.execute(self._add_hold, {**params, "p_one": delta})
        else:
            for _ in range(-delta):
                left = await self._conn.scalar(_DROP_HOLD, params)
                if left is not None and left <= 0:
                    await self._conn.execute(_DELETE_HOLD, params)
                    break
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
        # One revision per transaction and session (Q13): a second change in the same
        # transaction (a turn's end, then the turn its drain starts) commits with the first,
        # so no snapshot can show the state between them; it shares the first's revision.
        """Increment the durable queue revision kept on the lock row (never deleted), once per
        transaction: a second call in the same transaction returns the same revision."""
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

    # -- entries ----------------------------------------------------------------------------
    async def list_entries(self, session_id: str) -> list[QueueEntry]:
        """Visible entries (not in flight), FIFO order.

        ``QueueEntry.position`` is always the 1-based place among the visible entries (1 = head),
        whatever the stored sort key is, in every method that returns entries."""
        result = await self._conn.execute(VISIBLE_ENTRIES, {"p_session_id": session_id})
        return entries_from(result.all())

    async def add_entry(
        self,
        session_id: str,
        *,
        content: str,
        source: MessageSource,
        client_message_id: str | None = None,
    ) -> QueueEntry:
        """Append at the tail (with the key of the send that queued it, Q15)."""
        entry_id, queued_at = new_id(), utcnow()
        params = {
            "p_id": entry_id,
            "p_session_id": session_id,
            "p_content": content,
            "p_source": source.value,
            "p_now": queued_at,
            "p_key": client_message_id,
        }
        visible = await self._insert_entry(params)
        self._touched[session_id] = None
        ordinal = int(visible or 0) + 1  # no session: the INSERT failed on the foreign key
        return QueueEntry(
            entry_id, session_id, ordinal, content, source, queued_at, client_message_id
        )

    async def _insert_entry(self, params: dict[str, Any]) -> int | None:
        """Insert at the tail; the visible count before it."""
        tail, visible = (await self._conn.execute(_TAIL, params)).one()
        await self._conn.execute(_INSERT_ENTRY, {**params, "p_position": int(tail) + 1})
        return int(visible) if visible is not None else None

    async def update_entry(self, entry_id: str, *, content: str) -> QueueEntry:
        params = {"p_id": entry_id, "p_content": content}
        row = await self._conn.one(_UPDATE_ENTRY, params, entry_id)
        self._touched[row.session_id] = None
        params = {"p_id": row.id, "p_session_id": row.session_id, "p_position": row.position}
        before = await self._conn.scalar(_COUNT_BEFORE, params)
        return entry_from(row, position=int(before or 0) + 1)

    async def remove_entries(self, session_id: str, entry_ids: Sequence[str] | None) -> int:
        """Delete visible entries (all of them when ``entry_ids`` is None). Returns the count."""
        stmt = delete(qe).where(qe.c.session_id == session_id, VISIBLE)
        if entry_ids is not None:
            stmt = stmt.where(qe.c.id.in_(list(entry_ids)))
        removed = int((await self._conn.execute(stmt)).rowcount)
        if removed:
            self._touched[session_id] = None
        return removed

    async def reorder_entries(self, session_id: str, ordered_ids: Sequence[str]) -> None:
        """Give the visible entries positions in this order (caller checked it is exactly them)."""
        await self._set_positions(session_id, {eid: i for i, eid in enumerate(ordered_ids, 1)})
        self._touched[session_id] = None

    async def _set_positions(
        self, session_id: str, positions: dict[str, int], **values: Any
    ) -> None:
        """One UPDATE giving each entry its sort key (plus any other ``values``)."""
        if not positions:
            return
        await self._conn.execute(
            update(qe)
            .where(qe.c.session_id == session_id, qe.c.id.in_(list(positions)))
            .values(position=case(positions, value=qe.c.id), **values)
        )

    async def reserve_head(self, session_id: str, *, owner: int | None = None) -> QueueEntry | None:
        """Mark the FIFO head in flight (reserved by ``owner``) and return it (None when empty)."""
        params = {"p_session_id": session_id, "p_now": utcnow(), "p_owner": owner}
        entry = await self._conn.maybe(_RESERVE_HEAD, params, _head_entry)
        if entry is not None:
            self._touched[session_id] = None
        return entry

    async def claim_entries(
        self, session_id: str, entry_ids: Sequence[str], *, owner: int | None = None
    ) -> list[QueueEntry]:
        """Mark exactly these visible entries in flight; returns those that were visible (the
        caller compares and rolls back when one is missing)."""
        wanted = set(entry_ids)
        visible = (await self._conn.execute(VISIBLE_ENTRIES, {"p_session_id": session_id})).all()
        # Ordinals are the places the entries had before the claim; FIFO order.
        claimed = [entry for entry in entries_from(visible) if entry.id in wanted]
        if not claimed:
            return []
        result = await self._conn.execute(
            update(qe)
            .where(qe.c.id.in_([e.id for e in claimed]), VISIBLE)
            .values(in_flight=True, reserved_at=utcnow(), reserved_by=owner)
            .returning(qe.c.id)
        )
        # Only what this UPDATE really marked (an unlocked concurrent claim may have won).
        marked = set(result.scalars())
        if marked:
            self._touched[session_id] = None
        return [entry for entry in claimed if entry.id in marked]

    async def release_entries(self, session_id: str, entry_ids: Sequence[str] | None) -> int:
        """Return in-flight entries (all of the session's when None) to the head of the queue,
        keeping their ids and their relative order (Q10). Returns how many."""
        stmt = select(qe.c.id, qe.c.session_id).where(qe.c.in_flight == true())
        if entry_ids is None:
            stmt = stmt.where(qe.c.session_id == session_id)
        else:
            # By id alone: an in-flight entry moved by a transfer (W3) returns to its new queue.
            stmt = stmt.where(qe.c.id.in_(list(entry_ids)))
        rows = (await self._conn.execute(stmt.order_by(*ENTRY_ORDER))).all()
        by_session: dict[str, list[str]] = {}
        for entry_id, owner_session in rows:
            by_session.setdefault(owner_session, []).append(entry_id)
        for sid, ids in by_session.items():
            head = await self._conn.scalar(
                select(func.min(qe.c.position)).where(qe.c.session_id == sid, VISIBLE)
            )
            # Q10: before the current head, relative order kept; the sort key may go below 1.
            base = int(head if head is not None else 1) - len(ids)
            positions = {eid: base + i for i, eid in enumerate(ids)}
            await self._set_positions(sid, positions, in_flight=False, reserved_at=None)
            self._touched[sid] = None
        return len(rows)

    async def count_in_flight(self, session_id: str, entry_ids: Sequence[str]) -> int:
        """How many of these entries are in flight in this session's queue (a Send Now checks
        that its claim is still its own before it starts, W3)."""
        stmt = select(func.count()).where(
            qe.c.session_id == session_id, qe.c.in_flight == true(), qe.c.id.in_(list(entry_ids))
        )
        return int(await self._conn.scalar(stmt) or 0)

    async def move_entries(self, source_id: str, destination_id: str) -> int:
        # Every entry moves, in-flight ones included (they keep their flag; see release_entries).
        """Move every entry of the source to the destination's tail, in order (W3)."""
        tail = await self._conn.scalar(
            select(func.max(qe.c.position)).where(qe.c.session_id == destination_id)
        )
        first = await self._conn.scalar(
            select(func.min(qe.c.position)).where(qe.c.session_id == source_id)
        )
        if first is None:
            return 0
        shift = int(tail if tail is not None else 0) + 1 - int(first)
        result = await self._conn.execute(
            update(qe)
            .where(qe.c.session_id == source_id)
            .values(session_id=destination_id, position=qe.c.position + shift)
        )
        self._touched[source_id] = None
        self._touched[destination_id] = None
        return int(result.rowcount)
