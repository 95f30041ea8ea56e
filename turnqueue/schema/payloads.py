"""Mutation payloads (SPEC §7): the changed entities and ``userErrors`` (entities null on error)."""

from __future__ import annotations

import strawberry

from turnqueue.schema.enums import CancelOutcome
from turnqueue.schema.types import (
    CancellationStatus,
    QueueEntry,
    QueueStatus,
    Session,
    Task,
    Turn,
    UserError,
)


@strawberry.type
class CreateTaskPayload:
    task: Task | None = None
    session: Session | None = None
    user_errors: list[UserError] = strawberry.field(default_factory=list)


@strawberry.type
class SendMessagePayload:
    session: Session | None = None
    turn: Turn | None = None
    queued_entry: QueueEntry | None = None
    queue: QueueStatus | None = None
    user_errors: list[UserError] = strawberry.field(default_factory=list)


@strawberry.type
class EnqueueMessagePayload:
    queue: QueueStatus | None = None
    entry: QueueEntry | None = None
    dispatched: bool = False
    turn: Turn | None = None
    user_errors: list[UserError] = strawberry.field(default_factory=list)


@strawberry.type
class QueuePayload:
    queue: QueueStatus | None = None
    user_errors: list[UserError] = strawberry.field(default_factory=list)


@strawberry.type
class CancelPayload:
    session: Session | None = None
    cancellation: CancellationStatus | None = None
    outcome: CancelOutcome | None = None
    user_errors: list[UserError] = strawberry.field(default_factory=list)


@strawberry.type
class SetAutoRunPayload:
    queue: QueueStatus | None = None
    dispatched: bool = False
    turn: Turn | None = None
    user_errors: list[UserError] = strawberry.field(default_factory=list)


@strawberry.type
class SendNowPayload:
    queue: QueueStatus | None = None
    turn: Turn | None = None
    sent_count: int = 0
    user_errors: list[UserError] = strawberry.field(default_factory=list)


@strawberry.type
class DrainPayload:
    queue: QueueStatus | None = None
    turn: Turn | None = None
    drained: bool = False
    user_errors: list[UserError] = strawberry.field(default_factory=list)


@strawberry.type
class SessionPayload:
    session: Session | None = None
    user_errors: list[UserError] = strawberry.field(default_factory=list)


@strawberry.type
class MoveTaskPayload:
    task: Task | None = None
    session: Session | None = None
    user_errors: list[UserError] = strawberry.field(default_factory=list)
