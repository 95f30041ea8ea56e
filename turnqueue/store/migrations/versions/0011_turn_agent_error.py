"""A11: a turn's failure classified (``error_kind``) and its agent's stderr kept apart
(``agent_stderr``), never mixed into ``error``.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("turns") as batch:
        batch.add_column(sa.Column("error_kind", sa.String(32), nullable=True))
        batch.add_column(sa.Column("agent_stderr", sa.Text, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("turns") as batch:
        batch.drop_column("agent_stderr")
        batch.drop_column("error_kind")
