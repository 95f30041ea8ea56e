"""``SqlTx`` (exported as :class:`turnqueue.store.Tx`): one transaction, in SQLAlchemy Core, on
one :class:`~turnqueue.store.statement.Conn`, inside a transaction owned by its store; nothing
here commits. This class (plumbing, tasks and sessions) and its mixins (one per aggregate) are
the portable SQL; the dialects' differences are the overrides of ``SqliteTx`` and
``PostgresTx``, nowhere else.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable

from sqlalchemy import Executable, bindparam, insert, select, update

from turnqueue.domain import Session, SessionState, Task, new_id, utcnow
from turnqueue.store.approvals import ApprovalStatements
from turnqueue.store.conversations import ConversationStatements
from turnqueue.store.entries import EntryStatements
from turnqueue.store.instances import InstanceStatements
from turnqueue.store.output import OutputStatements
from turnqueue.store.protocol import SessionView
from turnqueue.store.queue_state import QueueStateStatements
from turnqueue.store.requests import RequestStatements
from turnqueue.store.rows import SESSION, VIEW, session_from, task_from, values_of, view_from
from turnqueue.store.statement import Conn, Record, Statement
from turnqueue.store.tables import queue_session_locks, sessions, tasks
from turnqueue.store.turns import BUMP_SESSION_STATE, TurnStatements, session_bump

log = logging.getLogger(__name__)
locks = queue_session_locks
_BUMP_SESSION = Statement(session_bump(with_state=False))
_TASK = Statement(select(tasks).where(tasks.c.id == bindparam("p_task_id")))


class SqlTx(
    TurnStatements,
    ConversationStatements,
    InstanceStatements,
    OutputStatements,
    ApprovalStatements,
    QueueStateStatements,
    EntryStatements,
    RequestStatements,
):
    def __init__(self, conn: Conn) -> None:
        self._conn = conn
        self._callbacks: list[Callable[[], object]] = []
        self._queue_revisions: dict[str, int] = {}
        #: sessions whose queue status this transaction changed (see ``changed_queues``)
        self._touched: dict[str, None] = {}
        #: the session revision each session's latest write here reached (``session_revision``)
        self._session_revisions: dict[str, int] = {}

    # -- plumbing ---------------------------------------------------------------------------
    def after_commit(self, callback: Callable[[], object]) -> None:
        """Run ``callback`` (sync, or returning an awaitable that is awaited) after COMMIT."""
        self._callbacks.append(callback)

    def changed_queues(self) -> list[str]:
        """Sessions whose queue status this transaction changed, in the order it first did. Each
        gets a new queue revision before COMMIT (Q13): the unit of work bumps it, or the store
        does (:meth:`prepare_commit`)."""
        return list(self._touched)

    def session_revision(self, session_id: str) -> int | None:
        """The session revision this transaction's latest write of the session reached, or None
        if none moved it: the unit of work reads it here, never infers it."""
        return self._session_revisions.get(session_id)

    async def prepare_commit(self) -> None:
        """Called by the store right before COMMIT: every changed queue status gets its new
        revision (Q13), so a revision is never served with two states (R3); the net for any
        write outside the engine's unit of work."""
        for session_id in self._touched:
            if session_id not in self._queue_revisions:
                await self.bump_queue(session_id)

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

    async def fetch(self, statement: Executable) -> list[Record]:
        """The rows of a query the store built (its read helpers)."""
        return (await self._conn.execute(statement)).all()

    # -- epochs (R2): the backend's own source -----------------------------------------------
    async def next_epoch(self) -> int:
        """A new value of the durable epoch sequence: larger than every earlier one."""
        raise NotImplementedError

    # -- tasks and sessions -----------------------------------------------------------------
    async def create_task(self, *, title: str, owner: str, workflow_step: str) -> Task:
        task = Task(new_id(), title, owner, workflow_step, None, utcnow())
        await self._conn.execute(insert(tasks), values_of(task))
        return task

    async def set_task_step(self, task_id: str, step: str, current_session_id: str) -> Task:
        stmt = (
            update(tasks)
            .where(tasks.c.id == task_id)
            .values(workflow_step=step, current_session_id=current_session_id)
            .returning(*tasks.c)
        )
        return task_from(await self._conn.one(stmt, None, task_id))

    async def create_session(self, *, task_id: str, agent: str, state: SessionState) -> Session:
        """Insert the session (revision 1) and its lock row (queue revision 0), and point the
        task's ``current_session_id`` at it. No policy row: auto-run reads true."""
        now = utcnow()
        session_id = new_id()
        point = (
            update(tasks)
            .where(tasks.c.id == task_id)
            .values(current_session_id=session_id)
            .returning(tasks.c.owner)
        )
        owner = (await self._conn.one(point, None, task_id)).owner
        session = Session(session_id, task_id, owner, agent, state, 1, now, now)
        # Its own columns (not the task's owner, not the parts other tables hold).
        values = {k: v for k, v in values_of(session).items() if k in sessions.c}
        await self._conn.execute(insert(sessions), values)
        await self._conn.execute(insert(locks), {"session_id": session_id, "revision": 0})
        return session

    async def get_task(self, task_id: str) -> Task | None:
        return await self._conn.maybe(_TASK, {"p_task_id": task_id}, task_from)

    async def get_session(self, session_id: str) -> Session | None:
        return await self._conn.maybe(SESSION, {"p_session_id": session_id}, session_from)

    async def set_complete_on_idle(self, session_id: str, complete: bool) -> None:
        """Whether the session becomes COMPLETED (not WAITING_FOR_INPUT) when its running turn
        ends (its task reached the workflow's last step meanwhile); the end clears it."""
        await self._conn.execute(
            update(sessions).where(sessions.c.id == session_id).values(complete_on_idle=complete)
        )

    async def touch_starting(self, session_id: str) -> None:
        """Refresh a STARTING session's ``updated_at`` while its agent starts (A2), so recovery
        does not take it for one a dead instance left STARTING."""
        await self._conn.execute(
            update(sessions)
            .where(sessions.c.id == session_id, sessions.c.state == SessionState.STARTING.value)
            .values(updated_at=utcnow())
        )

    async def bump_session(self, session_id: str) -> int:
        """A new session revision and ``updated_at``, the state unchanged; the revision (A6)."""
        params = {"p_session_id": session_id, "p_now": utcnow()}
        revision = int((await self._conn.one(_BUMP_SESSION, params, session_id))[0])
        self._session_revisions[session_id] = revision
        return revision

    async def set_session_state(self, session_id: str, state: SessionState) -> Session:
        """Set the state, bump the session revision and ``updated_at``."""
        params = {"p_session_id": session_id, "p_now": utcnow(), "p_state": state.value}
        row = await self._conn.one(BUMP_SESSION_STATE, params, session_id)
        self._touched[session_id] = None  # BUSY, NOT_PROMPTABLE
        self._session_revisions[session_id] = int(row[0])
        session = await self.get_session(session_id)
        assert session is not None
        return session

    async def lock(self, session_id: str) -> SessionView:
        """Take the session's lock row (Q3) and read its view. ``KeyError`` if it does not exist."""
        return view_from(await self._conn.one(VIEW, {"p_session_id": session_id}, session_id))

    async def view(self, session_id: str) -> SessionView | None:
        """The same view without taking the lock (reads, snapshots)."""
        return await self._conn.maybe(VIEW, {"p_session_id": session_id}, view_from)
