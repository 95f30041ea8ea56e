"""Mutation roots (SPEC §7): one ``input``, a payload with the changed entities and ``userErrors``.

Each resolver only translates: input → engine call → payload. An expected failure
(``UserFacingError``) becomes ``userErrors`` with null entities; anything else propagates and is
masked by the schema (S3).
"""

from __future__ import annotations

import strawberry

from turnqueue import domain
from turnqueue.errors import UserFacingError
from turnqueue.resolvers.context import Context
from turnqueue.schema import inputs as i
from turnqueue.schema import payloads as p
from turnqueue.schema.types import (
    CancellationStatus,
    QueueEntry,
    QueueStatus,
    Session,
    Task,
    Turn,
    UserError,
)

Info = strawberry.Info[Context, None]


def _errors(error: UserFacingError) -> list[UserError]:
    return [UserError.from_domain(error)]


def _turn(turn: domain.Turn | None) -> Turn | None:
    return Turn.from_domain(turn) if turn is not None else None


@strawberry.type
class Mutation:
    @strawberry.mutation  # Create a task and its first session.
    async def create_task(self, info: Info, input: i.CreateTaskInput) -> p.CreateTaskPayload:
        ctx = info.context
        try:
            task, session = await ctx.engine.create_task(
                ctx.require_principal(), input.title, input.agent
            )
        except UserFacingError as e:
            return p.CreateTaskPayload(user_errors=_errors(e))
        return p.CreateTaskPayload(
            task=Task.from_domain(task), session=Session.from_domain(session)
        )

    @strawberry.mutation  # Start a turn when the session is free, else queue it.
    async def send_message(self, info: Info, input: i.SendMessageInput) -> p.SendMessagePayload:
        ctx, principal = info.context, info.context.require_principal()
        try:
            admission = await ctx.engine.send_message(principal, input.session_id, input.content)
            session = await ctx.engine.authorize_session(principal, input.session_id)
        except UserFacingError as e:
            return p.SendMessagePayload(user_errors=_errors(e))
        queue = await ctx.engine.queue_status(input.session_id)
        return p.SendMessagePayload(
            session=Session.from_domain(session),
            turn=_turn(admission.turn),
            queued_entry=QueueEntry.from_domain(admission.entry) if admission.entry else None,
            queue=QueueStatus.from_domain(queue),
        )

    @strawberry.mutation  # Always queue; then an automatic drain (Q3).
    async def enqueue_message(
        self, info: Info, input: i.EnqueueMessageInput
    ) -> p.EnqueueMessagePayload:
        ctx = info.context
        try:
            entry, turn = await ctx.engine.enqueue(
                ctx.require_principal(), input.session_id, input.content, input.expected_revision
            )
        except UserFacingError as e:
            return p.EnqueueMessagePayload(user_errors=_errors(e))
        queue = await ctx.engine.queue_status(input.session_id)
        return p.EnqueueMessagePayload(
            queue=QueueStatus.from_domain(queue),
            entry=QueueEntry.from_domain(entry),
            dispatched=turn is not None,
            turn=_turn(turn),
        )

    @strawberry.mutation  # Edit a USER entry's content (Q12).
    async def update_queue_entry(
        self, info: Info, input: i.UpdateQueueEntryInput
    ) -> p.QueuePayload:
        ctx = info.context
        try:
            queue = await ctx.engine.update_entry(
                ctx.require_principal(),
                input.session_id,
                input.entry_id,
                input.content,
                input.expected_revision,
            )
        except UserFacingError as e:
            return p.QueuePayload(user_errors=_errors(e))
        return p.QueuePayload(queue=QueueStatus.from_domain(queue))

    @strawberry.mutation  # Remove one entry (Q12).
    async def remove_queue_entry(
        self, info: Info, input: i.RemoveQueueEntryInput
    ) -> p.QueuePayload:
        ctx = info.context
        try:
            queue = await ctx.engine.remove_entry(
                ctx.require_principal(), input.session_id, input.entry_id, input.expected_revision
            )
        except UserFacingError as e:
            return p.QueuePayload(user_errors=_errors(e))
        return p.QueuePayload(queue=QueueStatus.from_domain(queue))

    @strawberry.mutation  # Remove every visible entry (Q12).
    async def clear_queue(self, info: Info, input: i.ClearQueueInput) -> p.QueuePayload:
        ctx = info.context
        try:
            queue = await ctx.engine.clear_queue(
                ctx.require_principal(), input.session_id, input.expected_revision
            )
        except UserFacingError as e:
            return p.QueuePayload(user_errors=_errors(e))
        return p.QueuePayload(queue=QueueStatus.from_domain(queue))

    @strawberry.mutation  # Reorder: orderedIds must be exactly the visible entries.
    async def reorder_queue(self, info: Info, input: i.ReorderQueueInput) -> p.QueuePayload:
        ctx = info.context
        try:
            queue = await ctx.engine.reorder_queue(
                ctx.require_principal(),
                input.session_id,
                [str(x) for x in input.ordered_ids],
                input.expected_revision,
            )
        except UserFacingError as e:
            return p.QueuePayload(user_errors=_errors(e))
        return p.QueuePayload(queue=QueueStatus.from_domain(queue))

    @strawberry.mutation  # Stop the active turn; answers once it has finished (C1-C9).
    async def cancel(self, info: Info, input: i.CancelInput) -> p.CancelPayload:
        ctx = info.context
        try:
            result = await ctx.engine.cancel(ctx.require_principal(), input.session_id)
        except UserFacingError as e:
            return p.CancelPayload(user_errors=_errors(e))
        ctx.loaders.cancellation.prime(input.session_id, result.cancellation, force=True)
        return p.CancelPayload(
            session=Session.from_domain(result.session),
            cancellation=CancellationStatus.from_domain(result.cancellation),
            outcome=result.outcome,
        )

    @strawberry.mutation  # Q2: true starts the head when eligible; false never stops.
    async def set_auto_run(self, info: Info, input: i.SetAutoRunInput) -> p.SetAutoRunPayload:
        ctx = info.context
        try:
            turn = await ctx.engine.set_auto_run(
                ctx.require_principal(), input.session_id, input.auto_run, input.expected_revision
            )
        except UserFacingError as e:
            return p.SetAutoRunPayload(user_errors=_errors(e))
        queue = await ctx.engine.queue_status(input.session_id)
        return p.SetAutoRunPayload(
            queue=QueueStatus.from_domain(queue), dispatched=turn is not None, turn=_turn(turn)
        )

    @strawberry.mutation  # Q5: run one entry (or all, combined) in place of the turn.
    async def send_now(self, info: Info, input: i.SendNowInput) -> p.SendNowPayload:
        ctx = info.context
        try:
            result = await ctx.engine.send_now(
                ctx.require_principal(),
                input.session_id,
                input.scope,
                input.entry_id,
                input.expected_revision,
            )
        except UserFacingError as e:
            return p.SendNowPayload(user_errors=_errors(e))
        queue = await ctx.engine.queue_status(input.session_id)
        return p.SendNowPayload(
            queue=QueueStatus.from_domain(queue),
            turn=_turn(result.turn),
            sent_count=result.sent_count,
        )

    @strawberry.mutation  # Q6: set auto-run on and start at most one head entry.
    async def drain(self, info: Info, input: i.DrainInput) -> p.DrainPayload:
        ctx = info.context
        try:
            turn = await ctx.engine.drain(
                ctx.require_principal(), input.session_id, input.expected_revision
            )
        except UserFacingError as e:
            return p.DrainPayload(user_errors=_errors(e))
        queue = await ctx.engine.queue_status(input.session_id)
        return p.DrainPayload(
            queue=QueueStatus.from_domain(queue), turn=_turn(turn), drained=turn is not None
        )

    @strawberry.mutation  # Send the answer as the next turn and clear the question.
    async def answer_clarification(
        self, info: Info, input: i.AnswerClarificationInput
    ) -> p.SessionPayload:
        ctx = info.context
        try:
            session = await ctx.engine.answer_clarification(
                ctx.require_principal(), input.session_id, input.answer, input.clarification_id
            )
        except UserFacingError as e:
            return p.SessionPayload(user_errors=_errors(e))
        return p.SessionPayload(session=Session.from_domain(session))

    @strawberry.mutation  # Move the task to a workflow step (W1-W3).
    async def move_task(self, info: Info, input: i.MoveTaskInput) -> p.MoveTaskPayload:
        ctx = info.context
        try:
            task, session = await ctx.engine.move_task(
                ctx.require_principal(), input.task_id, input.step
            )
        except UserFacingError as e:
            return p.MoveTaskPayload(user_errors=_errors(e))
        return p.MoveTaskPayload(task=Task.from_domain(task), session=Session.from_domain(session))
