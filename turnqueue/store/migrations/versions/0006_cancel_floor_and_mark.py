"""Cancellation across instances: a durable revision floor (R2) and the explicit-cancel mark (Q7).

* ``queue_session_locks.cancel_floor``: the highest cancellation revision published (or reserved
  for a release) for the session by any instance. Every transaction that changes the queue
  status raises it and reads it back, so an older instance owning a later turn continues above
  it (R2) even when it did not hear the other instance's transitions.
* ``queue_session_locks.cancel_mark``: the turn an accepted explicit cancel is stopping, written
  when the cancel is accepted and cleared in the transaction that parks the backlog (Q7). When
  the owner dies in between, recovery finds the mark and parks instead of draining.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Plain ADD COLUMNs on both dialects: a batch (move and copy) of queue_session_locks would
    # have to drop and recreate 0004's triggers.
    op.add_column(
        "queue_session_locks",
        sa.Column("cancel_floor", sa.BigInteger(), nullable=False, server_default=sa.text("0")),
    )
    op.add_column("queue_session_locks", sa.Column("cancel_mark", sa.String(36), nullable=True))
    op.create_index(
        "ix_queue_session_locks_cancel_mark",
        "queue_session_locks",
        ["session_id"],
        postgresql_where=sa.text("cancel_mark IS NOT NULL"),
        sqlite_where=sa.text("cancel_mark IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_queue_session_locks_cancel_mark", "queue_session_locks")
    # SQLite ≥ 3.35 drops a column in place (see 0005).
    op.execute("ALTER TABLE queue_session_locks DROP COLUMN cancel_mark")
    op.execute("ALTER TABLE queue_session_locks DROP COLUMN cancel_floor")
