"""A6: ``approvals``, every permission request of an ACP agent and its answer, with its turn.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "approvals",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column(
            "session_id",
            sa.String(36),
            sa.ForeignKey(
                "sessions.id", name="fk_approvals_session_id_sessions", ondelete="CASCADE"
            ),
            nullable=False,
        ),
        sa.Column(
            "turn_id",
            sa.String(36),
            sa.ForeignKey("turns.id", name="fk_approvals_turn_id_turns", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("title", sa.Text(), nullable=False),
        sa.Column("tool_call_id", sa.Text(), nullable=True),
        sa.Column("options", sa.Text(), nullable=False),
        sa.Column("requested_at", TS, nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("option_id", sa.Text(), nullable=True),
        sa.Column("answered_by", sa.Text(), nullable=True),
        sa.Column("answered_at", TS, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_approvals"),
    )
    op.create_index("ix_approvals_turn", "approvals", ["turn_id"])
    op.create_index("ix_approvals_session_outcome", "approvals", ["session_id", "outcome"])


def downgrade() -> None:
    op.drop_table("approvals")
