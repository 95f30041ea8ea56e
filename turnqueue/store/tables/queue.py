"""The tables of a session's queue: its entries, the lock row with the queue revision (Q3, Q13),
the policy (Q1, Q14), runtime holds (Q9, C7), sends kept for retries (Q15) and steer requests
(Q16)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Boolean, Index, Integer, String, Text, false, text, true

from turnqueue.store.tables.model import TableModel, column, owned_by, partial, table
from turnqueue.store.tables.timestamps import UtcDateTime


class QueueEntryRow(TableModel, table=True):
    __tablename__ = "queue_entries"
    __table_args__ = (
        Index("ix_queue_entries_session_id_position", "session_id", "position"),
        # The visible queue in FIFO order (head, listing); each dialect spells the predicate
        # the way ``in_flight == false()`` renders, so the partial index is used.
        Index(
            "ix_queue_entries_visible",
            "session_id",
            "position",
            "id",
            postgresql_where="NOT in_flight",
            sqlite_where="in_flight = 0",
        ),
        partial("ix_queue_entries_in_flight", "session_id", where="in_flight"),
    )

    id: str = column(String(36), primary_key=True)
    session_id: str = owned_by("sessions.id", nullable=False)
    # Sort key only; may go below 1 after a release (Q10). Exposed positions are ordinals.
    position: int = column(BigInteger, nullable=False)
    content: str = column(Text, nullable=False)
    source: str = column(String(16), nullable=False)
    queued_at: datetime = column(UtcDateTime, nullable=False)
    in_flight: bool = column(Boolean, nullable=False, server_default=false())
    reserved_at: datetime | None = column(UtcDateTime, nullable=True)
    # The instance that reserved it: if that instance dies, the entry goes back (Q10, M6).
    reserved_by: int | None = column(BigInteger, nullable=True)
    # Q15: the client's key of the send that queued it.
    client_message_id: str | None = column(String(128), nullable=True)


class QueueSessionLockRow(TableModel, table=True):
    """The Q3 lock row and the durable queue revision (Q13). Never deleted."""

    __tablename__ = "queue_session_locks"
    __table_args__ = (
        # Recovery looks for marks every heartbeat: only the few marked rows are indexed.
        partial(
            "ix_queue_session_locks_cancel_mark", "session_id", where="cancel_mark IS NOT NULL"
        ),
    )

    session_id: str = owned_by("sessions.id", primary_key=True)
    revision: int = column(BigInteger, nullable=False)
    # Visible (not in-flight) entries of the session, so the view need not count the queue.
    # Kept by triggers on queue_entries (migration 0004), never written by the store.
    queued: int = column(BigInteger, nullable=False, server_default=text("0"))
    # C2, R2: the session's cancellation revision, bumped in the transaction of each
    # transition of its CANCELLING hold (session_holds): durable, so it never goes back.
    cancel_revision: int = column(BigInteger, nullable=False, server_default=text("0"))
    # Q7: the turn an accepted explicit cancel is stopping, until its park is decided.
    cancel_mark: str | None = column(String(36), nullable=True)


class QueueSessionStateRow(TableModel, table=True):
    """The durable policy (Q1, Q14). A missing row reads auto_run true."""

    __tablename__ = "queue_session_state"

    session_id: str = owned_by("sessions.id", primary_key=True)
    auto_run: bool = column(Boolean, nullable=False, server_default=true())
    pause_reason: str | None = column(String(16), nullable=True)


class SessionHoldRow(TableModel, table=True):
    """Q9, Q13, C7: a runtime hold (CANCELLING, WORKFLOW_TRANSITION) an instance has on a
    session, with how many of its operations hold it. Written in the transaction that bumps the
    queue revision for it, so every instance serves one revision with the same ``heldBy``. An
    instance's rows die with it: recovery deletes them (at start-up, at lease expiry, M6)."""

    __tablename__ = "session_holds"
    __table_args__ = (Index("ix_session_holds_instance", "instance"),)

    session_id: str = owned_by("sessions.id", primary_key=True)
    instance: int = column(BigInteger, primary_key=True, autoincrement=False)
    kind: str = column(String(32), primary_key=True)
    count: int = column(Integer, nullable=False)


class SentMessageRow(TableModel, table=True):
    """Q15: a send that carried a ``clientMessageId``, and what it did, so that a retry of the
    same key answers it (kept at least a day; older rows of a session go with its next send)."""

    __tablename__ = "sent_messages"

    session_id: str = owned_by("sessions.id", primary_key=True)
    key: str = column(String(128), primary_key=True)
    digest: str = column(String(64), nullable=False)
    outcome: str = column(String(16), nullable=False)  # STARTED, QUEUED or STEERED
    entry_id: str | None = column(String(36), nullable=True)
    turn_id: str | None = column(String(36), nullable=True)
    position: int | None = column(Integer, nullable=True)
    queued_at: datetime | None = column(UtcDateTime, nullable=True)
    created_at: datetime = column(UtcDateTime, nullable=False)


class SteerRequestRow(TableModel, table=True):
    """Q16: a message offered to a running turn. It is a queue entry too, queued at the tail as
    enqueueMessage would; the instance running the turn reacts to the request (the row is the
    request, not a message between instances): STEERED when the agent took it (the entry is
    then gone), QUEUED when it did not. While PENDING, a turn that ended decides it: the entry
    stays queued, or it started as a turn (STARTED)."""

    __tablename__ = "steer_requests"
    __table_args__ = (Index("ix_steer_requests_session_state", "session_id", "state"),)

    id: str = column(String(36), primary_key=True)
    session_id: str = owned_by("sessions.id", nullable=False)
    turn_id: str = column(String(36), nullable=False)  # the running turn it is offered to
    entry_id: str = column(String(36), nullable=False)
    state: str = column(String(16), nullable=False)
    created_at: datetime = column(UtcDateTime, nullable=False)


# -- the tables the statements are written against (SQLAlchemy Core) ---------------------------
queue_entries = table(QueueEntryRow)
queue_session_locks = table(QueueSessionLockRow)
queue_session_state = table(QueueSessionStateRow)
session_holds = table(SessionHoldRow)
sent_messages = table(SentMessageRow)
steer_requests = table(SteerRequestRow)
