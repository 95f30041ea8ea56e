"""Tasks, their sessions and a session's turns: states, what a session's revision shows (R1),
clarifications, cancellation, and the operations asked of the instance running a turn (M4)."""

from __future__ import annotations

from dataclasses import field
from datetime import datetime
from enum import StrEnum

from turnqueue.domain.agents import AgentErrorKind
from turnqueue.domain.values import value


class SessionState(StrEnum):
    CREATED = "CREATED"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    WAITING_FOR_INPUT = "WAITING_FOR_INPUT"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


#: States in which a prompt may start a turn (SPEC §1). ``COMPLETED`` is reopened by a prompt.
PROMPTABLE = frozenset({SessionState.WAITING_FOR_INPUT, SessionState.COMPLETED})


#: States in which the session's agent is working.
BUSY = frozenset({SessionState.RUNNING, SessionState.STARTING})


class TurnStatus(StrEnum):
    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    CANCELLED = "CANCELLED"
    FAILED = "FAILED"


class MessageSource(StrEnum):
    USER = "USER"
    AGENT = "AGENT"
    WORKFLOW = "WORKFLOW"
    SERVER = "SERVER"


class CancelOutcome(StrEnum):
    STOPPED = "STOPPED"
    ESCALATED = "ESCALATED"
    TIMED_OUT = "TIMED_OUT"
    NOTHING_RUNNING = "NOTHING_RUNNING"


class CancelKind(StrEnum):
    """Who asked for a cancellation (C1 counts every kind; only EXPLICIT pauses, Q7)."""

    EXPLICIT = "EXPLICIT"
    REPLACEMENT = "REPLACEMENT"
    INTERNAL = "INTERNAL"


@value
class Task:
    id: str
    title: str
    owner: str
    workflow_step: str
    current_session_id: str | None
    created_at: datetime


@value
class TurnAt:
    """A turn as one session revision shows it (R1: a turn's start and end are revisions)."""

    id: str
    status: TurnStatus
    error: str | None
    ended_at: datetime | None


@value
class SessionParts:
    """What a session's own revision covers besides its state (R1, A6), read in the statement
    that read the revision, so one revision always shows the same parts (R3)."""

    clarification: Clarification | None
    pending_approval_id: str | None
    current_turn: TurnAt | None


@value
class Session:
    id: str
    task_id: str
    owner: str
    agent: str
    state: SessionState
    revision: int
    created_at: datetime
    updated_at: datetime
    #: read with the revision by every query of sessions; None from a write's RETURNING (not
    #: part of a session's equality: two reads of one row are the same session)
    parts: SessionParts | None = field(default=None, compare=False)

    @property
    def promptable(self) -> bool:
        return self.state in PROMPTABLE


@value
class Turn:
    id: str
    session_id: str
    prompt: str
    source: MessageSource
    status: TurnStatus
    output: str
    error: str | None
    started_at: datetime
    ended_at: datetime | None
    owner: int | None = None  # the instance running it (M4)
    error_kind: AgentErrorKind | None = None  # A11: how its failure is classified
    agent_stderr: str | None = None  # A11: what its agent wrote to stderr meanwhile (a tail)
    client_message_id: str | None = None  # Q15: the key of the send it came from
    entry_id: str | None = None  # Q16: the queue entry it was started from, if one


class RequestState(StrEnum):
    """M4: an owner request's life: asked, claimed by the owner, answered, or withdrawn by its
    requester before the owner claimed it (it then never runs)."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    DONE = "DONE"
    WITHDRAWN = "WITHDRAWN"


@value
class OwnerRequest:
    """M4: an operation asked of the instance running a session's turn, and where it stands."""

    id: str
    owner: int
    origin: int
    op: str
    args: str  # JSON
    state: RequestState
    outcome: str | None  # JSON, once DONE


@value
class Clarification:
    id: str
    session_id: str
    turn_id: str | None
    question: str
    asked_at: datetime


@value
class CancellationStatus:
    session_id: str
    pending: bool
    revision: int
