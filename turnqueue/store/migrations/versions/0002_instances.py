"""Several instances (M4): the ``instances`` lease table, turn owners and entry reservers.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "instances",
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("started_at", TS, nullable=False),
        sa.Column("heartbeat_at", TS, nullable=False),
    )
    with op.batch_alter_table("turns") as batch:
        batch.add_column(sa.Column("owner", sa.BigInteger, nullable=True))
    with op.batch_alter_table("queue_entries") as batch:
        batch.add_column(sa.Column("reserved_by", sa.BigInteger, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("queue_entries") as batch:
        batch.drop_column("reserved_by")
    with op.batch_alter_table("turns") as batch:
        batch.drop_column("owner")
    op.drop_table("instances")
