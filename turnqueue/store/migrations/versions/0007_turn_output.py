"""A turn's durable output log (O1): ``turn_output``, one row per text chunk or item.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A new table only: no existing table is recreated. Turns that ended before this migration
    # have no log rows; their output stays in ``turns.output`` (read as one record).
    op.create_table(
        "turn_output",
        sa.Column(
            "turn_id",
            sa.String(36),
            sa.ForeignKey("turns.id", ondelete="CASCADE", name="fk_turn_output_turn_id_turns"),
            nullable=False,
        ),
        sa.Column("seq", sa.Integer, nullable=False, autoincrement=False),
        sa.Column("offset", sa.BigInteger, nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("item_key", sa.String(200), nullable=True),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("data", sa.JSON, nullable=True),
        sa.PrimaryKeyConstraint("turn_id", "seq", name="pk_turn_output"),
    )


def downgrade() -> None:
    op.drop_table("turn_output")
