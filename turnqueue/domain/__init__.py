"""Frozen value objects and enums shared by every layer; nothing here does I/O. The store builds
them from rows, the GraphQL schema converts them with ``from_domain``.

This is the domain's face: every layer imports ``from turnqueue.domain import X``. The modules
group the types by aggregate: ``sessions`` (tasks, sessions, turns, clarifications,
cancellation, owner requests), ``queue``, ``output``, ``agents``, ``approvals``, ``workflow``, and
``values`` (what they all share: the value decorator, ids, time, the page bound). They import one
another directly, never this face.
"""

from turnqueue.domain.agents import (
    AgentAuth,
    AgentConversation,
    AgentErrorKind,
    AgentProfile,
    AgentType,
    AuthMethod,
    AuthState,
    ConversationStart,
)
from turnqueue.domain.approvals import Approval, ApprovalOption, ApprovalOutcome
from turnqueue.domain.output import (
    ItemKind,
    ItemsChunk,
    LogBatch,
    OutputChunk,
    OutputMark,
    OutputRecord,
    TurnItem,
)
from turnqueue.domain.queue import (
    Delivery,
    HoldReason,
    PauseReason,
    QueueEntry,
    QueuePolicy,
    QueueStatus,
    SendNowScope,
    SendOutcome,
    SentMessage,
    SteerRequest,
)
from turnqueue.domain.sessions import (
    BUSY,
    PROMPTABLE,
    CancelKind,
    CancellationStatus,
    CancelOutcome,
    Clarification,
    MessageSource,
    OwnerRequest,
    RequestState,
    Session,
    SessionParts,
    SessionState,
    Task,
    Turn,
    TurnAt,
    TurnStatus,
)
from turnqueue.domain.values import MAX_PAGE, clamp_page, is_valid_id, new_id, utcnow
from turnqueue.domain.workflow import OnTurnComplete, Workflow, WorkflowStep

__all__ = [
    "BUSY",
    "MAX_PAGE",
    "PROMPTABLE",
    "AgentAuth",
    "AgentConversation",
    "AgentErrorKind",
    "AgentProfile",
    "AgentType",
    "Approval",
    "ApprovalOption",
    "ApprovalOutcome",
    "AuthMethod",
    "AuthState",
    "CancelKind",
    "CancelOutcome",
    "CancellationStatus",
    "Clarification",
    "ConversationStart",
    "Delivery",
    "HoldReason",
    "ItemKind",
    "ItemsChunk",
    "LogBatch",
    "MessageSource",
    "OnTurnComplete",
    "OutputChunk",
    "OutputMark",
    "OutputRecord",
    "OwnerRequest",
    "PauseReason",
    "QueueEntry",
    "QueuePolicy",
    "QueueStatus",
    "RequestState",
    "SendNowScope",
    "SendOutcome",
    "SentMessage",
    "Session",
    "SessionParts",
    "SessionState",
    "SteerRequest",
    "Task",
    "Turn",
    "TurnAt",
    "TurnItem",
    "TurnStatus",
    "Workflow",
    "WorkflowStep",
    "clamp_page",
    "is_valid_id",
    "new_id",
    "utcnow",
]
