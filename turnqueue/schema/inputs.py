"""Mutation inputs (SPEC §7). Ids arrive as plain strings; the engine checks their shape."""

from __future__ import annotations

import strawberry

from turnqueue.domain import Delivery, SendNowScope
from turnqueue.schema.fields import null, plain
from turnqueue.schema.scalars import Revision

CLIENT_MESSAGE_ID = (
    "Q15: a key the client makes for this message (1 to 128 characters), so that a retry is "
    "safe: a second request of the same session with the same key answers the first one's "
    "outcome (the same turn or entry, never a second one), on any instance, after a restart, "
    "and when the two race; the same key with other content is IDEMPOTENCY_CONFLICT and "
    "changes nothing. Keys are kept at least 24 hours. The entry and the turn it becomes carry "
    "it (`clientMessageId`), so a client can match its optimistic row to the server's."
)


# A fresh field each time (Strawberry types ``strawberry.field`` as ``Any``).
def _content(what: str) -> str:
    made: str = plain(
        f"{what}: not blank, no NUL character, at most `TURNQUEUE_MAX_CONTENT_BYTES` "
        "bytes of UTF-8 (default 100000)."
    )
    return made


@strawberry.input
class _SessionInput:
    """The input of a mutation of one session (a base class, not a type of the schema)."""

    session_id: strawberry.ID = plain("The session (one of the caller's; any other is NOT_FOUND).")


@strawberry.input
class _QueueInput(_SessionInput):
    """The input of a mutation that changes a session's queue (Q13)."""

    expected_revision: Revision | None = null(
        "The queue revision (`QueueStatus.revision`) the request assumes: when given and not "
        "current, nothing changes and the answer is QUEUE_CHANGED (Q13)."
    )


@strawberry.input(description="Input of createTask.")
class CreateTaskInput:
    title: str = plain("The task's title: 1 to 500 characters.")
    agent: str | None = null(
        "The agent profile of its first session; null for the server's default "
        "(`TURNQUEUE_AGENT`). An unknown profile is INVALID_INPUT."
    )


@strawberry.input(description="Input of sendMessage.")
class SendMessageInput(_SessionInput):
    content: str = _content("The prompt")
    client_message_id: str | None = null(CLIENT_MESSAGE_ID)
    delivery: Delivery = strawberry.field(
        default=Delivery.AUTO,
        description="How to deliver it (Q16): AUTO (start or queue) or STEER (offer it to "
        "the running turn first). The answer's `outcome` says what happened.",
    )


@strawberry.input(description="Input of enqueueMessage.")
class EnqueueMessageInput(_QueueInput):
    content: str = _content("The message")
    client_message_id: str | None = null(CLIENT_MESSAGE_ID)


@strawberry.input(description="Input of updateQueueEntry.")
class UpdateQueueEntryInput(_QueueInput):
    entry_id: strawberry.ID = plain("The entry to edit (a USER entry).")
    content: str = _content("Its new content")


@strawberry.input(description="Input of removeQueueEntry.")
class RemoveQueueEntryInput(_QueueInput):
    entry_id: strawberry.ID = plain("The entry to remove.")


@strawberry.input(description="Input of clearQueue.")
class ClearQueueInput(_QueueInput):
    pass


@strawberry.input(description="Input of reorderQueue.")
class ReorderQueueInput(_QueueInput):
    ordered_ids: list[strawberry.ID] = plain(
        "Every visible entry's id, each once, in the new order (head first); anything else is "
        "QUEUE_CHANGED."
    )


@strawberry.input(description="Input of cancel.")
class CancelInput(_SessionInput):
    pass


@strawberry.input(description="Input of setAutoRun.")
class SetAutoRunInput(_QueueInput):
    auto_run: bool = plain(
        "true: run on by itself (and start the head now if nothing holds it); false: hold the "
        "queue after the current turn (pause reason USER)."
    )


@strawberry.input(description="Input of sendNow.")
class SendNowInput(_QueueInput):
    scope: SendNowScope = strawberry.field(
        default=SendNowScope.ENTRY, description="One entry (default) or all of them combined."
    )
    entry_id: strawberry.ID | None = null(
        "The entry to run: required with scope ENTRY, absent with ALL (else INVALID_INPUT)."
    )


@strawberry.input(description="Input of drain.")
class DrainInput(_QueueInput):
    pass


@strawberry.input(description="Input of answerClarification.")
class AnswerClarificationInput(_SessionInput):
    answer: str = _content("The answer, sent to the agent as the next turn")
    clarification_id: strawberry.ID | None = null(
        "The clarification being answered; when given and not the pending one, "
        "NO_CLARIFICATION (so a stale answer is not sent to a newer question)."
    )


@strawberry.input(description="Input of answerApproval (A6).")
class AnswerApprovalInput:
    approval_id: strawberry.ID = plain("The pending approval (`Session.pendingApproval.id`).")
    option_id: strawberry.ID = plain("One of its options' `id`; any other is INVALID_INPUT.")


@strawberry.input(description="Input of moveTask.")
class MoveTaskInput:
    task_id: strawberry.ID = plain("The task (one of the caller's).")
    step: str = plain("The workflow step to enter, by name; an unknown one is INVALID_INPUT.")
