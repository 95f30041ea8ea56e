"""Recovery kills a dead server's agent processes (M6): the turn's agent host and process group.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("turns") as batch:
        batch.add_column(sa.Column("agent_host", sa.String(255), nullable=True))
        batch.add_column(sa.Column("agent_pgid", sa.Integer, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("turns") as batch:
        batch.drop_column("agent_pgid")
        batch.drop_column("agent_host")
