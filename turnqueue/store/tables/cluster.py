"""The tables of the instances sharing a database: epochs (R2), heartbeats (M4, M6), the agent
processes each runs (M6) and the operations one asks of another (M4)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Index, Integer, Sequence, String, Text

from turnqueue.store.tables.model import TableModel, column, metadata, table
from turnqueue.store.tables.timestamps import UtcDateTime

#: The durable epoch source on PostgreSQL (R2). SQLite uses the ``epochs`` table instead.
epoch_seq = Sequence("turnqueue_epoch_seq", metadata=metadata)


class AgentProcessRow(TableModel, table=True):
    """M6: every agent process group an instance runs (a ``command`` turn's, an ``acp``
    session's), from its start until it is gone, so that recovery can kill what a dead server
    left behind on its host. A group id is only meaningful on its host, and only soon after."""

    __tablename__ = "agent_processes"
    __table_args__ = (Index("ix_agent_processes_instance", "instance"),)

    host: str = column(String(255), primary_key=True)
    pgid: int = column(Integer, primary_key=True, autoincrement=False)
    instance: int = column(BigInteger, nullable=False)
    session_id: str | None = column(String(36), nullable=True)
    started_at: datetime = column(UtcDateTime, nullable=False)


class OwnerRequestRow(TableModel, table=True):
    """M4: an operation only the instance running a session's turn can perform (a cancel, a
    Send Now, an approval's answer), asked on another instance. The row is the request: the
    owner claims it (PENDING → RUNNING), runs it and records its outcome (DONE, ``outcome``:
    the result or the refusal, JSON); a request never claimed is withdrawn by its requester
    (WITHDRAWN) when the owner is gone. NOTIFY only wakes the other side; each side reads the
    row, so a lost notification costs time, never the request."""

    __tablename__ = "owner_requests"
    __table_args__ = (Index("ix_owner_requests_owner_state", "owner", "state"),)

    id: str = column(String(36), primary_key=True)
    owner: int = column(BigInteger, nullable=False)  # the instance asked
    origin: int = column(BigInteger, nullable=False)  # the instance asking
    op: str = column(String(32), nullable=False)
    args: str = column(Text, nullable=False)
    state: str = column(String(16), nullable=False)
    outcome: str | None = column(Text, nullable=True)
    created_at: datetime = column(UtcDateTime, nullable=False)


class EpochRow(TableModel, table=True):
    """SQLite's epoch source: AUTOINCREMENT never reuses an id, even after deletes (R2)."""

    __tablename__ = "epochs"
    __table_args__ = {"sqlite_autoincrement": True}

    id: int = column(Integer, primary_key=True, autoincrement=True)
    created_at: datetime = column(UtcDateTime, nullable=False)


class InstanceRow(TableModel, table=True):
    """One row per running server process (its epoch), heartbeated; a row whose heartbeat is
    older than the lease belongs to a dead process whose turns are recovered (M4, M6)."""

    __tablename__ = "instances"

    id: int = column(BigInteger, primary_key=True, autoincrement=False)
    started_at: datetime = column(UtcDateTime, nullable=False)
    heartbeat_at: datetime = column(UtcDateTime, nullable=False)


# -- the tables the statements are written against (SQLAlchemy Core) ---------------------------
agent_processes = table(AgentProcessRow)
owner_requests = table(OwnerRequestRow)
epochs = table(EpochRow)
instances = table(InstanceRow)
