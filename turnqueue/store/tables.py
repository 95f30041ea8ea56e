"""SQLAlchemy Core schema: the single description of every table turnqueue stores.

The Alembic migrations create exactly this (``tests/store/test_migrations.py`` compares them). Ids
are UUID strings, enums are stored as their string values, timestamps are timezone-aware UTC.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

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
from sqlalchemy.types import TypeDecorator

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING_CONVENTION)


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

    # SQLite: the text written and read in one step each, with the same format as SQLAlchemy's
    # DATETIME ("YYYY-MM-DD HH:MM:SS.ffffff"), instead of its format string and a second
    # processor (bench P1: timestamps are bound and read in every reservation).
    def bind_processor(self, dialect: Dialect) -> Callable[[Any], Any] | None:
        if dialect.name != "sqlite":
            return super().bind_processor(dialect)

        def to_text(value: datetime | None) -> str | None:
            if value is None:
                return None
            if value.tzinfo is None:
                raise ValueError("naive datetime given to a UTC column")
            return value.astimezone(UTC).replace(tzinfo=None).isoformat(" ", "microseconds")

        return to_text

    def result_processor(self, dialect: Dialect, coltype: object) -> Callable[[Any], Any] | None:
        if dialect.name != "sqlite":
            return super().result_processor(dialect, coltype)

        def from_text(value: str | None) -> datetime | None:
            return None if value is None else datetime.fromisoformat(value).replace(tzinfo=UTC)

        return from_text


#: The durable epoch source on PostgreSQL (R2). SQLite uses the ``epochs`` table instead.
epoch_seq = Sequence("turnqueue_epoch_seq", metadata=metadata)

tasks = Table(
    "tasks",
    metadata,
    Column("id", String(36), primary_key=True),
    Column("title", Text, nullable=False),
    Column("owner", String(200), nullable=False),
    Column("workflow_step", String(200), nullable=False),
    # No FK: sessions reference tasks, and a task points at its current session (a cycle).
    Column("current_session_id", String(36), nullable=True),
    Column("created_at", UtcDateTime, nullable=False),
    Index("ix_tasks_owner_created_at", "owner", "created_at"),
)

sessions = Table(
    "sessions",
    metadata,
    Column("id", String(36), primary_key=True),
    Column("task_id", String(36), ForeignKey("tasks.id", ondelete="CASCADE"), nullable=False),
    Column("agent", String(100), nullable=False),
    Column("state", String(32), nullable=False),
    Column("revision", BigInteger, nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
    # The task reached the workflow's last step while a turn ran: COMPLETED when it ends (0005).
    Column("complete_on_idle", Boolean, nullable=False, server_default=false()),
    Index("ix_sessions_task_id", "task_id"),
)

turns = Table(
    "turns",
    metadata,
    Column("id", String(36), primary_key=True),
    Column("session_id", String(36), ForeignKey("sessions.id", ondelete="CASCADE"), nullable=False),
    # Per-session ordinal: turns are ordered by it (timestamps can tie).
    Column("seq", Integer, nullable=False),
    Column("prompt", Text, nullable=False),
    Column("source", String(16), nullable=False),
    Column("status", String(16), nullable=False),
    Column("output", Text, nullable=False),
    Column("error", Text, nullable=True),
    Column("started_at", UtcDateTime, nullable=False),
    Column("ended_at", UtcDateTime, nullable=True),
    # The instance (its epoch) that runs this turn; only it can stop the agent (M4).
    Column("owner", BigInteger, nullable=True),
    # The agent's process group and host, so recovery can kill what a dead server left (M6).
    Column("agent_host", String(255), nullable=True),
    Column("agent_pgid", Integer, nullable=True),
    Index("ix_turns_session_id_seq", "session_id", "seq", unique=True),
    # The view's "newest RUNNING turn" and recovery (M6); queries must use the literal
    # 'RUNNING' to hit it.
    Index(
        "ix_turns_running",
        "session_id",
        "seq",
        postgresql_where="status = 'RUNNING'",
        sqlite_where="status = 'RUNNING'",
    ),
)

queue_entries = Table(
    "queue_entries",
    metadata,
    Column("id", String(36), primary_key=True),
    Column("session_id", String(36), ForeignKey("sessions.id", ondelete="CASCADE"), nullable=False),
    # Sort key only; may go below 1 after a release (Q10). Exposed positions are ordinals.
    Column("position", BigInteger, nullable=False),
    Column("content", Text, nullable=False),
    Column("source", String(16), nullable=False),
    Column("queued_at", UtcDateTime, nullable=False),
    Column("in_flight", Boolean, nullable=False, server_default=false()),
    Column("reserved_at", UtcDateTime, nullable=True),
    # The instance that reserved it: if that instance dies, the entry goes back (Q10, M6).
    Column("reserved_by", BigInteger, nullable=True),
    Index("ix_queue_entries_session_id_position", "session_id", "position"),
    # The visible queue in FIFO order (head, listing); each dialect spells the predicate the
    # way ``in_flight == false()`` renders, so the partial index is used.
    Index(
        "ix_queue_entries_visible",
        "session_id",
        "position",
        "id",
        postgresql_where="NOT in_flight",
        sqlite_where="in_flight = 0",
    ),
    Index(
        "ix_queue_entries_in_flight",
        "session_id",
        postgresql_where="in_flight",
        sqlite_where="in_flight",
    ),
)

queue_session_locks = Table(
    "queue_session_locks",
    metadata,
    # The Q3 lock row and the durable queue revision (Q13). Never deleted.
    Column(
        "session_id",
        String(36),
        ForeignKey("sessions.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("revision", BigInteger, nullable=False),
    # Visible (not in-flight) entries of the session, so the view need not count the queue.
    # Kept by triggers on queue_entries (migration 0004), never written by the store.
    Column("queued", BigInteger, nullable=False, server_default=text("0")),
    # R2: the highest cancellation revision any instance published (or reserved) for the session.
    Column("cancel_floor", BigInteger, nullable=False, server_default=text("0")),
    # Q7: the turn an accepted explicit cancel is stopping, until its park is decided.
    Column("cancel_mark", String(36), nullable=True),
    # Recovery looks for marks every heartbeat: only the few marked rows are indexed.
    Index(
        "ix_queue_session_locks_cancel_mark",
        "session_id",
        postgresql_where="cancel_mark IS NOT NULL",
        sqlite_where="cancel_mark IS NOT NULL",
    ),
)

queue_session_state = Table(
    "queue_session_state",
    metadata,
    # The durable policy (Q1, Q14). A missing row reads auto_run true.
    Column(
        "session_id",
        String(36),
        ForeignKey("sessions.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("auto_run", Boolean, nullable=False, server_default=true()),
    Column("pause_reason", String(16), nullable=True),
)

clarifications = Table(
    "clarifications",
    metadata,
    Column("id", String(36), primary_key=True),
    Column(
        "session_id",
        String(36),
        ForeignKey("sessions.id", ondelete="CASCADE"),
        nullable=False,
        unique=True,
    ),
    Column("turn_id", String(36), nullable=True),
    Column("question", Text, nullable=False),
    Column("asked_at", UtcDateTime, nullable=False),
)

#: A6: every permission request of an ACP agent and its answer, kept with its turn.
approvals = Table(
    "approvals",
    metadata,
    Column("id", String(36), primary_key=True),
    Column("session_id", String(36), ForeignKey("sessions.id", ondelete="CASCADE"), nullable=False),
    Column("turn_id", String(36), ForeignKey("turns.id", ondelete="CASCADE"), nullable=False),
    Column("title", Text, nullable=False),
    Column("tool_call_id", Text, nullable=True),
    Column("options", Text, nullable=False),  # JSON: [{"id", "name", "kind"}]
    Column("requested_at", UtcDateTime, nullable=False),
    Column("outcome", String(16), nullable=False),
    Column("option_id", Text, nullable=True),
    Column("answered_by", Text, nullable=True),
    Column("answered_at", UtcDateTime, nullable=True),
    Index("ix_approvals_turn", "turn_id"),
    Index("ix_approvals_session_outcome", "session_id", "outcome"),
)

epochs = Table(
    "epochs",
    metadata,
    # SQLite's epoch source: AUTOINCREMENT never reuses an id, even after deletes (R2).
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("created_at", UtcDateTime, nullable=False),
    sqlite_autoincrement=True,
)

instances = Table(
    "instances",
    metadata,
    # One row per running server process (its epoch), heartbeated; a row whose heartbeat is
    # older than the lease belongs to a dead process whose turns are recovered (M4, M6).
    Column("id", BigInteger, primary_key=True, autoincrement=False),
    Column("started_at", UtcDateTime, nullable=False),
    Column("heartbeat_at", UtcDateTime, nullable=False),
)

turn_output = Table(
    "turn_output",
    metadata,
    # O1: a turn's durable output log, appended in batches while it runs; kept as long as the
    # turn (deleted with it). ``offset`` counts MESSAGE characters before the record; ``data``
    # is the item's JSON (NULL for a plain MESSAGE text chunk, whose text is ``text``).
    Column("turn_id", String(36), ForeignKey("turns.id", ondelete="CASCADE"), primary_key=True),
    Column("seq", Integer, primary_key=True, autoincrement=False),
    Column("offset", BigInteger, nullable=False),
    Column("kind", String(16), nullable=False),
    Column("item_key", String(200), nullable=True),
    Column("text", Text, nullable=False),
    Column("data", JSON, nullable=True),
)
