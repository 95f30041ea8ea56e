"""A session's queue (Q rules): its entries, policy and status, what holds it, and what a send
did (Q15: retries, Q16: steering)."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from turnqueue.domain.sessions import MessageSource
from turnqueue.domain.values import value


class PauseReason(StrEnum):
    USER = "USER"
    CANCEL = "CANCEL"
    TRANSFER = "TRANSFER"


class HoldReason(StrEnum):
    BUSY = "BUSY"
    NOT_PROMPTABLE = "NOT_PROMPTABLE"
    CLARIFICATION = "CLARIFICATION"
    CANCELLING = "CANCELLING"
    WORKFLOW_TRANSITION = "WORKFLOW_TRANSITION"
    APPROVAL = "APPROVAL"


class SendNowScope(StrEnum):
    ENTRY = "ENTRY"
    ALL = "ALL"


@value
class QueueEntry:
    id: str
    session_id: str
    position: int
    content: str
    source: MessageSource
    queued_at: datetime
    client_message_id: str | None = None  # Q15: the key of the send that queued it


class Delivery(StrEnum):
    """How a send is delivered (Q16)."""

    AUTO = "AUTO"  # start a turn when the session is free, else queue it
    STEER = "STEER"  # offer it to the running turn first


class SendOutcome(StrEnum):
    """What a send did (Q16): started a turn, queued the message, or steered it into the
    running turn."""

    STARTED = "STARTED"
    QUEUED = "QUEUED"
    STEERED = "STEERED"


@value
class SteerRequest:
    """Q16: a message (its queue entry) offered to a running turn, and where that stands."""

    id: str
    session_id: str
    turn_id: str
    entry_id: str
    state: str  # PENDING, or a SendOutcome once decided


@value
class SentMessage:
    """Q15: what a send with a ``clientMessageId`` did (the entry it queued, the turn it
    started, or both), kept at least a day so a retry answers it instead of sending again."""

    key: str
    digest: str  # of the content: the same key with other content is a conflict
    outcome: SendOutcome
    entry_id: str | None
    turn_id: str | None
    position: int | None  # the entry's place when it was queued
    queued_at: datetime | None


@value
class QueuePolicy:
    """The durable queue state of one session (Q1, Q13, Q14)."""

    session_id: str
    auto_run: bool
    pause_reason: PauseReason | None
    revision: int


@value
class QueueStatus:
    session_id: str
    auto_run: bool
    pause_reason: PauseReason | None
    held_by: tuple[HoldReason, ...]
    entries: tuple[QueueEntry, ...]
    max: int | None
    revision: int

    @property
    def count(self) -> int:
        return len(self.entries)
