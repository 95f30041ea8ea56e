"""The domain: frozen value objects and enums shared by every layer; nothing here does I/O. The
store builds them from rows, the GraphQL schema converts them with ``from_domain``.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from itertools import pairwise
from typing import Any, TypeVar, dataclass_transform

from turnqueue.fastinit import fast_init

_T = TypeVar("_T")


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
def value(cls: type[_T]) -> type[_T]:
    """A frozen, slotted dataclass, built by :func:`~turnqueue.fastinit.fast_init`."""
    return fast_init(dataclass(frozen=True, slots=True)(cls))


def new_id() -> str:
    return str(uuid.uuid4())


def is_valid_id(value: str) -> bool:
    try:
        return str(uuid.UUID(value)) == value.lower()
    except (ValueError, AttributeError, TypeError):
        return False


def utcnow() -> datetime:
    return datetime.now(UTC)


#: The most items one page or list answers, whatever was asked (SPEC §7: ``tasks(first:)``,
#: ``turns(last:)`` and every connection). The store caps its reads at it too.
MAX_PAGE = 200


def clamp_page(count: int) -> int:
    """At most :data:`MAX_PAGE`; a negative count is refused where it arrives (a bug here)."""
    if count < 0:
        raise ValueError(f"a page of {count} items")
    return min(count, MAX_PAGE)


# -- agents: profiles (A1), authentication and failures (A11), their conversations (A8)


class AgentType(StrEnum):
    """What runs a profile's turns (A1)."""

    ACP = "ACP"
    COMMAND = "COMMAND"
    SCRIPTED = "SCRIPTED"


class AgentErrorKind(StrEnum):
    """How an agent's failure is classified (A11), from its error answer's code and message."""

    AUTHENTICATION = "AUTHENTICATION"  # no or wrong credentials
    RATE_LIMIT = "RATE_LIMIT"  # the provider's rate limit or quota
    PROVIDER_UNREACHABLE = "PROVIDER_UNREACHABLE"  # the model provider could not be reached
    INTERNAL = "INTERNAL"  # any other error answer
    AGENT_EXITED = "AGENT_EXITED"  # the process died or closed its pipes (no answer at all)
    STALLED = "STALLED"  # A9: no agent activity within its profile's bound; its agent killed


class AuthState(StrEnum):
    """What a profile's agent last said about authentication (A11), on this instance."""

    UNKNOWN = "UNKNOWN"  # not started yet
    NOT_ASKED = "NOT_ASKED"  # it started without an ``authenticate`` call
    AUTHENTICATED = "AUTHENTICATED"  # ``authenticate`` with a method of its succeeded
    REFUSED = "REFUSED"  # it refused for want of authentication


@value
class AuthMethod:
    """One authentication method an agent lists in ``initialize`` (ACP ``authMethods``)."""

    id: str
    name: str
    description: str | None = None
    env_vars: tuple[str, ...] = ()  # an ``env_var`` method: the variables it needs


@value
class AgentAuth:
    state: AuthState = AuthState.UNKNOWN
    method: str | None = None  # the method ``authenticate`` used
    methods: tuple[AuthMethod, ...] = ()  # what the agent lists
    message: str | None = None  # the agent's own refusal (REFUSED)


class ConversationStart(StrEnum):
    """How a session's agent conversation was opened the last time its agent started (A8)."""

    NEW = "NEW"  # ``session/new``: the agent starts from nothing
    RESUMED = "RESUMED"  # ``session/resume``: the agent's own session continues
    LOADED = "LOADED"  # ``session/load``: the agent replayed its history (kept out of turns)


@value
class AgentConversation:
    """A8: the agent's own session behind a turnqueue session, and what the agent advertised,
    kept from the moment ``session/new`` (or a resume or load) answers."""

    session_id: str
    profile: str
    agent_session_id: str
    can_resume: bool
    can_load: bool
    can_close: bool
    resumed: ConversationStart
    resume_error: str | None  # why a resume or load failed (then ``resumed`` is NEW)
    updated_at: datetime


@value
class AgentProfile:
    """A profile as clients see it (A1): never its command or environment."""

    name: str
    type: AgentType
    auth: AgentAuth | None = None  # acp profiles only (A11)
    steering: bool = False  # Q16: a STEER send may be taken by the running turn


# -- tasks, sessions and turns: what a revision shows (R1), cancellation, owner requests (M4)


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


# -- a session's queue (Q): entries, policy, status, holds, what a send did (Q15, Q16)


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


# -- a turn's output: its items (A3), its durable log (O1), what readers are sent (O2, M4)


@value
class OutputChunk:
    session_id: str
    turn_id: str
    offset: int
    text: str
    done: bool
    status: TurnStatus


@value
class OutputMark:
    """A turn's output log committed up to ``end`` characters (O1), as another instance
    announces it (M4): no text, so a notification never carries what can exceed its limit; its
    readers read the log. ``done``: the turn has ended (with ``status``)."""

    session_id: str
    turn_id: str
    end: int
    done: bool
    status: TurnStatus


class ItemKind(StrEnum):
    MESSAGE = "MESSAGE"  # data {"text": str}; also appended to Turn.output
    THOUGHT = "THOUGHT"  # data {"text": str}
    TOOL_CALL = "TOOL_CALL"  # data {"toolCallId","title","kind","status","content","locations"}; later updates carry the same key  # noqa: E501
    PLAN = "PLAN"  # data {"entries": [{"content","priority","status"}]}
    RAW = "RAW"  # any other session/update, kept as JSON
    STEER = "STEER"  # data {"text": str, "entryId": str}: a message steered into the turn (Q16)


@value
class TurnItem:
    """One structured piece of a turn's output (A3); a plain text chunk is a MESSAGE item."""

    kind: ItemKind
    data: Mapping[str, Any]
    key: str | None = None  # upsert key (a tool call's id): later items with the same key update it


@value
class OutputRecord:
    """One entry of a turn's durable output log (O1).

    ``seq`` numbers the turn's records from 0; ``offset`` is the number of output characters
    (MESSAGE text) before this record, so a MESSAGE record covers ``offset .. offset+len(text)``."""

    turn_id: str
    seq: int
    offset: int
    kind: ItemKind
    text: str = ""
    data: Mapping[str, Any] | None = None
    key: str | None = None


@value
class LogBatch:
    """Records of a turn's log that just committed (O1), as the bus carries them: ``end`` is the
    log's length after them. A batch relayed from another instance carries no records (only
    ``end``): its readers read the log."""

    session_id: str
    turn_id: str
    end: int
    records: tuple[OutputRecord, ...] = ()


@value
class ItemsChunk:
    """What ``turnItems`` sends (A3, O2): the changes log entries ``offset .. next_offset-1``
    made to the turn's items, each as ``(index, item)`` (see :mod:`turnqueue.engine.reads`)."""

    session_id: str
    turn_id: str
    offset: int
    next_offset: int
    changes: tuple[tuple[int, TurnItem], ...]
    done: bool
    status: TurnStatus


# -- an agent's permission requests of a turn and their answers (A6)


class ApprovalOutcome(StrEnum):
    PENDING = "PENDING"
    SELECTED = "SELECTED"
    CANCELLED = "CANCELLED"


@value
class ApprovalOption:
    id: str
    name: str
    kind: str


@value
class Approval:
    """An agent's permission request of a turn and its answer (A6)."""

    id: str
    session_id: str
    turn_id: str
    title: str
    tool_call_id: str | None
    options: tuple[ApprovalOption, ...]
    requested_at: datetime
    outcome: ApprovalOutcome = ApprovalOutcome.PENDING
    option_id: str | None = None
    answered_by: str | None = None  # a principal, or "policy:allow" / "policy:reject"
    answered_at: datetime | None = None


# -- a task's workflow (W): its steps, and what a step does when a turn completes


class OnTurnComplete(StrEnum):
    NONE = "NONE"
    MOVE_TO_NEXT = "MOVE_TO_NEXT"


@value
class WorkflowStep:
    name: str
    on_turn_complete: OnTurnComplete = OnTurnComplete.NONE
    cancel_triggers_turn_complete: bool = False
    new_session_on_enter: bool = False


@value
class Workflow:
    steps: tuple[WorkflowStep, ...] = (
        WorkflowStep("IN_PROGRESS"),
        WorkflowStep("REVIEW"),
        WorkflowStep("DONE"),
    )

    @property
    def first(self) -> WorkflowStep:
        return self.steps[0]

    def step(self, name: str) -> WorkflowStep | None:
        return next((s for s in self.steps if s.name == name), None)

    def next_after(self, name: str) -> WorkflowStep | None:
        return next((b for a, b in pairwise(self.steps) if a.name == name), None)

    @property
    def moves_on_complete(self) -> bool:
        """Whether any step moves its task on when a turn completes (W1)."""
        return any(s.on_turn_complete is OnTurnComplete.MOVE_TO_NEXT for s in self.steps)

    def is_last(self, name: str) -> bool:
        return bool(self.steps) and self.steps[-1].name == name
