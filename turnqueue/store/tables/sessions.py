"""The tables of tasks, their sessions and a session's turns, with what each turn and session
keeps beside them: clarifications, approvals (A6), the output log (O1), the agent's conversation
(A8)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, Boolean, Index, Integer, String, Text, false

from turnqueue.store.tables.model import TableModel, column, owned_by, partial, table
from turnqueue.store.tables.timestamps import UtcDateTime


class TaskRow(TableModel, table=True):
    __tablename__ = "tasks"
    __table_args__ = (Index("ix_tasks_owner_created_at", "owner", "created_at"),)

    id: str = column(String(36), primary_key=True)
    title: str = column(Text, nullable=False)
    owner: str = column(String(200), nullable=False)
    workflow_step: str = column(String(200), nullable=False)
    # No FK: sessions reference tasks, and a task points at its current session (a cycle).
    current_session_id: str | None = column(String(36), nullable=True)
    created_at: datetime = column(UtcDateTime, nullable=False)


class SessionRow(TableModel, table=True):
    __tablename__ = "sessions"
    __table_args__ = (Index("ix_sessions_task_id", "task_id"),)

    id: str = column(String(36), primary_key=True)
    task_id: str = owned_by("tasks.id", nullable=False)
    agent: str = column(String(100), nullable=False)
    state: str = column(String(32), nullable=False)
    revision: int = column(BigInteger, nullable=False)
    created_at: datetime = column(UtcDateTime, nullable=False)
    updated_at: datetime = column(UtcDateTime, nullable=False)
    # The task reached the workflow's last step while a turn ran: COMPLETED when it ends (0005).
    complete_on_idle: bool = column(Boolean, nullable=False, server_default=false())


class TurnRow(TableModel, table=True):
    __tablename__ = "turns"
    __table_args__ = (
        Index("ix_turns_session_id_seq", "session_id", "seq", unique=True),
        # The view's "newest RUNNING turn" and recovery (M6); queries must use the literal
        # 'RUNNING' to hit it.
        partial("ix_turns_running", "session_id", "seq", where="status = 'RUNNING'"),
    )

    id: str = column(String(36), primary_key=True)
    session_id: str = owned_by("sessions.id", nullable=False)
    # Per-session ordinal: turns are ordered by it (timestamps can tie).
    seq: int = column(Integer, nullable=False)
    prompt: str = column(Text, nullable=False)
    source: str = column(String(16), nullable=False)
    status: str = column(String(16), nullable=False)
    output: str = column(Text, nullable=False)
    error: str | None = column(Text, nullable=True)
    started_at: datetime = column(UtcDateTime, nullable=False)
    ended_at: datetime | None = column(UtcDateTime, nullable=True)
    # The instance (its epoch) that runs this turn; only it can stop the agent (M4).
    owner: int | None = column(BigInteger, nullable=True)
    # Q15: the client's key of the send it came from; Q16: the entry it was started from.
    client_message_id: str | None = column(String(128), nullable=True)
    entry_id: str | None = column(String(36), nullable=True)
    # A11: how its failure is classified, and its agent's stderr (kept apart from ``error``).
    error_kind: str | None = column(String(32), nullable=True)
    agent_stderr: str | None = column(Text, nullable=True)


class ClarificationRow(TableModel, table=True):
    __tablename__ = "clarifications"

    id: str = column(String(36), primary_key=True)
    session_id: str = owned_by("sessions.id", nullable=False, unique=True)
    turn_id: str | None = column(String(36), nullable=True)
    question: str = column(Text, nullable=False)
    asked_at: datetime = column(UtcDateTime, nullable=False)


class ApprovalRow(TableModel, table=True):
    """A6: every permission request of an ACP agent and its answer, kept with its turn."""

    __tablename__ = "approvals"
    __table_args__ = (
        Index("ix_approvals_turn", "turn_id"),
        Index("ix_approvals_session_outcome", "session_id", "outcome"),
    )

    id: str = column(String(36), primary_key=True)
    session_id: str = owned_by("sessions.id", nullable=False)
    turn_id: str = owned_by("turns.id", nullable=False)
    title: str = column(Text, nullable=False)
    tool_call_id: str | None = column(Text, nullable=True)
    options: str = column(Text, nullable=False)  # JSON: [{"id", "name", "kind"}]
    requested_at: datetime = column(UtcDateTime, nullable=False)
    outcome: str = column(String(16), nullable=False)
    option_id: str | None = column(Text, nullable=True)
    answered_by: str | None = column(Text, nullable=True)
    answered_at: datetime | None = column(UtcDateTime, nullable=True)


class AgentConversationRow(TableModel, table=True):
    """A8: the ACP agent's own session of a turnqueue session and what its agent advertised,
    written whenever the agent answers ``session/new``, ``session/resume`` or ``session/load``,
    so that any instance that starts the session's agent again continues that conversation."""

    __tablename__ = "agent_conversations"

    session_id: str = owned_by("sessions.id", primary_key=True)
    profile: str = column(String(255), nullable=False)
    agent_session_id: str = column(String(255), nullable=False)
    can_resume: bool = column(Boolean, nullable=False)
    can_load: bool = column(Boolean, nullable=False)
    can_close: bool = column(Boolean, nullable=False)
    resumed: str = column(String(16), nullable=False)  # NEW, RESUMED or LOADED
    resume_error: str | None = column(Text, nullable=True)
    updated_at: datetime = column(UtcDateTime, nullable=False)


class TurnOutputRow(TableModel, table=True):
    """O1: a turn's durable output log, appended in batches while it runs; kept as long as the
    turn (deleted with it). ``offset`` counts MESSAGE characters before the record; ``data`` is
    the item's JSON (NULL for a plain MESSAGE text chunk, whose text is ``text``)."""

    __tablename__ = "turn_output"

    turn_id: str = owned_by("turns.id", primary_key=True)
    seq: int = column(Integer, primary_key=True, autoincrement=False)
    offset: int = column(BigInteger, nullable=False)
    kind: str = column(String(16), nullable=False)
    item_key: str | None = column(String(200), nullable=True)
    text: str = column(Text, nullable=False)
    data: Any = column(JSON, nullable=True)


# -- the tables the statements are written against (SQLAlchemy Core) ---------------------------
tasks = table(TaskRow)
sessions = table(SessionRow)
turns = table(TurnRow)
clarifications = table(ClarificationRow)
approvals = table(ApprovalRow)
agent_conversations = table(AgentConversationRow)
turn_output = table(TurnOutputRow)
