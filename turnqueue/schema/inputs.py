"""Mutation inputs (SPEC §7). Ids arrive as plain strings; the engine checks their shape."""

from __future__ import annotations

import strawberry

from turnqueue.schema.enums import SendNowScope
from turnqueue.schema.scalars import Revision


@strawberry.input
class CreateTaskInput:
    title: str
    agent: str | None = None


@strawberry.input
class SendMessageInput:
    session_id: strawberry.ID
    content: str


@strawberry.input
class EnqueueMessageInput:
    session_id: strawberry.ID
    content: str
    expected_revision: Revision | None = None


@strawberry.input
class UpdateQueueEntryInput:
    session_id: strawberry.ID
    entry_id: strawberry.ID
    content: str
    expected_revision: Revision | None = None


@strawberry.input
class RemoveQueueEntryInput:
    session_id: strawberry.ID
    entry_id: strawberry.ID
    expected_revision: Revision | None = None


@strawberry.input
class ClearQueueInput:
    session_id: strawberry.ID
    expected_revision: Revision | None = None


@strawberry.input
class ReorderQueueInput:
    session_id: strawberry.ID
    ordered_ids: list[strawberry.ID]
    expected_revision: Revision | None = None


@strawberry.input
class CancelInput:
    session_id: strawberry.ID


@strawberry.input
class SetAutoRunInput:
    session_id: strawberry.ID
    auto_run: bool
    expected_revision: Revision | None = None


@strawberry.input
class SendNowInput:
    session_id: strawberry.ID
    scope: SendNowScope = SendNowScope.ENTRY
    entry_id: strawberry.ID | None = None
    expected_revision: Revision | None = None


@strawberry.input
class DrainInput:
    session_id: strawberry.ID
    expected_revision: Revision | None = None


@strawberry.input
class AnswerClarificationInput:
    session_id: strawberry.ID
    answer: str
    clarification_id: strawberry.ID | None = None


@strawberry.input
class MoveTaskInput:
    task_id: strawberry.ID
    step: str
