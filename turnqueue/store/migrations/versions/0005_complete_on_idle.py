"""A session whose task reached the workflow's last step while a turn ran becomes COMPLETED when
that turn ends: ``sessions.complete_on_idle`` remembers it, durably, until then.

Without it the turn's end could not tell "the task was moved to its last step while this turn
ran" (the session is done: COMPLETED) from "a prompt reopened the COMPLETED session of a task
already at its last step" (WAITING_FOR_INPUT, SPEC §2: a prompt reopens it).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A plain ADD COLUMN on both dialects: no table is recreated (see 0004's hazard).
    op.add_column(
        "sessions",
        sa.Column("complete_on_idle", sa.Boolean(), nullable=False, server_default=sa.false()),
    )


def downgrade() -> None:
    # SQLite ≥ 3.35 drops a column in place; a batch (copy and rename) of ``sessions`` would
    # cascade-delete every turn and entry through their foreign keys.
    op.execute("ALTER TABLE sessions DROP COLUMN complete_on_idle")
