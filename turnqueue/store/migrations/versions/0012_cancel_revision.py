"""C2, R2: the cancellation revision is durable, on the lock row.

``queue_session_locks.cancel_floor`` (the highest cancellation revision any instance had
published) becomes ``cancel_revision``, the session's cancellation revision itself: bumped in the
transaction of each transition of its CANCELLING hold (``session_holds``), so every instance
reads one value and it never goes back. It continues from the old floor, above every revision
published before.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute("ALTER TABLE queue_session_locks RENAME COLUMN cancel_floor TO cancel_revision")


def downgrade() -> None:
    op.execute("ALTER TABLE queue_session_locks RENAME COLUMN cancel_revision TO cancel_floor")
