r"""``SqlTx`` (exported as :class:`turnqueue.store.Tx`): one transaction, in SQLAlchemy Core.

One ``SqlTx`` wraps one :class:`~turnqueue.store.statement.Conn` inside a transaction owned by its
store. Nothing here commits. This class is the portable SQL; the dialect differences (the
``FOR UPDATE`` of the lock row, the epoch source, upserts, statements PostgreSQL sends in one
round trip as a data-modifying ``WITH``) are the overrides of ``SqliteTx``
(``turnqueue.store.sqlite``) and ``PostgresTx`` (``turnqueue.store.postgres``), nowhere else.

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
    Executable,
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

from turnqueue.domain import (
    AgentErrorKind,
    MessageSource,
    Session,
    SessionState,
    Task,
    Turn,
    TurnStatus,
    new_id,
    utcnow,
)
from turnqueue.store.approvals import ApprovalStatements
from turnqueue.store.conversations import ConversationStatements
from turnqueue.store.entries import EntryStatements
from turnqueue.store.instances import InstanceStatements
from turnqueue.store.output import OutputStatements
from turnqueue.store.protocol import SessionView
from turnqueue.store.queue_state import QueueStateStatements
from turnqueue.store.requests import RequestStatements
from turnqueue.store.rows import (
    RUNNING,
    SESSION,
    VIEW,
    session_from,
    task_from,
    turn_from,
    values_of,
    view_from,
)
from turnqueue.store.statement import Conn, Params, Record, Statement
from turnqueue.store.tables import (
    UtcDateTime,
    queue_entries,
    queue_session_locks,
    sessions,
    tasks,
    turns,
)

log = logging.getLogger(__name__)
qe = queue_entries
locks = queue_session_locks


# -- prebuilt statements (see turnqueue.store.rows): executed with a parameter dict -------------
def session_bump(*, with_state: bool) -> Update:
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


_BUMP_SESSION = Statement(session_bump(with_state=False))
_RUNNING_STATE = SessionState.RUNNING.value  # an enum's ``value`` is a Python-level property
BUMP_SESSION_STATE = Statement(session_bump(with_state=True))


def end_session(session_id: Any) -> Update:
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


_END_SESSION = Statement(end_session(bindparam("p_session_id")))
_TURN_COLUMNS = ["id", "session_id", "seq", "prompt", "source", "status", "output", "started_at"]
#: The next per-session ``seq`` is computed in the INSERT itself.
insert_turn = insert(turns).from_select(
    [*_TURN_COLUMNS, "owner", "client_message_id", "entry_id"],
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
        bindparam("p_key", type_=String),
        bindparam("p_entry_id", type_=String),
    ).where(turns.c.session_id == bindparam("p_session_id")),
)
_INSERT_TURN = Statement(insert_turn)
#: The usual case, one entry (several: an IN list compiled per call, see statement.py).
consume_one = delete(qe).where(qe.c.id == bindparam("p_id"), qe.c.in_flight == true())
_CONSUME_ONE = Statement(consume_one)
end_turn_clause = (
    update(turns)
    .where(turns.c.id == bindparam("p_turn_id"), turns.c.status == RUNNING)
    .values(
        status=bindparam("p_status", type_=String),
        output=bindparam("p_output", type_=Text),
        error=bindparam("p_error", type_=Text),
        error_kind=bindparam("p_error_kind", type_=String),
        agent_stderr=bindparam("p_agent_stderr", type_=Text),
        ended_at=bindparam("p_now", type_=UtcDateTime),
    )
    .returning(*turns.c)
)
_END_TURN = Statement(end_turn_clause)
_TURN = Statement(select(turns).where(turns.c.id == bindparam("p_turn_id")))
_TASK = Statement(select(tasks).where(tasks.c.id == bindparam("p_task_id")))


class SqlTx(
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
        """Sessions whose queue status (entries, policy, state, clarification, approvals,
        holds) this transaction changed, in the order it first changed them. Each gets a new
        queue revision before COMMIT (Q13): the unit of work bumps it, or the store does."""
        return list(self._touched)

    def session_revision(self, session_id: str) -> int | None:
        """The session revision this transaction's latest write of the session reached (a
        state, a turn's start or end, a clarification, a bump), or None if none moved it: every
        such write answers it, so the unit of work reads it here, never infers it."""
        return self._session_revisions.get(session_id)

    async def prepare_commit(self) -> None:
        """Called by the store right before COMMIT: every changed queue status gets its new
        revision in this transaction (Q13), so a revision is never served with two states
        (R3). The engine's unit of work bumps them itself (and publishes); this is the net
        for any write outside one."""
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
        """Insert the session (revision 1) and its ``queue_session_locks`` row (queue revision 0).

        Also points the task's ``current_session_id`` at it. No policy row: auto-run reads true.
        """
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
        ends: its task reached the workflow's last step while the turn ran. The end clears it."""
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

    # -- turns ------------------------------------------------------------------------------
    async def start_turn(
        self,
        session_id: str,
        *,
        prompt: str,
        source: MessageSource,
        consume: Sequence[str] = (),
        owner: int | None = None,
        client_message_id: str | None = None,
        entry_id: str | None = None,
    ) -> Turn:
        """Insert a RUNNING turn, make the session RUNNING (revision +1) and, in the same
        statement batch, delete the in-flight entries named in ``consume`` (Q10). The turn
        carries the key of the send it came from (Q15) and the entry it started from (Q16)."""
        now = utcnow()
        # Positional, in field order (keywords cost a dict per call, on every turn's start).
        turn = Turn(
            new_id(),
            session_id,
            prompt,
            source,
            TurnStatus.RUNNING,
            "",
            None,
            now,
            None,
            owner,
            None,  # error_kind
            None,  # agent_stderr
            client_message_id,
            entry_id,
        )
        params = {
            "p_turn_id": turn.id,
            "p_session_id": session_id,
            "p_prompt": prompt,
            "p_source": source.value,
            "p_now": now,
            "p_owner": owner,
            "p_state": _RUNNING_STATE,
            "p_key": client_message_id,
            "p_entry_id": entry_id,
        }
        self._touched[session_id] = None
        self._session_revisions[session_id] = await self._start_turn(turn, params, consume)
        return turn

    async def _start_turn(self, turn: Turn, params: dict[str, Any], consume: Sequence[str]) -> int:
        """Write the start; the session revision it reached."""
        # Q10: the reserved entries disappear in the same transaction as the turn appears.
        revision = int((await self._conn.one(BUMP_SESSION_STATE, params, turn.session_id))[0])
        await self._conn.execute(_INSERT_TURN, params)
        if len(consume) == 1:
            await self._conn.execute(_CONSUME_ONE, {"p_id": consume[0]})
        elif consume:
            await self._conn.execute(
                delete(qe).where(qe.c.id.in_(list(consume)), qe.c.in_flight == true())
            )
        return revision

    async def end_turn(
        self,
        turn_id: str,
        *,
        status: TurnStatus,
        output: str,
        error: str | None,
        session_state: SessionState = SessionState.WAITING_FOR_INPUT,
        error_kind: AgentErrorKind | None = None,
        agent_stderr: str | None = None,
    ) -> tuple[Turn, Session]:
        """End a RUNNING turn and set its session's state (revision +1; a turn's end leaves
        it WAITING_FOR_INPUT, or COMPLETED when ``complete_on_idle``). A turn that is no longer
        RUNNING is left as it is and returned unchanged (idempotent end). A11: its failure's
        classification and its agent's stderr are kept with it."""
        params = {
            "p_turn_id": turn_id,
            "p_status": status.value,
            "p_output": output,
            "p_error": error,
            "p_error_kind": error_kind.value if error_kind is not None else None,
            "p_agent_stderr": agent_stderr,
            "p_now": utcnow(),
            "p_state": session_state.value,
        }
        turn, session = await self._end_turn(turn_id, params)
        self._touched[session.id] = None
        self._session_revisions[session.id] = session.revision  # unchanged if it had ended
        return turn, session

    async def _end_turn(self, turn_id: str, params: dict[str, Any]) -> tuple[Turn, Session]:
        row = (await self._conn.execute(_END_TURN, params)).one_or_none()
        if row is None:
            return await self._ended_turn(turn_id, params)
        bump = {**params, "p_session_id": row.session_id}
        session_row = await self._conn.one(_END_SESSION, bump, row.session_id)
        return turn_from(row), session_from(session_row)

    async def _ended_turn(self, turn_id: str, params: Params) -> tuple[Turn, Session]:
        """A turn already ended (or unknown): idempotent, nothing changes."""
        row = await self._conn.one(_TURN, params, turn_id)
        session_row = (await self._conn.execute(SESSION, {"p_session_id": row.session_id})).one()
        return turn_from(row), session_from(session_row)

    async def get_turn(self, turn_id: str) -> Turn | None:
        return await self._conn.maybe(_TURN, {"p_turn_id": turn_id}, turn_from)

    async def turn_started_from(self, session_id: str, entry_id: str) -> Turn | None:
        """Q16: the session's turn started from this queue entry, if one was."""
        query = select(turns).where(turns.c.session_id == session_id, turns.c.entry_id == entry_id)
        return await self._conn.maybe(query, None, turn_from)
