"""M6: ``agent_processes``, every agent process group an instance runs (a ``command`` turn's, an
``acp`` session's, idle or not), so recovery kills what a dead server left on its host. It
replaces the turn's own ``agent_host``/``agent_pgid``, which an ``acp`` session's process (started
before its turns, outliving each) never filled.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "agent_processes",
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("pgid", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("instance", sa.BigInteger(), nullable=False),
        sa.Column("session_id", sa.String(36), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("host", "pgid", name="pk_agent_processes"),
    )
    op.create_index("ix_agent_processes_instance", "agent_processes", ["instance"])
    # SQLite ≥ 3.35 drops a column in place (see 0005).
    op.execute("ALTER TABLE turns DROP COLUMN agent_pgid")
    op.execute("ALTER TABLE turns DROP COLUMN agent_host")


def downgrade() -> None:
    op.add_column("turns", sa.Column("agent_host", sa.String(255), nullable=True))
    op.add_column("turns", sa.Column("agent_pgid", sa.Integer(), nullable=True))
    op.drop_table("agent_processes")
