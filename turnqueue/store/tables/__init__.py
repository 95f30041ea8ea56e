"""The schema: every table turnqueue stores, declared once, as SQLModel models (``table=True``),
grouped by aggregate (``sessions``, ``queue``, ``cluster``); importing this declares them all in
:data:`metadata`. The migrations create exactly this (``tests/store/test_migrations.py``
compares). Ids are UUID strings, enums their string values, timestamps aware UTC.

* Every field has an explicit ``sa_column`` (``model.column``), in the table's column order:
  SQLModel's own types would be wrong here (unbounded ``VARCHAR``, ``INTEGER`` for ``BIGINT``,
  no ``UtcDateTime``, no server defaults); no Python-side defaults (statements run without
  SQLAlchemy's execution context, ``store/statement.py``).
* Statements are SQLAlchemy Core against the tables exported here; rows become domain
  dataclasses by column name (``store/rows.py``): no ORM session, no model instances.
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
