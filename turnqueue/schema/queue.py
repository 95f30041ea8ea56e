"""Object types of a session's queue, cancellation and clarification (SPEC §7, Q13, C2)."""

from __future__ import annotations

from datetime import datetime

import strawberry

from turnqueue import domain
from turnqueue.domain import HoldReason, MessageSource, PauseReason
from turnqueue.schema.fields import Copied, copied, plain
from turnqueue.schema.scalars import Revision


@strawberry.type(
    description="A question the agent asked. The turn that asked it ended COMPLETED with the "
    "question as its output; answer it with answerClarification."
)
class Clarification(Copied[domain.Clarification]):
    id: strawberry.ID = plain(
        "The clarification's id: pass it as `clarificationId` to answer exactly this question."
    )
    question: str = plain("The agent's question.")
    asked_at: datetime = plain("When the agent asked it.")


@strawberry.type(
    description="Whether a cancellation of the session's turn is in progress (C1), with its "
    "revision (C2): what cancellationChanged sends and cancel answers. Runtime state, never "
    "stored; every instance shows the same (C7)."
)
class CancellationStatus:
    id: strawberry.ID = plain(
        "`cancellation:<sessionId>`: one stable id per session, so normalised caches (Apollo, "
        "urql) merge every update into one object."
    )
    session_id: strawberry.ID = plain("The session it belongs to.")
    pending: bool = plain(
        "True from the moment a cancellation (a cancel, or the stop of a Send Now replacement) is "
        "accepted until the last one in progress ends; false otherwise (C1)."
    )
    revision: Revision = plain(
        "The cancellation revision: it grows on each change of `pending`, and only then (C2), and "
        "never goes back, not across restarts or instances (R2). Keep the highest you have seen "
        "and ignore lower ones. 0 (with `pending` false) while the server knows of no cancellation "
        "of the session, e.g. before the first: it never outranks a real transition."
    )

    @classmethod
    def from_domain(cls, status: domain.CancellationStatus) -> CancellationStatus:
        return copied(cls, status, id=strawberry.ID(f"cancellation:{status.session_id}"))


@strawberry.type(description="A message waiting in a session's queue.")
class QueueEntry(Copied[domain.QueueEntry]):
    id: strawberry.ID = plain(
        "The entry's id (a UUID). It keeps it when a failed delivery returns it to the head of the "
        "queue (Q10)."
    )
    session_id: strawberry.ID = plain("The session whose queue holds it.")
    position: int = plain(
        "Its place among the visible entries: 1 is the head, which runs next (FIFO). It changes as "
        "entries ahead of it run, are removed or reordered."
    )
    content: str = plain("The message; USER entries can be edited with updateQueueEntry.")
    source: MessageSource = plain("Who queued it; only USER entries can be edited (Q12).")
    queued_at: datetime = plain("When it was queued.")
    client_message_id: str | None = plain(
        "Q15: the `clientMessageId` of the send that queued it; null without one."
    )


@strawberry.type(
    description="A session's queue: its entries, its auto-run policy (Q1, Q14), what holds it "
    "(Q9) and its revision (Q13), as queueStatusChanged sends it. Any change to any of these "
    "fields is a new `revision`."
)
class QueueStatus:
    id: strawberry.ID = plain(
        "`queue:<sessionId>`: one stable id per session, so normalised caches merge every update "
        "into one object."
    )
    session_id: strawberry.ID = plain("The session it belongs to.")
    auto_run: bool = plain(
        "Whether the queue runs on by itself: when a turn ends, the head entry starts (Q4). "
        "Durable; true until set otherwise. Turning it off never stops the active turn (Q2)."
    )
    pause_reason: PauseReason | None = plain("Why `autoRun` is false; null while it is true.")
    held_by: list[HoldReason] = plain(
        "What holds delivery right now even with `autoRun` on (Q9); empty when nothing does."
    )
    entries: list[QueueEntry] = plain(
        "The visible entries, head first. An entry reserved for a turn that is starting is hidden; "
        "if the start fails it comes back at the head (Q10)."
    )
    count: int = plain("How many entries are visible (`entries`).")
    max: int | None = plain(
        "The most entries the queue takes (`TURNQUEUE_QUEUE_MAX`); one more is QUEUE_FULL (Q11). "
        "Null when unlimited."
    )
    revision: Revision = plain(
        "The queue revision (Q13): durable, it grows with every change of this status and never "
        "goes back. Keep the highest per session; pass it as `expectedRevision` to a queue "
        "mutation to refuse (QUEUE_CHANGED) if the queue changed."
    )

    @classmethod
    def from_domain(cls, status: domain.QueueStatus) -> QueueStatus:
        return copied(
            cls,
            status,
            id=strawberry.ID(f"queue:{status.session_id}"),
            held_by=list(status.held_by),
            entries=[QueueEntry.from_domain(e) for e in status.entries],
        )
