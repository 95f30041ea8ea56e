"""Q15, Q16: idempotent sends, steering, and where a turn came from.

* ``sent_messages``: a send that carried a client's ``clientMessageId`` and what it did (the
  entry it queued, the turn it started), so a retry answers it instead of sending again.
* ``steer_requests``: a message offered to a running turn, which the instance running it takes
  into the turn or leaves queued (Q16).
* ``queue_entries.client_message_id``, ``turns.client_message_id``: the key travels with the
  entry and the turn it became; ``turns.entry_id``: the queue entry a turn was started from.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "sent_messages",
        sa.Column(
            "session_id",
            sa.String(36),
            sa.ForeignKey(
                "sessions.id", name="fk_sent_messages_session_id_sessions", ondelete="CASCADE"
            ),
            nullable=False,
        ),
        sa.Column("key", sa.String(128), nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("entry_id", sa.String(36), nullable=True),
        sa.Column("turn_id", sa.String(36), nullable=True),
        sa.Column("position", sa.Integer(), nullable=True),
        sa.Column("queued_at", TS, nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("session_id", "key", name="pk_sent_messages"),
    )
    op.create_table(
        "steer_requests",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column(
            "session_id",
            sa.String(36),
            sa.ForeignKey(
                "sessions.id", name="fk_steer_requests_session_id_sessions", ondelete="CASCADE"
            ),
            nullable=False,
        ),
        sa.Column("turn_id", sa.String(36), nullable=False),
        sa.Column("entry_id", sa.String(36), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_steer_requests"),
    )
    op.create_index("ix_steer_requests_session_state", "steer_requests", ["session_id", "state"])
    # Plain ADD COLUMNs on both dialects (a batch copy of queue_entries would drop 0004's
    # triggers).
    op.add_column("queue_entries", sa.Column("client_message_id", sa.String(128), nullable=True))
    op.add_column("turns", sa.Column("client_message_id", sa.String(128), nullable=True))
    op.add_column("turns", sa.Column("entry_id", sa.String(36), nullable=True))


def downgrade() -> None:
    op.execute("ALTER TABLE turns DROP COLUMN entry_id")
    op.execute("ALTER TABLE turns DROP COLUMN client_message_id")
    op.execute("ALTER TABLE queue_entries DROP COLUMN client_message_id")
    op.drop_table("steer_requests")
    op.drop_table("sent_messages")
