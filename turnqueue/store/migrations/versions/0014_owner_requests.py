"""M4: operations asked of the instance running a session's turn are rows (``owner_requests``).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "owner_requests",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("owner", sa.BigInteger(), nullable=False),
        sa.Column("origin", sa.BigInteger(), nullable=False),
        sa.Column("op", sa.String(32), nullable=False),
        sa.Column("args", sa.Text(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("outcome", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_owner_requests"),
    )
    op.create_index("ix_owner_requests_owner_state", "owner_requests", ["owner", "state"])


def downgrade() -> None:
    op.drop_table("owner_requests")
