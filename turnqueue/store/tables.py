"""The schema: every table turnqueue stores, declared once, as SQLModel models (``table=True``).

The Alembic migrations create exactly this (``tests/store/test_migrations.py`` runs autogenerate's
comparison against a migrated database). Ids are UUID strings, enums are stored as their string
values, timestamps are timezone-aware UTC.

* Every field has an explicit ``sa_column``, in the table's column order: SQLModel's own types
  would be wrong here (unbounded ``VARCHAR`` for ``VARCHAR(36)``/``TEXT``, ``INTEGER`` for
  ``BIGINT`` revisions, no ``UtcDateTime``, no server defaults).
* No Python-side defaults: statements run on the driver, without the SQLAlchemy execution
  context that would apply them (``turnqueue.store.statement``); defaults are the server's.
* The models share a metadata of their own (:data:`metadata`), not SQLModel's global one.
* Statements are SQLAlchemy Core against ``Model.__table__`` (the module-level tables below) and
  rows become domain dataclasses by column name (``turnqueue.store.rows.RowMap``): no ORM
  session, no model instances.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Dialect,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    Sequence,
    String,
    Table,
    Text,
    false,
    text,
    true,
)
from sqlalchemy.orm import registry
from sqlalchemy.types import TypeDecorator
from sqlmodel import Field, SQLModel

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING_CONVENTION)


class TableModel(SQLModel, registry=registry(metadata=metadata)):
    """The base of every table model: turnqueue's own registry and metadata."""


#: SQLite: the last datetime written as text, and its text (a turn's start binds one timestamp
#: in two statements). By identity: the pair holds the datetime, so no other object can take
#: its id while it is here; one tuple, replaced whole, so a reader never sees half of a pair.
_last_text: tuple[datetime | None, str] = (None, "")


class UtcDateTime(TypeDecorator[datetime]):
    """``DateTime(timezone=True)`` that always binds and returns aware UTC datetimes.

    PostgreSQL keeps the offset (timestamptz); SQLite stores naive text, so values are normalised
    to UTC before binding and tagged UTC again when read back.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)

    # SQLite: the text written and read in one step each, in the format of SQLAlchemy's
    # DATETIME ("YYYY-MM-DD HH:MM:SS.ffffff") (timestamps are bound and read on the hot path).
    # Neither step calls ``datetime.replace``: it rebuilds the datetime from parsed keyword
    # arguments and costs several times a parse or a format.
    def bind_processor(self, dialect: Dialect) -> Callable[[Any], Any] | None:
        if dialect.name != "sqlite":
            return super().bind_processor(dialect)

        def to_text(value: datetime | None) -> str | None:
            global _last_text
            if value is None:
                return None
            last = _last_text
            if last[0] is value:
                return last[1]
            given = value
            if value.tzinfo is not UTC:  # utcnow()'s are UTC already
                if value.tzinfo is None:
                    raise ValueError("naive datetime given to a UTC column")
                value = value.astimezone(UTC)
            naive = datetime.combine(value, value.time())  # its UTC wall time, without a zone
            text = naive.isoformat(" ", "microseconds")
            _last_text = (given, text)
            return text

        return to_text

    def result_processor(self, dialect: Dialect, coltype: object) -> Callable[[Any], Any] | None:
        if dialect.name != "sqlite":
            return super().result_processor(dialect, coltype)

        def from_text(value: str | None) -> datetime | None:
            if value is None:
                return None
            try:
                parsed = datetime.fromisoformat(value + "+00:00")  # to_text's naive UTC text
            except ValueError:  # a text with an offset of its own: read as UTC, as ever
                parsed = datetime.fromisoformat(value)
            return parsed if parsed.tzinfo is UTC else parsed.replace(tzinfo=UTC)

        return from_text


#: The durable epoch source on PostgreSQL (R2). SQLite uses the ``epochs`` table instead.
epoch_seq = Sequence("turnqueue_epoch_seq", metadata=metadata)


def _column(*args: Any, **kwargs: Any) -> Any:
    """A field of a table model: exactly this column, and no default."""
    return Field(sa_column=Column(*args, **kwargs))


def _partial(name: str, *columns: str, where: str) -> Index:
    """An index of the rows that match ``where``, spelled alike on both dialects."""
    return Index(name, *columns, postgresql_where=where, sqlite_where=where)


def _owned_by(parent: str, **kwargs: Any) -> Any:
    """A field holding the id of its ``parent`` row (``"sessions.id"``), deleted with it."""
    return _column(String(36), ForeignKey(parent, ondelete="CASCADE"), **kwargs)


class TaskRow(TableModel, table=True):
    __tablename__ = "tasks"
    __table_args__ = (Index("ix_tasks_owner_created_at", "owner", "created_at"),)

    id: str = _column(String(36), primary_key=True)
    title: str = _column(Text, nullable=False)
    owner: str = _column(String(200), nullable=False)
    workflow_step: str = _column(String(200), nullable=False)
    # No FK: sessions reference tasks, and a task points at its current session (a cycle).
    current_session_id: str | None = _column(String(36), nullable=True)
    created_at: datetime = _column(UtcDateTime, nullable=False)


class SessionRow(TableModel, table=True):
    __tablename__ = "sessions"
    __table_args__ = (Index("ix_sessions_task_id", "task_id"),)

    id: str = _column(String(36), primary_key=True)
    task_id: str = _owned_by("tasks.id", nullable=False)
    agent: str = _column(String(100), nullable=False)
    state: str = _column(String(32), nullable=False)
    revision: int = _column(BigInteger, nullable=False)
    created_at: datetime = _column(UtcDateTime, nullable=False)
    updated_at: datetime = _column(UtcDateTime, nullable=False)
    # The task reached the workflow's last step while a turn ran: COMPLETED when it ends (0005).
    complete_on_idle: bool = _column(Boolean, nullable=False, server_default=false())


class TurnRow(TableModel, table=True):
    __tablename__ = "turns"
    __table_args__ = (
        Index("ix_turns_session_id_seq", "session_id", "seq", unique=True),
        # The view's "newest RUNNING turn" and recovery (M6); queries must use the literal
        # 'RUNNING' to hit it.
        _partial("ix_turns_running", "session_id", "seq", where="status = 'RUNNING'"),
    )

    id: str = _column(String(36), primary_key=True)
    session_id: str = _owned_by("sessions.id", nullable=False)
    # Per-session ordinal: turns are ordered by it (timestamps can tie).
    seq: int = _column(Integer, nullable=False)
    prompt: str = _column(Text, nullable=False)
    source: str = _column(String(16), nullable=False)
    status: str = _column(String(16), nullable=False)
    output: str = _column(Text, nullable=False)
    error: str | None = _column(Text, nullable=True)
    started_at: datetime = _column(UtcDateTime, nullable=False)
    ended_at: datetime | None = _column(UtcDateTime, nullable=True)
    # The instance (its epoch) that runs this turn; only it can stop the agent (M4).
    owner: int | None = _column(BigInteger, nullable=True)
    # Q15: the client's key of the send it came from; Q16: the entry it was started from.
    client_message_id: str | None = _column(String(128), nullable=True)
    entry_id: str | None = _column(String(36), nullable=True)
    # A11: how its failure is classified, and its agent's stderr (kept apart from ``error``).
    error_kind: str | None = _column(String(32), nullable=True)
    agent_stderr: str | None = _column(Text, nullable=True)


class QueueEntryRow(TableModel, table=True):
    __tablename__ = "queue_entries"
    __table_args__ = (
        Index("ix_queue_entries_session_id_position", "session_id", "position"),
        # The visible queue in FIFO order (head, listing); each dialect spells the predicate
        # the way ``in_flight == false()`` renders, so the partial index is used.
        Index(
            "ix_queue_entries_visible",
            "session_id",
            "position",
            "id",
            postgresql_where="NOT in_flight",
            sqlite_where="in_flight = 0",
        ),
        _partial("ix_queue_entries_in_flight", "session_id", where="in_flight"),
    )

    id: str = _column(String(36), primary_key=True)
    session_id: str = _owned_by("sessions.id", nullable=False)
    # Sort key only; may go below 1 after a release (Q10). Exposed positions are ordinals.
    position: int = _column(BigInteger, nullable=False)
    content: str = _column(Text, nullable=False)
    source: str = _column(String(16), nullable=False)
    queued_at: datetime = _column(UtcDateTime, nullable=False)
    in_flight: bool = _column(Boolean, nullable=False, server_default=false())
    reserved_at: datetime | None = _column(UtcDateTime, nullable=True)
    # The instance that reserved it: if that instance dies, the entry goes back (Q10, M6).
    reserved_by: int | None = _column(BigInteger, nullable=True)
    # Q15: the client's key of the send that queued it.
    client_message_id: str | None = _column(String(128), nullable=True)


class QueueSessionLockRow(TableModel, table=True):
    """The Q3 lock row and the durable queue revision (Q13). Never deleted."""

    __tablename__ = "queue_session_locks"
    __table_args__ = (
        # Recovery looks for marks every heartbeat: only the few marked rows are indexed.
        _partial(
            "ix_queue_session_locks_cancel_mark", "session_id", where="cancel_mark IS NOT NULL"
        ),
    )

    session_id: str = _owned_by("sessions.id", primary_key=True)
    revision: int = _column(BigInteger, nullable=False)
    # Visible (not in-flight) entries of the session, so the view need not count the queue.
    # Kept by triggers on queue_entries (migration 0004), never written by the store.
    queued: int = _column(BigInteger, nullable=False, server_default=text("0"))
    # C2, R2: the session's cancellation revision, bumped in the transaction of each
    # transition of its CANCELLING hold (session_holds): durable, so it never goes back.
    cancel_revision: int = _column(BigInteger, nullable=False, server_default=text("0"))
    # Q7: the turn an accepted explicit cancel is stopping, until its park is decided.
    cancel_mark: str | None = _column(String(36), nullable=True)


class QueueSessionStateRow(TableModel, table=True):
    """The durable policy (Q1, Q14). A missing row reads auto_run true."""

    __tablename__ = "queue_session_state"

    session_id: str = _owned_by("sessions.id", primary_key=True)
    auto_run: bool = _column(Boolean, nullable=False, server_default=true())
    pause_reason: str | None = _column(String(16), nullable=True)


class ClarificationRow(TableModel, table=True):
    __tablename__ = "clarifications"

    id: str = _column(String(36), primary_key=True)
    session_id: str = _owned_by("sessions.id", nullable=False, unique=True)
    turn_id: str | None = _column(String(36), nullable=True)
    question: str = _column(Text, nullable=False)
    asked_at: datetime = _column(UtcDateTime, nullable=False)


class ApprovalRow(TableModel, table=True):
    """A6: every permission request of an ACP agent and its answer, kept with its turn."""

    __tablename__ = "approvals"
    __table_args__ = (
        Index("ix_approvals_turn", "turn_id"),
        Index("ix_approvals_session_outcome", "session_id", "outcome"),
    )

    id: str = _column(String(36), primary_key=True)
    session_id: str = _owned_by("sessions.id", nullable=False)
    turn_id: str = _owned_by("turns.id", nullable=False)
    title: str = _column(Text, nullable=False)
    tool_call_id: str | None = _column(Text, nullable=True)
    options: str = _column(Text, nullable=False)  # JSON: [{"id", "name", "kind"}]
    requested_at: datetime = _column(UtcDateTime, nullable=False)
    outcome: str = _column(String(16), nullable=False)
    option_id: str | None = _column(Text, nullable=True)
    answered_by: str | None = _column(Text, nullable=True)
    answered_at: datetime | None = _column(UtcDateTime, nullable=True)


class SessionHoldRow(TableModel, table=True):
    """Q9, Q13, C7: a runtime hold (CANCELLING, WORKFLOW_TRANSITION) an instance has on a
    session, with how many of its operations hold it. Written in the transaction that bumps the
    queue revision for it, so every instance serves one revision with the same ``heldBy``. An
    instance's rows die with it: recovery deletes them (at start-up, at lease expiry, M6)."""

    __tablename__ = "session_holds"
    __table_args__ = (Index("ix_session_holds_instance", "instance"),)

    session_id: str = _owned_by("sessions.id", primary_key=True)
    instance: int = _column(BigInteger, primary_key=True, autoincrement=False)
    kind: str = _column(String(32), primary_key=True)
    count: int = _column(Integer, nullable=False)


class AgentProcessRow(TableModel, table=True):
    """M6: every agent process group an instance runs (a ``command`` turn's, an ``acp``
    session's), from its start until it is gone, so that recovery can kill what a dead server
    left behind on its host. A group id is only meaningful on its host, and only soon after."""

    __tablename__ = "agent_processes"
    __table_args__ = (Index("ix_agent_processes_instance", "instance"),)

    host: str = _column(String(255), primary_key=True)
    pgid: int = _column(Integer, primary_key=True, autoincrement=False)
    instance: int = _column(BigInteger, nullable=False)
    session_id: str | None = _column(String(36), nullable=True)
    started_at: datetime = _column(UtcDateTime, nullable=False)


class AgentConversationRow(TableModel, table=True):
    """A8: the ACP agent's own session of a turnqueue session and what its agent advertised,
    written whenever the agent answers ``session/new``, ``session/resume`` or ``session/load``,
    so that any instance that starts the session's agent again continues that conversation."""

    __tablename__ = "agent_conversations"

    session_id: str = _owned_by("sessions.id", primary_key=True)
    profile: str = _column(String(255), nullable=False)
    agent_session_id: str = _column(String(255), nullable=False)
    can_resume: bool = _column(Boolean, nullable=False)
    can_load: bool = _column(Boolean, nullable=False)
    can_close: bool = _column(Boolean, nullable=False)
    resumed: str = _column(String(16), nullable=False)  # NEW, RESUMED or LOADED
    resume_error: str | None = _column(Text, nullable=True)
    updated_at: datetime = _column(UtcDateTime, nullable=False)


class SentMessageRow(TableModel, table=True):
    """Q15: a send that carried a ``clientMessageId``, and what it did, so that a retry of the
    same key answers it (kept at least a day; older rows of a session go with its next send)."""

    __tablename__ = "sent_messages"

    session_id: str = _owned_by("sessions.id", primary_key=True)
    key: str = _column(String(128), primary_key=True)
    digest: str = _column(String(64), nullable=False)
    outcome: str = _column(String(16), nullable=False)  # STARTED, QUEUED or STEERED
    entry_id: str | None = _column(String(36), nullable=True)
    turn_id: str | None = _column(String(36), nullable=True)
    position: int | None = _column(Integer, nullable=True)
    queued_at: datetime | None = _column(UtcDateTime, nullable=True)
    created_at: datetime = _column(UtcDateTime, nullable=False)


class SteerRequestRow(TableModel, table=True):
    """Q16: a message offered to a running turn. It is a queue entry too, queued at the tail as
    enqueueMessage would; the instance running the turn reacts to the request (the row is the
    request, not a message between instances): STEERED when the agent took it (the entry is
    then gone), QUEUED when it did not. While PENDING, a turn that ended decides it: the entry
    stays queued, or it started as a turn (STARTED)."""

    __tablename__ = "steer_requests"
    __table_args__ = (Index("ix_steer_requests_session_state", "session_id", "state"),)

    id: str = _column(String(36), primary_key=True)
    session_id: str = _owned_by("sessions.id", nullable=False)
    turn_id: str = _column(String(36), nullable=False)  # the running turn it is offered to
    entry_id: str = _column(String(36), nullable=False)
    state: str = _column(String(16), nullable=False)
    created_at: datetime = _column(UtcDateTime, nullable=False)


class OwnerRequestRow(TableModel, table=True):
    """M4: an operation only the instance running a session's turn can perform (a cancel, a
    Send Now, an approval's answer), asked on another instance. The row is the request: the
    owner claims it (PENDING → RUNNING), runs it and records its outcome (DONE, ``outcome``:
    the result or the refusal, JSON); a request never claimed is withdrawn by its requester
    (WITHDRAWN) when the owner is gone. NOTIFY only wakes the other side; each side reads the
    row, so a lost notification costs time, never the request."""

    __tablename__ = "owner_requests"
    __table_args__ = (Index("ix_owner_requests_owner_state", "owner", "state"),)

    id: str = _column(String(36), primary_key=True)
    owner: int = _column(BigInteger, nullable=False)  # the instance asked
    origin: int = _column(BigInteger, nullable=False)  # the instance asking
    op: str = _column(String(32), nullable=False)
    args: str = _column(Text, nullable=False)
    state: str = _column(String(16), nullable=False)
    outcome: str | None = _column(Text, nullable=True)
    created_at: datetime = _column(UtcDateTime, nullable=False)


class EpochRow(TableModel, table=True):
    """SQLite's epoch source: AUTOINCREMENT never reuses an id, even after deletes (R2)."""

    __tablename__ = "epochs"
    __table_args__ = {"sqlite_autoincrement": True}

    id: int = _column(Integer, primary_key=True, autoincrement=True)
    created_at: datetime = _column(UtcDateTime, nullable=False)


class InstanceRow(TableModel, table=True):
    """One row per running server process (its epoch), heartbeated; a row whose heartbeat is
    older than the lease belongs to a dead process whose turns are recovered (M4, M6)."""

    __tablename__ = "instances"

    id: int = _column(BigInteger, primary_key=True, autoincrement=False)
    started_at: datetime = _column(UtcDateTime, nullable=False)
    heartbeat_at: datetime = _column(UtcDateTime, nullable=False)


class TurnOutputRow(TableModel, table=True):
    """O1: a turn's durable output log, appended in batches while it runs; kept as long as the
    turn (deleted with it). ``offset`` counts MESSAGE characters before the record; ``data`` is
    the item's JSON (NULL for a plain MESSAGE text chunk, whose text is ``text``)."""

    __tablename__ = "turn_output"

    turn_id: str = _owned_by("turns.id", primary_key=True)
    seq: int = _column(Integer, primary_key=True, autoincrement=False)
    offset: int = _column(BigInteger, nullable=False)
    kind: str = _column(String(16), nullable=False)
    item_key: str | None = _column(String(200), nullable=True)
    text: str = _column(Text, nullable=False)
    data: Any = _column(JSON, nullable=True)


def _table(model: type[TableModel]) -> Table:
    return cast(Table, model.__table__)  # type: ignore[attr-defined]


# -- the tables the statements are written against (SQLAlchemy Core) ---------------------------
tasks = _table(TaskRow)
sessions = _table(SessionRow)
turns = _table(TurnRow)
queue_entries = _table(QueueEntryRow)
queue_session_locks = _table(QueueSessionLockRow)
queue_session_state = _table(QueueSessionStateRow)
clarifications = _table(ClarificationRow)
approvals = _table(ApprovalRow)
session_holds = _table(SessionHoldRow)
agent_processes = _table(AgentProcessRow)
sent_messages = _table(SentMessageRow)
agent_conversations = _table(AgentConversationRow)
steer_requests = _table(SteerRequestRow)
owner_requests = _table(OwnerRequestRow)
epochs = _table(EpochRow)
instances = _table(InstanceRow)
turn_output = _table(TurnOutputRow)
