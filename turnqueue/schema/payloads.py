"""Mutation payloads (SPEC §7): the changed entities and ``userErrors`` (entities null on error)."""

from __future__ import annotations

import strawberry

from turnqueue.domain import CancelOutcome, SendOutcome
from turnqueue.errors import ErrorCode, UserFacingError
from turnqueue.schema.fields import Copied, null, plain
from turnqueue.schema.items import Approval
from turnqueue.schema.queue import CancellationStatus, QueueEntry, QueueStatus
from turnqueue.schema.sessions import Session, Task
from turnqueue.schema.turns import Turn


@strawberry.type(
    description="An expected refusal of a mutation: the mutation changed nothing and the "
    "entities of its payload are null."
)
class UserError(Copied[UserFacingError]):
    code: ErrorCode = plain("What was refused, for programs to act on.")
    message: str = plain("What was refused, in a sentence for people (its wording may change).")
    field: list[str] | None = strawberry.field(
        default=None,
        description='The path of the input field at fault, e.g. `["entryId"]`; null when no '
        "single field is.",
    )


@strawberry.type
class _Payload:
    """What every payload has (a base class, not a type of the schema)."""

    user_errors: list[UserError] = strawberry.field(
        default_factory=list,
        description="Empty when the mutation succeeded; otherwise why it refused (and then it "
        "changed nothing and the other fields are null).",
    )


#: ``queue`` of the payloads that have one.
QUEUE_AFTER = "The session's queue after the mutation (a new `revision` if it changed)."
#: ``turn`` of the payloads whose mutation may start one.
TURN_STARTED = "The turn that started; null when nothing did."


@strawberry.type(description="The answer of createTask.")
class CreateTaskPayload(_Payload):
    task: Task | None = null("The new task.")
    session: Session | None = null("Its first session, ready for a prompt (WAITING_FOR_INPUT).")


@strawberry.type(description="The answer of sendMessage: either `turn` or `queuedEntry` is set.")
class SendMessagePayload(_Payload):
    session: Session | None = null("The session after the message.")
    turn: Turn | None = null(
        "The turn the message started, or (STEERED) the running turn it was steered into; null "
        "when it was queued."
    )
    queued_entry: QueueEntry | None = null(
        "The entry the message became when the session was busy or "
        "held; null when it started a turn or was steered."
    )
    outcome: SendOutcome | None = null(
        "What the send did (Q16): STARTED, QUEUED or STEERED; null with userErrors."
    )
    queue: QueueStatus | None = null(QUEUE_AFTER)


@strawberry.type(description="The answer of enqueueMessage.")
class EnqueueMessagePayload(_Payload):
    queue: QueueStatus | None = null(QUEUE_AFTER)
    entry: QueueEntry | None = null(
        "The new entry (if it started at once, it is no longer in `queue`)."
    )
    dispatched: bool = strawberry.field(
        default=False, description="Whether the automatic drain after it started a turn."
    )
    turn: Turn | None = null("The turn the drain started; null when nothing started.")


@strawberry.type(
    description="The answer of updateQueueEntry, removeQueueEntry, clearQueue and reorderQueue."
)
class QueuePayload(_Payload):
    queue: QueueStatus | None = null(QUEUE_AFTER)


@strawberry.type(description="The answer of cancel, sent once the cancellation has finished.")
class CancelPayload(_Payload):
    session: Session | None = null("The session after the cancellation.")
    cancellation: CancellationStatus | None = null(
        "The cancellation state after it (normally not pending)."
    )
    outcome: CancelOutcome | None = null("How the cancellation ended.")


@strawberry.type(description="The answer of setAutoRun.")
class SetAutoRunPayload(_Payload):
    queue: QueueStatus | None = null(QUEUE_AFTER)
    dispatched: bool = strawberry.field(
        default=False, description="Whether turning it on started the head entry now (Q2)."
    )
    turn: Turn | None = null(TURN_STARTED)


@strawberry.type(description="The answer of sendNow.")
class SendNowPayload(_Payload):
    queue: QueueStatus | None = null(QUEUE_AFTER)
    turn: Turn | None = null("The turn that now runs the entry (or entries).")
    sent_count: int = strawberry.field(
        default=0, description="How many entries the turn's prompt holds (1 for scope ENTRY)."
    )


@strawberry.type(description="The answer of drain.")
class DrainPayload(_Payload):
    queue: QueueStatus | None = null(QUEUE_AFTER)
    turn: Turn | None = null(TURN_STARTED)
    drained: bool = strawberry.field(
        default=False,
        description="Whether a head entry started; false with an empty queue (auto-run is on "
        "anyway).",
    )


@strawberry.type(description="The answer of answerClarification.")
class SessionPayload(_Payload):
    session: Session | None = null("The session once the answer started as its turn.")


@strawberry.type(description="The answer of answerApproval (A6).")
class AnswerApprovalPayload(_Payload):
    approval: Approval | None = null("The approval as answered (outcome SELECTED).")
    session: Session | None = null("The session after the answer (its turn runs on).")


@strawberry.type(description="The answer of moveTask.")
class MoveTaskPayload(_Payload):
    task: Task | None = null("The task in its new step.")
    session: Session | None = null(
        "The task's current session after the move (a new one when the step creates one, W3)."
    )
