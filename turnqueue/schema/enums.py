"""The domain enums and ``ErrorCode`` registered as GraphQL enums under the contract's names.

Registration marks the domain classes themselves, so schema types annotate with the domain enums
and resolvers pass domain values through unchanged; importing any module of ``turnqueue.schema``
runs it first (the package imports this module). The domain stays free of GraphQL, so the
descriptions (G1) live here: each enum's own and one per value, set on the registered
definition's values (Strawberry's ``enum_value(description=…)`` would have to sit in the domain
class). A value without a description fails at import.
"""

from __future__ import annotations

from enum import Enum

import strawberry

from turnqueue import domain, errors
from turnqueue.graphql_internals import StrawberryEnumDefinition

DESCRIPTIONS: dict[type[Enum], tuple[str, dict[str, str]]] = {
    domain.SessionState: (
        "Where a session is in its life. Promptable: WAITING_FOR_INPUT and COMPLETED.",
        {
            "CREATED": "Just created; its agent is not being prepared yet.",
            "STARTING": "Its agent is getting ready.",
            "RUNNING": "A turn is running (busy): a message sent now is queued.",
            "WAITING_FOR_INPUT": "Ready for a prompt. Every turn end (completed, failed, "
            "cancelled, or a clarification asked) comes back here.",
            "COMPLETED": "Its task reached the workflow's last step, or a transfer replaced it "
            "(W3). Still promptable: a prompt reopens it.",
            "FAILED": "Its agent could not be started. Not promptable.",
            "CANCELLED": "The session was closed. Not promptable.",
        },
    ),
    domain.TurnStatus: (
        "How far a turn got.",
        {
            "RUNNING": "The agent is answering.",
            "COMPLETED": "The agent finished (also when it asked a clarification).",
            "CANCELLED": "Stopped by a cancel or a Send Now replacement; also any end while a "
            "cancellation was pending (C8).",
            "FAILED": "The agent failed, or the turn was interrupted because its server died "
            "(M6); `error` says why.",
        },
    ),
    domain.MessageSource: (
        "Where a prompt or a queued message came from.",
        {
            "USER": "A client: everything a client sends or enqueues.",
            "AGENT": "The agent itself.",
            "WORKFLOW": "A workflow action.",
            "SERVER": "The server's own automation.",
        },
    ),
    domain.PauseReason: (
        "Why a queue's auto-run is off (Q14).",
        {
            "USER": "setAutoRun(autoRun: false).",
            "CANCEL": "A user's cancel with entries still queued parked the backlog (Q7).",
            "TRANSFER": "A workflow transfer from a session whose queue was paused (W3).",
        },
    ),
    domain.HoldReason: (
        "What keeps a queue from delivering even with auto-run on (Q9).",
        {
            "BUSY": "A turn is running.",
            "NOT_PROMPTABLE": "The session's state takes no prompts.",
            "CLARIFICATION": "The agent's question is not answered yet.",
            "CANCELLING": "A cancellation is in progress.",
            "WORKFLOW_TRANSITION": "The task is moving to another workflow step.",
            "APPROVAL": "The agent waits for an answer to its permission request (A6).",
        },
    ),
    domain.SendNowScope: (
        "What sendNow runs in place of the active turn (Q5).",
        {
            "ENTRY": "The one entry named by `entryId`.",
            "ALL": "Every entry, combined in FIFO order into one prompt joined by blank lines "
            "(for compatibility; takes no `entryId`).",
        },
    ),
    domain.CancelOutcome: (
        "How a cancel ended.",
        {
            "STOPPED": "The turn stopped when asked (SIGINT for the command agent).",
            "ESCALATED": "The turn stopped only after SIGTERM or SIGKILL.",
            "TIMED_OUT": "The turn would not stop within the time bounds and its agent was "
            "abandoned (the turn still ends CANCELLED), or the instance running it did not "
            "answer.",
            "NOTHING_RUNNING": "No turn was running: nothing changed, except that a pending "
            "clarification was withdrawn (C9).",
        },
    ),
    domain.AgentType: (
        "What runs an agent profile's turns (A1).",
        {
            "ACP": "A real coding agent over the Agent Client Protocol: one process per "
            "session, structured turn items, approvals (A2-A6).",
            "COMMAND": "A command run once per turn; each printed line is output.",
            "SCRIPTED": "The deterministic demo agent.",
        },
    ),
    domain.AgentErrorKind: (
        "How a turn's failure is classified (A11), from the agent's error answer (its code and "
        "message) or its process's end, or a stall (A9).",
        {
            "AUTHENTICATION": "The agent has no credentials, or wrong ones: configure the "
            "profile (see `agents { auth }`).",
            "RATE_LIMIT": "The model provider's rate limit or quota was reached.",
            "PROVIDER_UNREACHABLE": "The agent could not reach its model provider (network, "
            "DNS, the provider down).",
            "INTERNAL": "Any other error the agent answered.",
            "AGENT_EXITED": "The agent's process died or closed its connection; the next turn "
            "starts a fresh one.",
            "STALLED": "A9: the agent showed no activity (an update, a permission request, "
            "output) within its profile's `start_timeout` of the prompt or `stall_timeout` "
            "since the last; turnqueue killed it and the next turn starts a fresh one.",
        },
    ),
    domain.AuthState: (
        "What an `acp` profile's agent last said about authentication (A11), on this instance.",
        {
            "UNKNOWN": "Its agent has not been started yet.",
            "NOT_ASKED": "It started without an `authenticate` call (the profile provides no "
            "method's variables, or the agent needs none); it may still refuse a prompt.",
            "AUTHENTICATED": "`authenticate` with `method` succeeded.",
            "REFUSED": "It refused for want of authentication: `message` is its own words, "
            "`methods` what it offers.",
        },
    ),
    domain.ConversationStart: (
        "How a session's agent conversation was opened the last time its agent started (A8).",
        {
            "NEW": "`session/new`: the agent started a new session (the first start; or the "
            "agent offers neither resume nor load; or they failed: `resumeError`).",
            "RESUMED": "`session/resume`: the agent continued its own session.",
            "LOADED": "`session/load`: the agent reloaded its session; the history it replayed "
            "is in no turn.",
        },
    ),
    domain.ItemKind: (
        "The kind of a turn item (A3).",
        {
            "MESSAGE": "Text the agent wrote to the user (also in `Turn.output`).",
            "THOUGHT": "The agent's reasoning.",
            "TOOL_CALL": "A tool call and its progress (updated in place).",
            "PLAN": "The agent's plan (replaced by each new plan).",
            "RAW": "An agent update turnqueue does not interpret, kept as JSON.",
            "STEER": "A message the user steered into the running turn (Q16).",
        },
    ),
    domain.Delivery: (
        "How sendMessage delivers its message (Q16).",
        {
            "AUTO": "Start a turn when the session is free and nothing holds it; else queue it.",
            "STEER": "Offer it to the running turn (where the session's agent takes messages "
            "while it works: the scripted agent, ACP agents with the `_session/steering` "
            "extension); when the agent does not take it, or the turn ends first, it is queued "
            "at the tail as enqueueMessage would queue it. With no turn running, as AUTO.",
        },
    ),
    domain.SendOutcome: (
        "What a send did (Q16).",
        {
            "STARTED": "It started a turn (at once, or from the queue before it could be "
            "steered: `turn`).",
            "QUEUED": "It waits in the queue (`queuedEntry`).",
            "STEERED": "The running turn took it (`turn`; a STEER item of that turn).",
        },
    ),
    domain.ApprovalOutcome: (
        "Whether and how an approval was answered (A6).",
        {
            "PENDING": "Waiting for answerApproval; the queue is held (APPROVAL).",
            "SELECTED": "Answered with one of its options.",
            "CANCELLED": "Answered `cancelled`: the turn was cancelled or ended first, or the "
            "profile's policy found no matching option.",
        },
    ),
    errors.ErrorCode: (
        "Why a mutation refused (`UserError.code`). A refused mutation changed nothing.",
        {
            "NOT_FOUND": "No such session or task for the caller; one of another principal "
            "answers the same (S2).",
            "INVALID_INPUT": "An input is malformed or out of range: an id that is not a UUID, "
            "blank or oversized content, a title outside 1-500 characters, an unknown agent "
            "or workflow step, `entryId` used wrongly for the scope. `field` names it.",
            "SESSION_BUSY": "The session cannot do this now: a turn is running (drain), it "
            "cannot take a clarification's answer yet, or the instance running its turn did "
            "not answer.",
            "SESSION_NOT_PROMPTABLE": "The session's state takes no prompts (CREATED, "
            "STARTING, FAILED or CANCELLED).",
            "CLARIFICATION_PENDING": "The agent asked a question: answer it with "
            "answerClarification (or cancel to withdraw it) first.",
            "NO_CLARIFICATION": "No clarification is pending, or not the one `clarificationId` "
            "names.",
            "QUEUE_FULL": "The queue already holds its maximum of entries (Q11); the message "
            "gives the size and the limit.",
            "QUEUE_EMPTY": "sendNow with scope ALL found no entries.",
            "QUEUE_CHANGED": "The queue is not as the request assumed: `expectedRevision` is "
            "not its current revision, `orderedIds` are not exactly its entries, or it changed "
            "under a sendNow (its entries were taken, or moved to the task's new session by a "
            "workflow step change). Read it again and retry.",
            "ENTRY_NOT_FOUND": "No such visible entry in this session's queue (it ran, was "
            "removed, or is being delivered).",
            "NOT_EDITABLE": "Only USER entries can be edited (Q12).",
            "SEND_NOW_CONFLICT": "A cancel and a Send Now met on the same turn: cancel while a "
            "Send Now replaces it, or sendNow while a cancel runs (C3).",
            "TURN_CHANGED": "sendNow: the active turn changed since the request was read; "
            "nothing was claimed.",
            "APPROVAL_RESOLVED": "answerApproval: the approval was already answered (another "
            "answer won), or its turn was cancelled or has ended.",
            "IDEMPOTENCY_CONFLICT": "sendMessage, enqueueMessage: this `clientMessageId` was "
            "already sent in this session with other content (Q15); nothing changed.",
        },
    ),
}

for _enum, (_description, _values) in DESCRIPTIONS.items():
    strawberry.enum(_enum, name=_enum.__name__, description=_description)
    _definition: StrawberryEnumDefinition = _enum.__strawberry_definition__  # type: ignore[attr-defined]
    for _value in _definition.values:
        _value.description = _values[_value.name]  # KeyError: an undocumented value
