"""The schema: every table turnqueue stores, declared once, as SQLModel models (``table=True``).

The Alembic migrations create exactly this (``tests/store/test_migrations.py`` runs autogenerate's
comparison against a migrated database). Ids are UUID strings, enums are stored as their string
values, timestamps are timezone-aware UTC.

* Every field has an explicit ``sa_column``, in the table's column order: SQLModel's own types
  would be wrong here (unbounded ``VARCHAR`` for ``VARCHAR(36)``/``TEXT``, ``INTEGER`` for
  ``BIGINT`` revisions, no ``UtcDateTime``, no server defaults).
* No Python-side defaults: statements run on the driver, without the SQLAlchemy execution
  context that would apply them (``turnqueue.store.statement``); defaults are the server's.
* The models share a metadata of their own (:data:`metadata`), not SQLModel's global one.
* Statements are SQLAlchemy Core against ``Model.__table__`` (the tables this package exports)
  and rows become domain dataclasses by column name (``turnqueue.store.rows.RowMap``): no ORM
  session, no model instances.

This is the schema's face: the store imports ``from turnqueue.store.tables import x``, and
importing it declares every table in :data:`metadata`. The models are grouped by aggregate
(``sessions``, ``queue``, ``cluster``); ``model`` holds the metadata, the models' base and the
field helpers, ``timestamps`` the ``UtcDateTime`` type.
"""

from turnqueue.store.tables.cluster import (
    agent_processes,
    epoch_seq,
    epochs,
    instances,
    owner_requests,
)
from turnqueue.store.tables.model import metadata
from turnqueue.store.tables.queue import (
    queue_entries,
    queue_session_locks,
    queue_session_state,
    sent_messages,
    session_holds,
    steer_requests,
)
from turnqueue.store.tables.sessions import (
    agent_conversations,
    approvals,
    clarifications,
    sessions,
    tasks,
    turn_output,
    turns,
)
from turnqueue.store.tables.timestamps import UtcDateTime

__all__ = [
    "UtcDateTime",
    "agent_conversations",
    "agent_processes",
    "approvals",
    "clarifications",
    "epoch_seq",
    "epochs",
    "instances",
    "metadata",
    "owner_requests",
    "queue_entries",
    "queue_session_locks",
    "queue_session_state",
    "sent_messages",
    "session_holds",
    "sessions",
    "steer_requests",
    "tasks",
    "turn_output",
    "turns",
]
