"""A session's queue entries, statements of :class:`~turnqueue.store.tx.SqlTx` (Q3, Q5, Q10, Q12,
W3). Entries carry a stored sort key ``position`` (lowest first, ties by id) that may go below 1
after a release; every returned ``QueueEntry.position`` is the 1-based ordinal among *visible*
entries. In-flight entries stay stored but hidden until ``start_turn`` consumes them (Q10).
Each write that changes a queue status marks its session touched (``_touched``, see
``SqlTx.changed_queues``).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from sqlalchemy import (
    BigInteger,
    String,
    Text,
    bindparam,
    case,
    delete,
    false,
    func,
    insert,
    select,
    true,
    update,
)

from turnqueue.domain import MessageSource, QueueEntry, new_id, utcnow
from turnqueue.store.rows import RowMap
from turnqueue.store.statement import Record, Statement, Statements
from turnqueue.store.tables import UtcDateTime, queue_entries, queue_session_locks

qe = queue_entries
locks = queue_session_locks
#: Visible entries: ``false()`` renders a literal on both dialects.
VISIBLE = qe.c.in_flight == false()
ENTRY_ORDER = (qe.c.position, qe.c.id)
#: An entry; its ``position`` is given: the 1-based place among visible entries (its ordinal),
#: never the stored sort key.
entry_from = RowMap(QueueEntry, skip=("position",))
_HEAD = partial(entry_from, position=1)


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


class EntryStatements(Statements):
    """The backend may override ``_insert_entry`` (PostgreSQL: one round trip)."""

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
        tail, visible = await self._conn.one(_TAIL, params, params["p_session_id"])
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
        entry = await self._conn.maybe(_RESERVE_HEAD, params, _HEAD)
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
