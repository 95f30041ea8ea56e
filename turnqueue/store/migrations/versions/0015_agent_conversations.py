"""A8: each session's agent conversation (the ACP agent's own session id and what it advertised).

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "agent_conversations",
        sa.Column(
            "session_id",
            sa.String(36),
            sa.ForeignKey(
                "sessions.id", name="fk_agent_conversations_session_id_sessions", ondelete="CASCADE"
            ),
            nullable=False,
        ),
        sa.Column("profile", sa.String(255), nullable=False),
        sa.Column("agent_session_id", sa.String(255), nullable=False),
        sa.Column("can_resume", sa.Boolean(), nullable=False),
        sa.Column("can_load", sa.Boolean(), nullable=False),
        sa.Column("can_close", sa.Boolean(), nullable=False),
        sa.Column("resumed", sa.String(16), nullable=False),
        sa.Column("resume_error", sa.Text(), nullable=True),
        sa.Column("updated_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("session_id", name="pk_agent_conversations"),
    )


def downgrade() -> None:
    op.drop_table("agent_conversations")
