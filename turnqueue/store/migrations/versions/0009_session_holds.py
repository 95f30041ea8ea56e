"""Q9, Q13, C7: ``session_holds``, the runtime holds each instance has on a session.

A hold (a cancellation under way, a workflow step change) is written in the transaction that
bumps the queue revision for it, so one revision is served with one ``heldBy`` on every
instance; a dead instance's rows are deleted by recovery (M6).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "session_holds",
        sa.Column(
            "session_id",
            sa.String(36),
            sa.ForeignKey(
                "sessions.id", name="fk_session_holds_session_id_sessions", ondelete="CASCADE"
            ),
            nullable=False,
        ),
        sa.Column("instance", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("session_id", "instance", "kind", name="pk_session_holds"),
    )
    op.create_index("ix_session_holds_instance", "session_holds", ["instance"])


def downgrade() -> None:
    op.drop_table("session_holds")
