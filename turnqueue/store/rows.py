"""Row ↔ domain conversion and the few shared SELECTs of the SQL store.

Hot statements are built once at import with named ``bindparam``s (a
:class:`~turnqueue.store.statement.Statement`) and executed with a parameter dict: building a
SQLAlchemy statement costs more than running it (bench P1, P3). Prebuilt statements keep the
literals that partial indexes need (``'RUNNING'``, ``in_flight = false``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from sqlalchemy import (
    ColumnClause,
    Select,
    String,
    bindparam,
    exists,
    false,
    literal_column,
    select,
)

from turnqueue.domain import (
    AgentErrorKind,
    Clarification,
    HoldReason,
    MessageSource,
    PauseReason,
    QueueEntry,
    QueuePolicy,
    Session,
    SessionParts,
    SessionState,
    Task,
    Turn,
    TurnAt,
    TurnStatus,
)
from turnqueue.store.protocol import SessionView
from turnqueue.store.statement import Record, Statement
from turnqueue.store.tables import (
    approvals,
    clarifications,
    queue_entries,
    queue_session_locks,
    queue_session_state,
    session_holds,
    sessions,
    tasks,
    turns,
)

#: Literal (not bound) so PostgreSQL can use the partial index ``ix_turns_running``.
RUNNING: ColumnClause[str] = literal_column("'RUNNING'", String)
#: Visible entries: ``false()`` renders a literal on both dialects.
VISIBLE = queue_entries.c.in_flight == false()
ENTRY_ORDER = (queue_entries.c.position, queue_entries.c.id)


class Mapped(Protocol):
    """A row by column name: a :class:`~turnqueue.store.statement.Record` or a
    :class:`Prefixed` part of one."""

    @property
    def _mapping(self) -> Mapping[str, Any]: ...


class Prefixed:
    """The columns of ``row`` whose names start with ``prefix``, without it: one table's part
    of a row that joins two tables with the same column names."""

    __slots__ = ("_mapping",)

    def __init__(self, row: Record, prefix: str) -> None:
        cut = len(prefix)
        self._mapping = {k[cut:]: v for k, v in row._mapping.items() if k.startswith(prefix)}


def task_from(row: Mapped) -> Task:
    m = row._mapping
    return Task(
        id=m["id"],
        title=m["title"],
        owner=m["owner"],
        workflow_step=m["workflow_step"],
        current_session_id=m["current_session_id"],
        created_at=m["created_at"],
    )


def session_from(row: Mapped) -> Session:
    m = row._mapping
    parts = None
    if "current_turn_id" in m:  # a read of ``select_sessions`` (a RETURNING has no parts)
        clarification = None
        if m["clarification_id"] is not None:
            clarification = Clarification(
                id=m["clarification_id"],
                session_id=m["id"],
                turn_id=m["clarification_turn_id"],
                question=m["clarification_question"],
                asked_at=m["clarification_asked_at"],
            )
        current = None
        if m["current_turn_id"] is not None:
            current = TurnAt(
                id=m["current_turn_id"],
                status=TurnStatus(m["current_turn_status"]),
                error=m["current_turn_error"],
                ended_at=m["current_turn_ended_at"],
            )
        parts = SessionParts(clarification, m["pending_approval_id"], current)
    return Session(
        id=m["id"],
        task_id=m["task_id"],
        owner=m["owner"],
        agent=m["agent"],
        state=SessionState(m["state"]),
        revision=m["revision"],
        created_at=m["created_at"],
        updated_at=m["updated_at"],
        parts=parts,
    )


def turn_from(row: Mapped) -> Turn:
    m = row._mapping
    return Turn(
        id=m["id"],
        session_id=m["session_id"],
        prompt=m["prompt"],
        source=MessageSource(m["source"]),
        status=TurnStatus(m["status"]),
        output=m["output"],
        error=m["error"],
        started_at=m["started_at"],
        ended_at=m["ended_at"],
        owner=m["owner"],
        error_kind=AgentErrorKind(m["error_kind"]) if m["error_kind"] else None,
        agent_stderr=m["agent_stderr"],
        client_message_id=m["client_message_id"],
        entry_id=m["entry_id"],
    )


def entry_from(row: Record, ordinal: int) -> QueueEntry:
    """``ordinal`` is the 1-based place among visible entries, never the stored sort key."""
    m = row._mapping
    return QueueEntry(
        id=m["id"],
        session_id=m["session_id"],
        position=ordinal,
        content=m["content"],
        source=MessageSource(m["source"]),
        queued_at=m["queued_at"],
        client_message_id=m["client_message_id"],
    )


def entries_from(rows: Sequence[Record]) -> list[QueueEntry]:
    return [entry_from(row, i) for i, row in enumerate(rows, start=1)]


def select_sessions() -> Select[Any]:
    """Sessions with their task's owner and the parts their revision covers (R1, R3): the
    clarification, the pending approval of the running turn, the newest turn's status — all in
    this one statement, so a session read at one revision always shows the same parts."""
    clar = clarifications
    current = turns.alias("current_turn")
    asked_in = turns.alias("asked_in")
    newest = (
        select(turns.c.id)
        .where(turns.c.session_id == sessions.c.id)
        .order_by(turns.c.seq.desc())
        .limit(1)
        .scalar_subquery()
    )
    pending_approval = (
        select(approvals.c.id)
        .join(asked_in, asked_in.c.id == approvals.c.turn_id)
        .where(
            approvals.c.session_id == sessions.c.id,
            approvals.c.outcome == literal_column("'PENDING'", String),
            asked_in.c.status == RUNNING,
        )
        .order_by(approvals.c.requested_at.desc())
        .limit(1)
        .scalar_subquery()
    )
    return select(
        *sessions.c,
        tasks.c.owner,
        clar.c.id.label("clarification_id"),
        clar.c.turn_id.label("clarification_turn_id"),
        clar.c.question.label("clarification_question"),
        clar.c.asked_at.label("clarification_asked_at"),
        pending_approval.label("pending_approval_id"),
        current.c.id.label("current_turn_id"),
        current.c.status.label("current_turn_status"),
        current.c.error.label("current_turn_error"),
        current.c.ended_at.label("current_turn_ended_at"),
    ).select_from(
        sessions.join(tasks, tasks.c.id == sessions.c.task_id)
        .outerjoin(clar, clar.c.session_id == sessions.c.id)
        .outerjoin(current, current.c.id == newest)
    )


def _select_view() -> Select[Any]:
    """Everything :class:`SessionView` needs in one statement, driven by the lock row."""
    locks, state, clar = queue_session_locks, queue_session_state, clarifications

    def running_turn(column: Any) -> Any:
        return (
            select(column)
            .where(turns.c.session_id == locks.c.session_id, turns.c.status == RUNNING)
            .order_by(turns.c.seq.desc())
            .limit(1)
            .scalar_subquery()
        )

    running = running_turn(turns.c.id)
    running_owner = running_turn(turns.c.owner)

    def held(kind: HoldReason) -> Any:
        return exists().where(
            session_holds.c.session_id == locks.c.session_id,
            session_holds.c.kind == literal_column(f"'{kind.value}'", String),
        )

    # A6: an approval waits for its answer while it is PENDING and its turn runs.
    approval_pending = exists().where(
        approvals.c.session_id == locks.c.session_id,
        approvals.c.outcome == literal_column("'PENDING'", String),
        exists().where(turns.c.id == approvals.c.turn_id, turns.c.status == RUNNING),
    )
    return (
        select(
            *sessions.c,
            tasks.c.owner,
            locks.c.revision.label("queue_revision"),
            state.c.auto_run,
            state.c.pause_reason,
            clar.c.id.label("clarification_id"),
            clar.c.turn_id.label("clarification_turn_id"),
            clar.c.question.label("clarification_question"),
            clar.c.asked_at.label("clarification_asked_at"),
            # Kept by triggers (tables.py): counting the queue here made a lock O(queue length).
            locks.c.queued,
            running.label("running_turn_id"),
            running_owner.label("running_turn_owner"),
            locks.c.cancel_mark,
            locks.c.cancel_revision,
            held(HoldReason.CANCELLING).label("cancelling"),
            held(HoldReason.WORKFLOW_TRANSITION).label("transitioning"),
            approval_pending.label("approval_pending"),
        )
        .select_from(
            locks.join(sessions, sessions.c.id == locks.c.session_id)
            .join(tasks, tasks.c.id == sessions.c.task_id)
            .outerjoin(state, state.c.session_id == locks.c.session_id)
            .outerjoin(clar, clar.c.session_id == locks.c.session_id)
        )
        .where(locks.c.session_id == bindparam("p_session_id"))
    )


#: Prebuilt: execute with ``{"p_session_id": …}``. Prebuilt parameter names start with ``p_``
#: because SQLAlchemy reserves column names for the parameters of INSERT and UPDATE.
VIEW = Statement(_select_view())
#: Visible entries of a session, FIFO.
VISIBLE_ENTRIES = Statement(
    select(queue_entries)
    .where(queue_entries.c.session_id == bindparam("p_session_id"), VISIBLE)
    .order_by(*ENTRY_ORDER)
)
SESSION = Statement(select_sessions().where(sessions.c.id == bindparam("p_session_id")))


def view_from(row: Record) -> SessionView:
    m = row._mapping
    session = session_from(row)
    auto_run = m["auto_run"]
    pause_reason = m["pause_reason"]
    clarification = None
    if m["clarification_id"] is not None:
        clarification = Clarification(
            id=m["clarification_id"],
            session_id=session.id,
            turn_id=m["clarification_turn_id"],
            question=m["clarification_question"],
            asked_at=m["clarification_asked_at"],
        )
    return SessionView(
        session=session,
        # Q1: no policy row reads auto_run true.
        policy=QueuePolicy(
            session_id=session.id,
            auto_run=True if auto_run is None else bool(auto_run),
            pause_reason=PauseReason(pause_reason) if pause_reason is not None else None,
            revision=m["queue_revision"],
        ),
        clarification=clarification,
        queued=m["queued"],
        running_turn_id=m["running_turn_id"],
        running_turn_owner=m["running_turn_owner"],
        cancel_mark=m["cancel_mark"],
        cancelling=bool(m["cancelling"]),
        cancel_revision=m["cancel_revision"],
        transitioning=bool(m["transitioning"]),
        approval_pending=bool(m["approval_pending"]),
    )
