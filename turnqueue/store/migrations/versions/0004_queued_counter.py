"""A long queue must not slow every reservation (bench P6): a visible-entry counter on the lock row,
kept by triggers, and partial indexes for the visible entries and the RUNNING turn.

* ``queue_session_locks.queued``: how many entries of the session are visible (not in flight).
  :meth:`SqlTx.lock` reads it instead of counting the queue, which made each reservation
  O(queue length). Triggers on ``queue_entries`` keep it in the same statement as every insert,
  delete and change of ``in_flight`` or ``session_id``, whoever writes (the store, a seed script,
  an operator), so it cannot drift from the rows.

  - PostgreSQL: statement-level triggers over transition tables: one UPDATE of a lock row per
    statement and session, however many entries the statement touches (a row-level trigger
    would update one lock row once per entry, and PostgreSQL follows a growing version chain on
    each repeated update of a row inside one transaction: O(n²) for a bulk change).
  - SQLite: row-level triggers (it has no other kind; its updates are in place).

* ``ix_queue_entries_visible (session_id, position, id) WHERE NOT in_flight``: the head lookup,
  the listing and the tail read only visible entries, already in FIFO order.
* ``ix_turns_running`` becomes ``(session_id, seq) WHERE status = 'RUNNING'``, so "the newest
  RUNNING turn" of the view is one index probe instead of a backward scan over the session's
  ended turns.

HAZARD (SQLite): a later batch migration that recreates ``queue_entries`` or
``queue_session_locks`` (Alembic's move-and-copy) must drop these triggers first and create them
again after: recreating ``queue_entries`` drops them silently, and renaming a table the trigger
bodies name can fail. ``tests/store/test_migrations.py`` checks they exist and count at head.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: The trigger names (both dialects); the migration tests look for them.
TRIGGERS = (
    "queue_entries_queued_insert",
    "queue_entries_queued_delete",
    "queue_entries_queued_update",
)

_BACKFILL = """
UPDATE queue_session_locks SET queued = (
    SELECT count(*) FROM queue_entries
    WHERE queue_entries.session_id = queue_session_locks.session_id
      AND queue_entries.in_flight = {false})
"""

_PG_FUNCTIONS = {
    "queue_entries_queued_insert": """
        UPDATE queue_session_locks AS l SET queued = l.queued + d.n
        FROM (SELECT session_id, count(*) AS n FROM new_rows WHERE NOT in_flight
              GROUP BY session_id) AS d
        WHERE l.session_id = d.session_id;""",
    "queue_entries_queued_delete": """
        UPDATE queue_session_locks AS l SET queued = l.queued - d.n
        FROM (SELECT session_id, count(*) AS n FROM old_rows WHERE NOT in_flight
              GROUP BY session_id) AS d
        WHERE l.session_id = d.session_id;""",
    # Fires for every UPDATE statement (PostgreSQL allows no column list with transition
    # tables); a statement that changes no entry's visibility or session updates no lock row.
    "queue_entries_queued_update": """
        UPDATE queue_session_locks AS l SET queued = l.queued + d.n
        FROM (SELECT session_id, sum(n) AS n FROM (
                  SELECT session_id, -count(*) AS n FROM old_rows WHERE NOT in_flight
                  GROUP BY session_id
                  UNION ALL
                  SELECT session_id, count(*) AS n FROM new_rows WHERE NOT in_flight
                  GROUP BY session_id) AS x
              GROUP BY session_id HAVING sum(n) <> 0) AS d
        WHERE l.session_id = d.session_id;""",
}
_PG_EVENTS = {
    "queue_entries_queued_insert": "INSERT ON queue_entries REFERENCING NEW TABLE AS new_rows",
    "queue_entries_queued_delete": "DELETE ON queue_entries REFERENCING OLD TABLE AS old_rows",
    "queue_entries_queued_update": (
        "UPDATE ON queue_entries REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows"
    ),
}

_SQLITE_TRIGGERS = {
    "queue_entries_queued_insert": """
        AFTER INSERT ON queue_entries WHEN NOT NEW.in_flight
        BEGIN
            UPDATE queue_session_locks SET queued = queued + 1
            WHERE session_id = NEW.session_id;
        END""",
    "queue_entries_queued_delete": """
        AFTER DELETE ON queue_entries WHEN NOT OLD.in_flight
        BEGIN
            UPDATE queue_session_locks SET queued = queued - 1
            WHERE session_id = OLD.session_id;
        END""",
    "queue_entries_queued_update": """
        AFTER UPDATE OF in_flight, session_id ON queue_entries
        WHEN OLD.in_flight <> NEW.in_flight OR OLD.session_id <> NEW.session_id
        BEGIN
            UPDATE queue_session_locks SET queued = queued - 1
            WHERE session_id = OLD.session_id AND NOT OLD.in_flight;
            UPDATE queue_session_locks SET queued = queued + 1
            WHERE session_id = NEW.session_id AND NOT NEW.in_flight;
        END""",
}


def _running_index(columns: list[str]) -> None:
    op.create_index(
        "ix_turns_running",
        "turns",
        columns,
        postgresql_where=sa.text("status = 'RUNNING'"),
        sqlite_where=sa.text("status = 'RUNNING'"),
    )


def upgrade() -> None:
    pg = op.get_bind().dialect.name == "postgresql"
    # Column first, triggers last: nothing below recreates a table (SQLite batch), which would
    # drop triggers created before it.
    with op.batch_alter_table("queue_session_locks") as batch:
        batch.add_column(
            sa.Column("queued", sa.BigInteger(), nullable=False, server_default=sa.text("0"))
        )
    op.execute(_BACKFILL.format(false="false" if pg else "0"))
    op.create_index(
        "ix_queue_entries_visible",
        "queue_entries",
        ["session_id", "position", "id"],
        # Each dialect's spelling of the query's own predicate (``in_flight = false`` renders
        # ``= 0`` on SQLite, which only uses a partial index whose terms the query repeats).
        postgresql_where=sa.text("NOT in_flight"),
        sqlite_where=sa.text("in_flight = 0"),
    )
    op.drop_index("ix_turns_running", "turns")
    _running_index(["session_id", "seq"])
    for name in TRIGGERS:
        if pg:
            op.execute(
                f"CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$\n"
                f"BEGIN{_PG_FUNCTIONS[name]}\n    RETURN NULL;\nEND $$"
            )
            op.execute(
                f"CREATE TRIGGER {name} AFTER {_PG_EVENTS[name]} "
                f"FOR EACH STATEMENT EXECUTE FUNCTION {name}()"
            )
        else:
            op.execute(f"CREATE TRIGGER {name} {_SQLITE_TRIGGERS[name]}")


def downgrade() -> None:
    pg = op.get_bind().dialect.name == "postgresql"
    for name in TRIGGERS:
        if pg:
            op.execute(f"DROP TRIGGER {name} ON queue_entries")
            op.execute(f"DROP FUNCTION {name}()")
        else:
            op.execute(f"DROP TRIGGER {name}")
    op.drop_index("ix_turns_running", "turns")
    _running_index(["session_id"])
    op.drop_index("ix_queue_entries_visible", "queue_entries")
    with op.batch_alter_table("queue_session_locks") as batch:
        batch.drop_column("queued")
