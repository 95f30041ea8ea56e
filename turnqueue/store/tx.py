"""``SqlTx``: the :class:`~turnqueue.store.protocol.Tx` interface in SQLAlchemy Core.

One ``SqlTx`` wraps one ``AsyncConnection`` inside a transaction owned by
:class:`~turnqueue.store.sql.SqlStore`. Nothing here commits. The dialect differences
(``FOR UPDATE``, the epoch source, upserts) are the ``_pg`` branches of this class and nowhere else.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import BigInteger, Insert, delete, func, insert, literal, select, true, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

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
from turnqueue.store.entries import EntryStatements
from turnqueue.store.instances import InstanceStatements
from turnqueue.store.protocol import SessionView
from turnqueue.store.rows import (
    RUNNING,
    select_sessions,
    select_view,
    session_from,
    task_from,
    turn_from,
    view_from,
)
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


class SqlTx(EntryStatements, InstanceStatements):
    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn
        self._pg = conn.dialect.name == "postgresql"
        self._callbacks: list[Callable[[], object]] = []
        self._notifications: list[str] = []

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

    def _upsert(self, table: Any, values: dict[str, Any], keys: list[str]) -> Insert:
        dialect_insert = postgresql.insert if self._pg else sqlite.insert
        stmt = dialect_insert(table).values(**values)
        updates = {k: stmt.excluded[k] for k in values if k not in keys}
        return stmt.on_conflict_do_update(index_elements=keys, set_=updates)

    async def _bump_session(self, session_id: str, **values: Any) -> int:
        result = await self._conn.execute(
            update(sessions)
            .where(sessions.c.id == session_id)
            .values(revision=sessions.c.revision + 1, updated_at=utcnow(), **values)
            .returning(sessions.c.revision)
        )
        revision = result.scalar_one_or_none()
        if revision is None:
            raise KeyError(session_id)
        return int(revision)

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
        await self._conn.execute(
            insert(tasks).values(
                id=task.id,
                title=title,
                owner=owner,
                workflow_step=workflow_step,
                current_session_id=None,
                created_at=task.created_at,
            )
        )
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
        await self._conn.execute(
            insert(sessions).values(
                id=session_id,
                task_id=task_id,
                agent=agent,
                state=state.value,
                revision=1,
                created_at=now,
                updated_at=now,
            )
        )
        await self._conn.execute(
            insert(queue_session_locks).values(session_id=session_id, revision=0)
        )
        return session

    async def get_task(self, task_id: str) -> Task | None:
        row = (await self._conn.execute(select(tasks).where(tasks.c.id == task_id))).one_or_none()
        return task_from(row) if row is not None else None

    async def get_session(self, session_id: str) -> Session | None:
        stmt = select_sessions().where(sessions.c.id == session_id)
        row = (await self._conn.execute(stmt)).one_or_none()
        return session_from(row) if row is not None else None

    async def set_session_state(self, session_id: str, state: SessionState) -> Session:
        await self._bump_session(session_id, state=state.value)
        session = await self.get_session(session_id)
        assert session is not None
        return session

    async def lock(self, session_id: str) -> SessionView:
        if self._pg:
            # Q3: the lock row serialises every reservation and policy write of this session.
            # HAZARD: it must be its own statement. Under READ COMMITTED a statement's snapshot
            # is taken when it starts; a joined SELECT … FOR UPDATE that waited for the lock
            # re-reads only the locked row and would return the *old* policy, entries and
            # clarification. The view below is a new statement, so it sees what the previous
            # holder committed.
            locks = queue_session_locks
            locked = await self._conn.scalar(
                select(locks.c.session_id).where(locks.c.session_id == session_id).with_for_update()
            )
            if locked is None:
                raise KeyError(session_id)
        # SQLite: the transaction began IMMEDIATE behind the writer lock; it is the only writer.
        view = await self.view(session_id)
        if view is None:
            raise KeyError(session_id)
        return view

    async def view(self, session_id: str) -> SessionView | None:
        row = (await self._conn.execute(select_view(session_id))).one_or_none()
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
        await self._bump_session(session_id, state=SessionState.RUNNING.value)
        turn = Turn(
            new_id(),
            session_id,
            prompt,
            source,
            TurnStatus.RUNNING,
            "",
            None,
            utcnow(),
            None,
            owner,
        )
        next_seq = select(
            literal(turn.id),
            literal(session_id),
            func.coalesce(func.max(turns.c.seq), 0) + 1,
            literal(prompt),
            literal(source.value),
            literal(TurnStatus.RUNNING.value),
            literal(""),
            literal(turn.started_at, UtcDateTime),
            literal(owner, BigInteger),
        ).where(turns.c.session_id == session_id)
        cols = [
            "id",
            "session_id",
            "seq",
            "prompt",
            "source",
            "status",
            "output",
            "started_at",
            "owner",
        ]
        await self._conn.execute(insert(turns).from_select(cols, next_seq))
        if consume:
            # Q10: the reserved entries disappear in the same transaction as the turn appears.
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
        result = await self._conn.execute(
            update(turns)
            .where(turns.c.id == turn_id, turns.c.status == RUNNING)
            .values(status=status.value, output=output, error=error, ended_at=utcnow())
            .returning(*turns.c)
        )
        row = result.one_or_none()
        if row is None:  # already ended (or unknown): idempotent, nothing changes
            turn = await self.get_turn(turn_id)
            if turn is None:
                raise KeyError(turn_id)
        else:
            turn = turn_from(row)
            await self._bump_session(turn.session_id, state=session_state.value)
        session = await self.get_session(turn.session_id)
        assert session is not None
        return turn, session

    async def get_turn(self, turn_id: str) -> Turn | None:
        row = (await self._conn.execute(select(turns).where(turns.c.id == turn_id))).one_or_none()
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
        await self._conn.execute(self._upsert(clarifications, values, ["session_id"]))
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
        values = {
            "session_id": session_id,
            "auto_run": auto_run,
            "pause_reason": pause_reason.value if pause_reason is not None else None,
        }
        await self._conn.execute(self._upsert(queue_session_state, values, ["session_id"]))

    async def delete_policy(self, session_id: str) -> None:
        await self._conn.execute(
            delete(queue_session_state).where(queue_session_state.c.session_id == session_id)
        )

    async def bump_queue_revision(self, session_id: str) -> int:
        locks = queue_session_locks
        value = await self._conn.scalar(
            update(locks)
            .where(locks.c.session_id == session_id)
            .values(revision=locks.c.revision + 1)
            .returning(locks.c.revision)
        )
        if value is None:
            raise KeyError(session_id)
        return int(value)
