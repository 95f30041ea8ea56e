"""Mutation roots (SPEC §7): one ``input``, a payload with the changed entities and ``userErrors``.

Each resolver only translates: input → engine call → payload. An expected failure
(``UserFacingError``) becomes ``userErrors`` with null entities (:func:`mutation`); anything else
propagates and is masked by the schema (S3).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Annotated, Any, TypeVar, cast, get_type_hints

import strawberry

from turnqueue import domain
from turnqueue.engine import Engine
from turnqueue.errors import UserFacingError
from turnqueue.resolvers.context import Context
from turnqueue.schema import fields as described
from turnqueue.schema import inputs as i
from turnqueue.schema import payloads as p
from turnqueue.schema.items import Approval
from turnqueue.schema.queue import CancellationStatus, QueueEntry, QueueStatus
from turnqueue.schema.sessions import Session, Task
from turnqueue.schema.turns import Turn

Info = strawberry.Info[Context, None]

T = TypeVar("T")
#: Every mutation's one argument.
Input = Annotated[T, strawberry.argument(description="What to do (see the input type's fields).")]


F = TypeVar("F", bound=Callable[..., Any])


def mutation(description: str) -> Callable[[F], F]:
    """A mutation root field whose resolver's ``UserFacingError`` answers its payload type (the
    return annotation) with only ``userErrors``."""

    def decorate(resolver: F) -> F:
        payload = get_type_hints(resolver)["return"]

        @functools.wraps(resolver)
        async def answer(*args: Any, **kwargs: Any) -> Any:
            try:
                return await resolver(*args, **kwargs)
            except UserFacingError as e:
                return payload(user_errors=[p.UserError.from_domain(e)])

        # A mutation is a field of the Mutation type (``strawberry.mutation`` is ``field``).
        return described.field(description)(cast(F, answer))

    return decorate


def _caller(info: Info) -> tuple[Engine, str]:
    """The engine, and the principal calling it."""
    return info.context.engine, info.context.require_principal()


def _turn(turn: domain.Turn | None) -> Turn | None:
    return Turn.from_domain(turn) if turn is not None else None


@strawberry.type(
    description="Changes. Each takes one `input` and answers a payload with the changed entities "
    "and `userErrors`: expected refusals, each with an ErrorCode, after which nothing changed. "
    "Authentication failures and faults are top-level GraphQL errors."
)
class Mutation:
    @mutation(
        "Create a task and its first session, which is ready for a prompt. userErrors: "
        "INVALID_INPUT (title, agent)."
    )
    async def create_task(self, info: Info, input: Input[i.CreateTaskInput]) -> p.CreateTaskPayload:
        engine, principal = _caller(info)
        task, session = await engine.create_task(principal, input.title, input.agent)
        return p.CreateTaskPayload(
            task=Task.from_domain(task), session=Session.from_domain(session)
        )

    @mutation(
        "Send a prompt. It starts a turn at once when the session is promptable and "
        "nothing holds it (Q9), whatever is queued and whatever auto-run says; a busy or "
        "held session queues it instead (`queuedEntry`). With a `clientMessageId` a retry "
        "answers the first send's outcome (Q15). userErrors: INVALID_INPUT, NOT_FOUND, "
        "CLARIFICATION_PENDING, SESSION_NOT_PROMPTABLE, QUEUE_FULL, IDEMPOTENCY_CONFLICT."
    )
    async def send_message(
        self, info: Info, input: Input[i.SendMessageInput]
    ) -> p.SendMessagePayload:
        engine, principal = _caller(info)
        admission = await engine.send_message(
            principal,
            input.session_id,
            input.content,
            input.client_message_id,
            steer=input.delivery is domain.Delivery.STEER,
        )
        session, queue = admission.session, admission.queue
        assert session is not None and queue is not None  # Engine.send_message sets both
        return p.SendMessagePayload(
            session=Session.from_domain(session),
            turn=_turn(admission.turn),
            queued_entry=(
                QueueEntry.from_domain(admission.entry)
                if admission.entry is not None and admission.outcome is domain.SendOutcome.QUEUED
                else None
            ),
            outcome=admission.outcome,
            queue=QueueStatus.from_domain(queue),
        )

    @mutation(
        "Queue a message at the tail, always; then, if auto-run is on and nothing holds "
        "the queue, its head starts (an automatic drain, Q3). With a `clientMessageId` a "
        "retry answers the first one's outcome (Q15). userErrors: INVALID_INPUT, NOT_FOUND, "
        "QUEUE_CHANGED, QUEUE_FULL, IDEMPOTENCY_CONFLICT."
    )
    async def enqueue_message(
        self, info: Info, input: Input[i.EnqueueMessageInput]
    ) -> p.EnqueueMessagePayload:
        engine, principal = _caller(info)
        entry, turn, queue = await engine.enqueue(
            principal,
            input.session_id,
            input.content,
            input.expected_revision,
            input.client_message_id,
        )
        return p.EnqueueMessagePayload(
            queue=QueueStatus.from_domain(queue),
            entry=QueueEntry.from_domain(entry),
            dispatched=turn is not None,
            turn=_turn(turn),
        )

    @mutation(
        "Edit a queued USER entry's content (Q12). userErrors: INVALID_INPUT, NOT_FOUND, "
        "QUEUE_CHANGED, ENTRY_NOT_FOUND, NOT_EDITABLE."
    )
    async def update_queue_entry(
        self, info: Info, input: Input[i.UpdateQueueEntryInput]
    ) -> p.QueuePayload:
        engine, principal = _caller(info)
        queue = await engine.update_entry(
            principal, input.session_id, input.entry_id, input.content, input.expected_revision
        )
        return p.QueuePayload(queue=QueueStatus.from_domain(queue))

    @mutation(
        "Remove one queued entry (Q12). userErrors: INVALID_INPUT, NOT_FOUND, "
        "QUEUE_CHANGED, ENTRY_NOT_FOUND."
    )
    async def remove_queue_entry(
        self, info: Info, input: Input[i.RemoveQueueEntryInput]
    ) -> p.QueuePayload:
        engine, principal = _caller(info)
        queue = await engine.remove_entry(
            principal, input.session_id, input.entry_id, input.expected_revision
        )
        return p.QueuePayload(queue=QueueStatus.from_domain(queue))

    @mutation(
        "Remove every visible entry (Q12); entries already being delivered are not "
        "touched. userErrors: INVALID_INPUT, NOT_FOUND, QUEUE_CHANGED."
    )
    async def clear_queue(self, info: Info, input: Input[i.ClearQueueInput]) -> p.QueuePayload:
        engine, principal = _caller(info)
        queue = await engine.clear_queue(principal, input.session_id, input.expected_revision)
        return p.QueuePayload(queue=QueueStatus.from_domain(queue))

    @mutation(
        "Put the queue in a new order: `orderedIds` must be exactly the visible entries "
        "(Q12). userErrors: INVALID_INPUT, NOT_FOUND, QUEUE_CHANGED."
    )
    async def reorder_queue(self, info: Info, input: Input[i.ReorderQueueInput]) -> p.QueuePayload:
        engine, principal = _caller(info)
        queue = await engine.reorder_queue(
            principal,
            input.session_id,
            [str(x) for x in input.ordered_ids],
            input.expected_revision,
        )
        return p.QueuePayload(queue=QueueStatus.from_domain(queue))

    @mutation(
        "Stop the active turn and answer once it has stopped, with the outcome (C1-C9). "
        "Meanwhile every Session and cancellationChanged show `cancellationPending: "
        "true`. With entries still queued it also turns auto-run off (pause reason "
        "CANCEL, Q7); with nothing running it only withdraws a pending clarification "
        "(NOTHING_RUNNING). It runs to its end even if the client goes away (C4). "
        "userErrors: INVALID_INPUT, NOT_FOUND, SEND_NOW_CONFLICT, SESSION_BUSY (several "
        "instances: the one running the turn failed)."
    )
    async def cancel(self, info: Info, input: Input[i.CancelInput]) -> p.CancelPayload:
        ctx = info.context
        result = await ctx.engine.cancel(ctx.require_principal(), input.session_id)
        ctx.loaders.cancellation.prime(input.session_id, result.cancellation, force=True)
        return p.CancelPayload(
            session=Session.from_domain(result.session),
            cancellation=CancellationStatus.from_domain(result.cancellation),
            outcome=result.outcome,
        )

    @mutation(
        "Turn auto-run on or off (Q1, Q2). Off never stops the active turn: it lets it "
        "finish and holds the rest (pause reason USER). On starts the head at once when "
        "the session is promptable and nothing holds it (`dispatched`). userErrors: "
        "INVALID_INPUT, NOT_FOUND, QUEUE_CHANGED."
    )
    async def set_auto_run(
        self, info: Info, input: Input[i.SetAutoRunInput]
    ) -> p.SetAutoRunPayload:
        engine, principal = _caller(info)
        applied = await engine.set_auto_run(
            principal, input.session_id, input.auto_run, input.expected_revision
        )
        return p.SetAutoRunPayload(
            queue=QueueStatus.from_domain(applied.queue),
            dispatched=applied.turn is not None,
            turn=_turn(applied.turn),
        )

    @mutation(
        "Run one entry (scope ENTRY) or all of them combined (ALL) in place of the active "
        "turn (Q5): it claims them and turns auto-run on, stops the active turn without "
        "pausing the queue, then starts them; the rest follow in FIFO order. A refusal "
        "leaves the queue exactly as it was. userErrors: INVALID_INPUT, NOT_FOUND, "
        "CLARIFICATION_PENDING, SESSION_NOT_PROMPTABLE, QUEUE_CHANGED, QUEUE_EMPTY, "
        "ENTRY_NOT_FOUND, SEND_NOW_CONFLICT, TURN_CHANGED, SESSION_BUSY (several "
        "instances: the one running the turn did not answer)."
    )
    async def send_now(self, info: Info, input: Input[i.SendNowInput]) -> p.SendNowPayload:
        engine, principal = _caller(info)
        result = await engine.send_now(
            principal, input.session_id, input.scope, input.entry_id, input.expected_revision
        )
        # The status the delivery committed; read when another instance ran the Send Now.
        queue = result.queue or await engine.queue_status(input.session_id)
        return p.SendNowPayload(
            queue=QueueStatus.from_domain(queue),
            turn=_turn(result.turn),
            sent_count=result.sent_count,
        )

    @mutation(
        "Turn auto-run on and start at most one head entry (Q6, for compatibility). "
        "userErrors: INVALID_INPUT, NOT_FOUND, QUEUE_CHANGED, CLARIFICATION_PENDING, "
        "SESSION_BUSY, SESSION_NOT_PROMPTABLE."
    )
    async def drain(self, info: Info, input: Input[i.DrainInput]) -> p.DrainPayload:
        engine, principal = _caller(info)
        turn, queue = await engine.drain(principal, input.session_id, input.expected_revision)
        return p.DrainPayload(
            queue=QueueStatus.from_domain(queue), turn=_turn(turn), drained=turn is not None
        )

    @mutation(
        "Answer the agent's pending question: the answer runs as the next turn (source "
        "USER) and the clarification is cleared. userErrors: INVALID_INPUT, NOT_FOUND, "
        "NO_CLARIFICATION, SESSION_BUSY."
    )
    async def answer_clarification(
        self, info: Info, input: Input[i.AnswerClarificationInput]
    ) -> p.SessionPayload:
        engine, principal = _caller(info)
        session = await engine.answer_clarification(
            principal, input.session_id, input.answer, input.clarification_id
        )
        return p.SessionPayload(session=Session.from_domain(session))

    @mutation(
        "Answer the agent's pending permission request with one of its options (A6); the "
        "turn goes on. Of concurrent answers one wins. userErrors: INVALID_INPUT (a bad id, "
        "an option it does not offer), NOT_FOUND, APPROVAL_RESOLVED (already answered, or "
        "its turn was cancelled or ended), SESSION_BUSY (its turn runs on another instance)."
    )
    async def answer_approval(
        self, info: Info, input: Input[i.AnswerApprovalInput]
    ) -> p.AnswerApprovalPayload:
        engine, principal = _caller(info)
        approval, session = await engine.answer_approval(
            principal, input.approval_id, input.option_id
        )
        return p.AnswerApprovalPayload(
            approval=Approval.from_domain(approval), session=Session.from_domain(session)
        )

    @mutation(
        "Move the task to a workflow step (W1-W3). A step with `new_session_on_enter` "
        "creates a new session and moves the queue to it (W3); then one automatic drain "
        "runs on the task's current session. userErrors: INVALID_INPUT (taskId, unknown "
        "step), NOT_FOUND."
    )
    async def move_task(self, info: Info, input: Input[i.MoveTaskInput]) -> p.MoveTaskPayload:
        engine, principal = _caller(info)
        task, session = await engine.move_task(principal, input.task_id, input.step)
        return p.MoveTaskPayload(task=Task.from_domain(task), session=Session.from_domain(session))
