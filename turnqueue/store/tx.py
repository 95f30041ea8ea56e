r"""``SqlTx``: the :class:`~turnqueue.store.protocol.Tx` interface in SQLAlchemy Core.

One ``SqlTx`` wraps one :class:`~turnqueue.store.conn.Conn` inside a transaction owned by
:class:`~turnqueue.store.sql.SqlStore`. Nothing here commits. The dialect differences
(``FOR UPDATE``, the epoch source, upserts) are the ``_pg`` branches of this class and nowhere else.

Statements on the hot paths are :class:`~turnqueue.store.statement.Statement`\ s, built once
and compiled once per dialect; the others are compiled on each call.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Executable,
    Insert,
    String,
    Text,
    Update,
    and_,
    bindparam,
    case,
    delete,
    false,
    func,
    insert,
    literal_column,
    select,
    true,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite

from turnqueue.domain import (
    Clarification,
    MessageSource,
    PauseReason,
    Session,
    SessionState,
    Task,
    Turn,
    TurnStatus,
    new_id,
    utcnow,
)
from turnqueue.store.approvals import ApprovalStatements
from turnqueue.store.conn import AnyRow, Conn
from turnqueue.store.entries import EntryStatements
from turnqueue.store.instances import InstanceStatements
from turnqueue.store.output import OutputStatements
from turnqueue.store.protocol import SessionView
from turnqueue.store.rows import (
    RUNNING,
    SESSION,
    VIEW,
    Prefixed,
    session_from,
    task_from,
    turn_from,
    view_from,
)
from turnqueue.store.statement import Statement
from turnqueue.store.tables import (
    UtcDateTime,
    clarifications,
    epoch_seq,
    epochs,
    queue_entries,
    queue_session_locks,
    queue_session_state,
    sessions,
    tasks,
    turns,
)

log = logging.getLogger(__name__)
qe = queue_entries
locks = queue_session_locks

# -- prebuilt statements (see turnqueue.store.rows): executed with a parameter dict -------------
_LOCK = Statement(
    select(locks.c.session_id)
    .where(locks.c.session_id == bindparam("p_session_id"))
    .with_for_update()
)
_FLOOR = bindparam("p_floor", type_=BigInteger)
_BUMP_QUEUE = Statement(
    update(locks)
    .where(locks.c.session_id == bindparam("p_session_id"))
    .values(
        revision=locks.c.revision + 1,
        # R2: the floor only rises (greatest() is not portable: SQLite has no such function).
        cancel_floor=case((locks.c.cancel_floor < _FLOOR, _FLOOR), else_=locks.c.cancel_floor),
    )
    .returning(locks.c.revision, locks.c.cancel_floor)
)
_RAISE_FLOOR = Statement(
    update(locks)
    .where(locks.c.session_id == bindparam("p_session_id"), locks.c.cancel_floor < _FLOOR)
    .values(cancel_floor=_FLOOR)
)
_SET_CANCEL_MARK = Statement(
    update(locks)
    .where(locks.c.session_id == bindparam("p_session_id"))
    .values(cancel_mark=bindparam("p_mark"))
)


def _session_bump(*, with_state: bool) -> Update:
    values: dict[str, Any] = {
        "revision": sessions.c.revision + 1,
        "updated_at": bindparam("p_now", type_=UtcDateTime),
    }
    if with_state:
        values["state"] = bindparam("p_state", type_=String)
    return (
        update(sessions)
        .where(sessions.c.id == bindparam("p_session_id"))
        .values(**values)
        .returning(sessions.c.revision)
    )


_BUMP_SESSION = Statement(_session_bump(with_state=False))
_BUMP_SESSION_STATE = Statement(_session_bump(with_state=True))


def _end_session(session_id: Any) -> Update:
    """A turn's end: the session's new state, and the whole session back (its task's owner by a
    subquery: SQLite's RETURNING cannot name an UPDATE … FROM table). A session whose task
    reached the workflow's last step while the turn ran completes instead of waiting for input
    (``complete_on_idle``, set by :meth:`SqlTx.set_complete_on_idle`), whichever path ends it."""
    state = bindparam("p_state", type_=String)
    completes = and_(sessions.c.complete_on_idle, state == SessionState.WAITING_FOR_INPUT.value)
    return (
        update(sessions)
        .where(sessions.c.id == session_id)
        .values(
            revision=sessions.c.revision + 1,
            updated_at=bindparam("p_now", type_=UtcDateTime),
            state=case((completes, SessionState.COMPLETED.value), else_=state),
            complete_on_idle=false(),
        )
        .returning(
            *sessions.c,
            select(tasks.c.owner)
            .where(tasks.c.id == sessions.c.task_id)
            .scalar_subquery()
            .label("owner"),
        )
    )


_END_SESSION = Statement(_end_session(bindparam("p_session_id")))
_TURN_COLUMNS = ["id", "session_id", "seq", "prompt", "source", "status", "output", "started_at"]
#: The next per-session ``seq`` is computed in the INSERT itself.
_insert_turn = insert(turns).from_select(
    [*_TURN_COLUMNS, "owner"],
    select(
        bindparam("p_turn_id", type_=String),
        bindparam("p_session_id", type_=String),
        func.coalesce(func.max(turns.c.seq), 0) + 1,
        bindparam("p_prompt", type_=Text),
        bindparam("p_source", type_=String),
        RUNNING,
        literal_column("''", String),
        bindparam("p_now", type_=UtcDateTime),
        bindparam("p_owner", type_=BigInteger),
    ).where(turns.c.session_id == bindparam("p_session_id")),
)
_INSERT_TURN = Statement(_insert_turn)
#: The usual case, one entry (several: an IN list compiled per call, see statement.py).
_consume_one = delete(qe).where(qe.c.id == bindparam("p_id"), qe.c.in_flight == true())
_CONSUME_ONE = Statement(_consume_one)
#: PostgreSQL: ``start_turn`` in one round trip, as one statement with data-modifying WITH
#: clauses (SQLite has none; there a statement costs no round trip). All three see the same
#: snapshot and touch different tables. Keyed by whether an entry is consumed.
_START_TURN_PG = {
    consumes: Statement(
        select(_bumped.c.revision).add_cte(
            _insert_turn.cte("started"), *([_consume_one.cte("consumed")] if consumes else [])
        )
    )
    for consumes in (False, True)
    for _bumped in [_session_bump(with_state=True).cte("bumped")]
}
_end_turn = (
    update(turns)
    .where(turns.c.id == bindparam("p_turn_id"), turns.c.status == RUNNING)
    .values(
        status=bindparam("p_status", type_=String),
        output=bindparam("p_output", type_=Text),
        error=bindparam("p_error", type_=Text),
        ended_at=bindparam("p_now", type_=UtcDateTime),
    )
    .returning(*turns.c)
)
_END_TURN = Statement(_end_turn)
_ended = _end_turn.cte("ended")
_ended_session = _end_session(_ended.c.session_id).cte("ended_session")
#: PostgreSQL: ``end_turn`` in one round trip (a data-modifying WITH), the turn's columns
#: prefixed ``turn_`` and the session's ``session_``. No row: the turn was not RUNNING.
_END_TURN_PG = Statement(
    select(
        *(c.label(f"turn_{c.key}") for c in _ended.c),
        *(c.label(f"session_{c.key}") for c in _ended_session.c),
    ).select_from(_ended.join(_ended_session, true()))
)
_TURN = Statement(select(turns).where(turns.c.id == bindparam("p_turn_id")))
_TASK = Statement(select(tasks).where(tasks.c.id == bindparam("p_task_id")))


def _upsert(table: Any, keys: list[str], *, pg: bool, **values: Any) -> Insert:
    dialect_insert = postgresql.insert if pg else sqlite.insert
    stmt = dialect_insert(table).values(**values)
    updates = {k: stmt.excluded[k] for k in values if k not in keys}
    return stmt.on_conflict_do_update(index_elements=keys, set_=updates)


#: Q1, Q14: the policy row, by dialect (``pg``).
_SET_POLICY = {
    pg: Statement(
        _upsert(
            queue_session_state,
            ["session_id"],
            pg=pg,
            session_id=bindparam("p_session_id", type_=String),
            auto_run=bindparam("p_auto_run", type_=Boolean),
            pause_reason=bindparam("p_pause_reason", type_=String),
        )
    )
    for pg in (False, True)
}
_DELETE_POLICY = Statement(
    delete(queue_session_state).where(queue_session_state.c.session_id == bindparam("p_session_id"))
)


class SqlTx(EntryStatements, InstanceStatements, OutputStatements, ApprovalStatements):
    def __init__(self, conn: Conn, *, pg: bool) -> None:
        self._conn = conn
        self._pg = pg
        self._callbacks: list[Callable[[], object]] = []
        self._notifications: list[str] = []
        self._queue_revisions: dict[str, tuple[int, int]] = {}

    # -- plumbing ---------------------------------------------------------------------------
    def after_commit(self, callback: Callable[[], object]) -> None:
        self._callbacks.append(callback)

    async def run_after_commit(self) -> None:
        """Called by the store once COMMIT succeeded: in order, each failure logged only."""
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            try:
                result = callback()
                if inspect.isawaitable(result):
                    await result
            except Exception:
                log.exception("after_commit callback %r failed", callback)

    async def _bump_session(self, session_id: str, state: SessionState | None = None) -> int:
        params: dict[str, Any] = {"p_session_id": session_id, "p_now": utcnow()}
        if state is None:
            result = await self._conn.execute(_BUMP_SESSION, params)
        else:
            result = await self._conn.execute(
                _BUMP_SESSION_STATE, {**params, "p_state": state.value}
            )
        revision = result.scalar_one_or_none()
        if revision is None:
            raise KeyError(session_id)
        return int(revision)

    async def fetch(self, statement: Executable) -> list[AnyRow]:
        """The rows of a query the store built (its read helpers)."""
        return (await self._conn.execute(statement)).all()

    # -- epochs (R2) ------------------------------------------------------------------------
    async def next_epoch(self) -> int:
        if self._pg:
            value = await self._conn.scalar(select(epoch_seq.next_value()))
        else:
            value = await self._conn.scalar(
                insert(epochs).values(created_at=utcnow()).returning(epochs.c.id)
            )
        assert value is not None
        return int(value)

    # -- tasks and sessions -----------------------------------------------------------------
    async def create_task(self, *, title: str, owner: str, workflow_step: str) -> Task:
        task = Task(new_id(), title, owner, workflow_step, None, utcnow())
        values = {
            "id": task.id,
            "title": title,
            "owner": owner,
            "workflow_step": workflow_step,
            "current_session_id": None,
            "created_at": task.created_at,
        }
        await self._conn.execute(insert(tasks), values)
        return task

    async def set_task_step(self, task_id: str, step: str, current_session_id: str) -> Task:
        result = await self._conn.execute(
            update(tasks)
            .where(tasks.c.id == task_id)
            .values(workflow_step=step, current_session_id=current_session_id)
            .returning(*tasks.c)
        )
        row = result.one_or_none()
        if row is None:
            raise KeyError(task_id)
        return task_from(row)

    async def create_session(self, *, task_id: str, agent: str, state: SessionState) -> Session:
        now = utcnow()
        session_id = new_id()
        owner = await self._conn.scalar(
            update(tasks)
            .where(tasks.c.id == task_id)
            .values(current_session_id=session_id)
            .returning(tasks.c.owner)
        )
        if owner is None:
            raise KeyError(task_id)
        session = Session(session_id, task_id, owner, agent, state, 1, now, now)
        values = {
            "id": session_id,
            "task_id": task_id,
            "agent": agent,
            "state": state.value,
            "revision": 1,
            "created_at": now,
            "updated_at": now,
        }
        await self._conn.execute(insert(sessions), values)
        await self._conn.execute(insert(locks), {"session_id": session_id, "revision": 0})
        return session

    async def get_task(self, task_id: str) -> Task | None:
        row = (await self._conn.execute(_TASK, {"p_task_id": task_id})).one_or_none()
        return task_from(row) if row is not None else None

    async def get_session(self, session_id: str) -> Session | None:
        row = (await self._conn.execute(SESSION, {"p_session_id": session_id})).one_or_none()
        return session_from(row) if row is not None else None

    async def set_complete_on_idle(self, session_id: str, complete: bool) -> None:
        await self._conn.execute(
            update(sessions).where(sessions.c.id == session_id).values(complete_on_idle=complete)
        )

    async def touch_starting(self, session_id: str) -> None:
        """Keep a STARTING session's ``updated_at`` fresh while its agent starts (A2), so
        recovery does not take it for one a dead instance left STARTING."""
        await self._conn.execute(
            update(sessions)
            .where(sessions.c.id == session_id, sessions.c.state == SessionState.STARTING.value)
            .values(updated_at=utcnow())
        )

    async def bump_session(self, session_id: str) -> int:
        """A new session revision (and ``updated_at``) without a state change (A6)."""
        return await self._bump_session(session_id)

    async def set_session_state(self, session_id: str, state: SessionState) -> Session:
        await self._bump_session(session_id, state)
        session = await self.get_session(session_id)
        assert session is not None
        return session

    async def lock(self, session_id: str) -> SessionView:
        params = {"p_session_id": session_id}
        # Q3: the lock row serialises every reservation and policy write of this session.
        # HAZARD: on PostgreSQL it must be its own statement. Under READ COMMITTED a statement's
        # snapshot is taken when it starts; a joined SELECT … FOR UPDATE that waited for the
        # lock re-reads only the locked row and would return the *old* policy, entries and
        # clarification. The view below is a new statement, so it sees what the previous
        # holder committed.
        # SQLite: the transaction began IMMEDIATE behind the writer lock: the only writer.
        if self._pg and await self._conn.scalar(_LOCK, params) is None:
            raise KeyError(session_id)
        row = (await self._conn.execute(VIEW, params)).one_or_none()
        if row is None:
            raise KeyError(session_id)
        return view_from(row)

    async def view(self, session_id: str) -> SessionView | None:
        row = (await self._conn.execute(VIEW, {"p_session_id": session_id})).one_or_none()
        return view_from(row) if row is not None else None

    # -- turns ------------------------------------------------------------------------------
    async def start_turn(
        self,
        session_id: str,
        *,
        prompt: str,
        source: MessageSource,
        consume: Sequence[str] = (),
        owner: int | None = None,
    ) -> Turn:
        now = utcnow()
        turn = Turn(
            new_id(), session_id, prompt, source, TurnStatus.RUNNING, "", None, now, None, owner
        )
        params = {
            "p_turn_id": turn.id,
            "p_session_id": session_id,
            "p_prompt": prompt,
            "p_source": source.value,
            "p_now": now,
            "p_owner": owner,
            "p_state": SessionState.RUNNING.value,
        }

        # Q10: the reserved entries disappear in the same transaction as the turn appears.
        if self._pg and len(consume) <= 1:
            one = {**params, "p_id": consume[0]} if consume else params
            if await self._conn.scalar(_START_TURN_PG[bool(consume)], one) is None:
                raise KeyError(session_id)
            return turn
        if (await self._conn.execute(_BUMP_SESSION_STATE, params)).scalar_one_or_none() is None:
            raise KeyError(session_id)
        await self._conn.execute(_INSERT_TURN, params)
        if len(consume) == 1:
            await self._conn.execute(_CONSUME_ONE, {"p_id": consume[0]})
        elif consume:
            await self._conn.execute(
                delete(qe).where(qe.c.id.in_(list(consume)), qe.c.in_flight == true())
            )
        return turn

    async def end_turn(
        self,
        turn_id: str,
        *,
        status: TurnStatus,
        output: str,
        error: str | None,
        session_state: SessionState,
    ) -> tuple[Turn, Session]:
        params = {
            "p_turn_id": turn_id,
            "p_status": status.value,
            "p_output": output,
            "p_error": error,
            "p_now": utcnow(),
            "p_state": session_state.value,
        }

        conn = self._conn
        if self._pg:
            both = (await conn.execute(_END_TURN_PG, params)).one_or_none()
            if both is not None:
                return turn_from(Prefixed(both, "turn_")), session_from(Prefixed(both, "session_"))
            row = None
        else:
            row = (await conn.execute(_END_TURN, params)).one_or_none()
        if row is None:  # already ended (or unknown): idempotent, nothing changes
            row = (await conn.execute(_TURN, params)).one_or_none()
            if row is None:
                raise KeyError(turn_id)
            session_row = (await conn.execute(SESSION, {"p_session_id": row.session_id})).one()
        else:
            bump = {**params, "p_session_id": row.session_id}
            session_row = (await conn.execute(_END_SESSION, bump)).one_or_none()
            if session_row is None:
                raise KeyError(row.session_id)
        return turn_from(row), session_from(session_row)

    async def get_turn(self, turn_id: str) -> Turn | None:
        row = (await self._conn.execute(_TURN, {"p_turn_id": turn_id})).one_or_none()
        return turn_from(row) if row is not None else None

    async def running_turns(self) -> list[Turn]:
        stmt = select(turns).where(turns.c.status == RUNNING).order_by(turns.c.started_at)
        return [turn_from(row) for row in await self._conn.execute(stmt)]

    # -- clarifications ---------------------------------------------------------------------
    async def set_clarification(
        self, session_id: str, *, turn_id: str | None, question: str
    ) -> Clarification:
        clarification = Clarification(new_id(), session_id, turn_id, question, utcnow())
        values = {
            "id": clarification.id,
            "session_id": session_id,
            "turn_id": turn_id,
            "question": question,
            "asked_at": clarification.asked_at,
        }
        await self._conn.execute(_upsert(clarifications, ["session_id"], pg=self._pg, **values))
        await self._bump_session(session_id)
        return clarification

    async def clear_clarification(self, session_id: str) -> Clarification | None:
        result = await self._conn.execute(
            delete(clarifications)
            .where(clarifications.c.session_id == session_id)
            .returning(*clarifications.c)
        )
        row = result.one_or_none()
        if row is None:
            return None
        await self._bump_session(session_id)
        m = row._mapping
        return Clarification(m["id"], session_id, m["turn_id"], m["question"], m["asked_at"])

    # -- queue policy (Q1, Q14) and revision (Q13) ------------------------------------------
    async def set_policy(
        self, session_id: str, *, auto_run: bool, pause_reason: PauseReason | None
    ) -> None:
        params = {
            "p_session_id": session_id,
            "p_auto_run": auto_run,
            "p_pause_reason": pause_reason.value if pause_reason is not None else None,
        }
        await self._conn.execute(_SET_POLICY[self._pg], params)

    async def delete_policy(self, session_id: str) -> None:
        await self._conn.execute(_DELETE_POLICY, {"p_session_id": session_id})

    async def bump_queue_revision(self, session_id: str) -> int:
        # One revision per transaction and session (Q13): a second change in the same
        # transaction (a turn's end, then the turn its drain starts) commits with the first,
        # so no snapshot can show the state between them; it shares the first's revision.
        revision, _ = await self.bump_queue(session_id, 0)
        return revision

    async def bump_queue(self, session_id: str, cancel_floor: int) -> tuple[int, int]:
        bumped = self._queue_revisions.get(session_id)
        if bumped is None:
            params = {"p_session_id": session_id, "p_floor": cancel_floor}
            row = (await self._conn.execute(_BUMP_QUEUE, params)).one_or_none()
            if row is None:
                raise KeyError(session_id)
            bumped = self._queue_revisions[session_id] = (int(row[0]), int(row[1]))
        elif cancel_floor > bumped[1]:  # a second change in this transaction knows more
            params = {"p_session_id": session_id, "p_floor": cancel_floor}
            await self._conn.execute(_RAISE_FLOOR, params)
            bumped = self._queue_revisions[session_id] = (bumped[0], cancel_floor)
        return bumped

    async def set_cancel_mark(self, session_id: str, turn_id: str | None) -> None:
        await self._conn.execute(_SET_CANCEL_MARK, {"p_session_id": session_id, "p_mark": turn_id})
