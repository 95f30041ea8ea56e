"""Mutation payloads (SPEC §7): the changed entities and ``userErrors`` (entities null on error)."""

from __future__ import annotations

import strawberry

from turnqueue.schema.enums import CancelOutcome, SendOutcome
from turnqueue.schema.items import Approval
from turnqueue.schema.types import (
    CancellationStatus,
    QueueEntry,
    QueueStatus,
    Session,
    Task,
    Turn,
    UserError,
)


# Each helper builds a fresh field (Strawberry types ``strawberry.field`` as ``Any``).
def _user_errors() -> list[UserError]:
    made: list[UserError] = strawberry.field(
        default_factory=list,
        description="Empty when the mutation succeeded; otherwise why it refused (and then it "
        "changed nothing and the other fields are null).",
    )
    return made


def _queue() -> QueueStatus | None:
    made: QueueStatus | None = strawberry.field(
        default=None,
        description="The session's queue after the mutation (a new `revision` if it changed).",
    )
    return made


def _turn(what: str) -> Turn | None:
    made: Turn | None = strawberry.field(default=None, description=what)
    return made


@strawberry.type(description="The answer of createTask.")
class CreateTaskPayload:
    task: Task | None = strawberry.field(default=None, description="The new task.")
    session: Session | None = strawberry.field(
        default=None, description="Its first session, ready for a prompt (WAITING_FOR_INPUT)."
    )
    user_errors: list[UserError] = _user_errors()


@strawberry.type(description="The answer of sendMessage: either `turn` or `queuedEntry` is set.")
class SendMessagePayload:
    session: Session | None = strawberry.field(
        default=None, description="The session after the message."
    )
    turn: Turn | None = _turn(
        "The turn the message started, or (STEERED) the running turn it was steered into; null "
        "when it was queued."
    )
    queued_entry: QueueEntry | None = strawberry.field(
        default=None,
        description="The entry the message became when the session was busy or "
        "held; null when it started a turn or was steered.",
    )
    outcome: SendOutcome | None = strawberry.field(
        default=None,
        description="What the send did (Q16): STARTED, QUEUED or STEERED; null with userErrors.",
    )
    queue: QueueStatus | None = _queue()
    user_errors: list[UserError] = _user_errors()


@strawberry.type(description="The answer of enqueueMessage.")
class EnqueueMessagePayload:
    queue: QueueStatus | None = _queue()
    entry: QueueEntry | None = strawberry.field(
        default=None,
        description="The new entry (if it started at once, it is no longer in `queue`).",
    )
    dispatched: bool = strawberry.field(
        default=False, description="Whether the automatic drain after it started a turn."
    )
    turn: Turn | None = _turn("The turn the drain started; null when nothing started.")
    user_errors: list[UserError] = _user_errors()


@strawberry.type(
    description="The answer of updateQueueEntry, removeQueueEntry, clearQueue and reorderQueue."
)
class QueuePayload:
    queue: QueueStatus | None = _queue()
    user_errors: list[UserError] = _user_errors()


@strawberry.type(description="The answer of cancel, sent once the cancellation has finished.")
class CancelPayload:
    session: Session | None = strawberry.field(
        default=None, description="The session after the cancellation."
    )
    cancellation: CancellationStatus | None = strawberry.field(
        default=None, description="The cancellation state after it (normally not pending)."
    )
    outcome: CancelOutcome | None = strawberry.field(
        default=None, description="How the cancellation ended."
    )
    user_errors: list[UserError] = _user_errors()


@strawberry.type(description="The answer of setAutoRun.")
class SetAutoRunPayload:
    queue: QueueStatus | None = _queue()
    dispatched: bool = strawberry.field(
        default=False, description="Whether turning it on started the head entry now (Q2)."
    )
    turn: Turn | None = _turn("The turn that started; null when nothing did.")
    user_errors: list[UserError] = _user_errors()


@strawberry.type(description="The answer of sendNow.")
class SendNowPayload:
    queue: QueueStatus | None = _queue()
    turn: Turn | None = _turn("The turn that now runs the entry (or entries).")
    sent_count: int = strawberry.field(
        default=0, description="How many entries the turn's prompt holds (1 for scope ENTRY)."
    )
    user_errors: list[UserError] = _user_errors()


@strawberry.type(description="The answer of drain.")
class DrainPayload:
    queue: QueueStatus | None = _queue()
    turn: Turn | None = _turn("The turn that started; null when nothing did.")
    drained: bool = strawberry.field(
        default=False,
        description="Whether a head entry started; false with an empty queue (auto-run is on "
        "anyway).",
    )
    user_errors: list[UserError] = _user_errors()


@strawberry.type(description="The answer of answerClarification.")
class SessionPayload:
    session: Session | None = strawberry.field(
        default=None, description="The session once the answer started as its turn."
    )
    user_errors: list[UserError] = _user_errors()


@strawberry.type(description="The answer of answerApproval (A6).")
class AnswerApprovalPayload:
    approval: Approval | None = strawberry.field(
        default=None, description="The approval as answered (outcome SELECTED)."
    )
    session: Session | None = strawberry.field(
        default=None, description="The session after the answer (its turn runs on)."
    )
    user_errors: list[UserError] = _user_errors()


@strawberry.type(description="The answer of moveTask.")
class MoveTaskPayload:
    task: Task | None = strawberry.field(default=None, description="The task in its new step.")
    session: Session | None = strawberry.field(
        default=None,
        description="The task's current session after the move (a new one when the step "
        "creates one, W3).",
    )
    user_errors: list[UserError] = _user_errors()
