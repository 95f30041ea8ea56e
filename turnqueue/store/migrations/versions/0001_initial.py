"""Initial schema: tasks, sessions, turns, the queue, clarifications and the epoch source.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TS = sa.DateTime(timezone=True)


def _id() -> sa.Column[str]:
    return sa.Column("id", sa.String(36), nullable=False)


def _session_fk(table: str) -> sa.Column[str]:
    return sa.Column(
        "session_id",
        sa.String(36),
        sa.ForeignKey("sessions.id", name=f"fk_{table}_session_id_sessions", ondelete="CASCADE"),
        nullable=False,
    )


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        # R2: the durable epoch source on PostgreSQL (SQLite inserts into ``epochs``).
        op.execute(sa.schema.CreateSequence(sa.Sequence("turnqueue_epoch_seq")))

    op.create_table(
        "tasks",
        _id(),
        sa.Column("title", sa.Text(), nullable=False),
        sa.Column("owner", sa.String(200), nullable=False),
        sa.Column("workflow_step", sa.String(200), nullable=False),
        sa.Column("current_session_id", sa.String(36), nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_tasks"),
    )
    op.create_index("ix_tasks_owner_created_at", "tasks", ["owner", "created_at"])

    op.create_table(
        "sessions",
        _id(),
        sa.Column(
            "task_id",
            sa.String(36),
            sa.ForeignKey("tasks.id", name="fk_sessions_task_id_tasks", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("agent", sa.String(100), nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("revision", sa.BigInteger(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_sessions"),
    )
    op.create_index("ix_sessions_task_id", "sessions", ["task_id"])

    op.create_table(
        "turns",
        _id(),
        _session_fk("turns"),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("prompt", sa.Text(), nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("output", sa.Text(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("started_at", TS, nullable=False),
        sa.Column("ended_at", TS, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_turns"),
    )
    op.create_index("ix_turns_session_id_seq", "turns", ["session_id", "seq"], unique=True)
    op.create_index(
        "ix_turns_running",
        "turns",
        ["session_id"],
        postgresql_where=sa.text("status = 'RUNNING'"),
        sqlite_where=sa.text("status = 'RUNNING'"),
    )

    op.create_table(
        "queue_entries",
        _id(),
        _session_fk("queue_entries"),
        sa.Column("position", sa.BigInteger(), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("queued_at", TS, nullable=False),
        sa.Column("in_flight", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("reserved_at", TS, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_queue_entries"),
    )
    op.create_index(
        "ix_queue_entries_session_id_position", "queue_entries", ["session_id", "position"]
    )
    op.create_index(
        "ix_queue_entries_in_flight",
        "queue_entries",
        ["session_id"],
        postgresql_where=sa.text("in_flight"),
        sqlite_where=sa.text("in_flight"),
    )

    op.create_table(
        "queue_session_locks",
        _session_fk("queue_session_locks"),
        sa.Column("revision", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("session_id", name="pk_queue_session_locks"),
    )

    op.create_table(
        "queue_session_state",
        _session_fk("queue_session_state"),
        sa.Column("auto_run", sa.Boolean(), nullable=False, server_default=sa.true()),
        sa.Column("pause_reason", sa.String(16), nullable=True),
        sa.PrimaryKeyConstraint("session_id", name="pk_queue_session_state"),
    )

    op.create_table(
        "clarifications",
        _id(),
        _session_fk("clarifications"),
        sa.Column("turn_id", sa.String(36), nullable=True),
        sa.Column("question", sa.Text(), nullable=False),
        sa.Column("asked_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_clarifications"),
        sa.UniqueConstraint("session_id", name="uq_clarifications_session_id"),
    )

    op.create_table(
        "epochs",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_epochs"),
        sqlite_autoincrement=True,
    )


def downgrade() -> None:
    for table in (
        "epochs",
        "clarifications",
        "queue_session_state",
        "queue_session_locks",
        "queue_entries",
        "turns",
        "sessions",
        "tasks",
    ):
        op.drop_table(table)
    if op.get_bind().dialect.name == "postgresql":
        op.execute(sa.schema.DropSequence(sa.Sequence("turnqueue_epoch_seq")))
