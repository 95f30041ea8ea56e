"""Object types of the contract (SPEC §7), each built from its domain value with ``from_domain``.

Session fields beyond its own row (task, queue, cancellation, clarification, turns) resolve lazily
through the per-operation readers of the context (DataLoaders), so a client asking for
``tasks → sessions → queue / turns`` costs one batched read per level, not one per row. Types know
the context only through the :class:`Reads` protocol below.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

import strawberry

from turnqueue import domain
from turnqueue.errors import UserFacingError
from turnqueue.schema.enums import (
    ErrorCode,
    HoldReason,
    MessageSource,
    PauseReason,
    SessionState,
    TurnStatus,
)
from turnqueue.schema.scalars import Revision

#: ``turns(last:)`` and ``tasks(first:)`` answer at most this many (SPEC §7).
MAX_PAGE = 200


class Reads(Protocol):
    """What types need from the per-operation context: cached, batched reads."""

    async def task(self, task_id: str) -> domain.Task | None: ...

    async def session(self, session_id: str) -> domain.Session | None: ...

    async def sessions_of_task(self, task_id: str) -> list[domain.Session]: ...

    async def queue_status(self, session_id: str) -> domain.QueueStatus: ...

    async def cancellation(self, session_id: str) -> domain.CancellationStatus: ...

    async def clarification(self, session_id: str) -> domain.Clarification | None: ...

    async def current_turn(self, session_id: str) -> domain.Turn | None: ...

    async def turns(self, session_id: str, last: int) -> list[domain.Turn]: ...


Info = strawberry.Info[Reads, None]


@strawberry.type
class UserError:
    """An expected failure of a mutation; ``field`` is the path of the input field at fault."""

    code: ErrorCode
    message: str
    field: list[str] | None = None

    @classmethod
    def from_domain(cls, error: UserFacingError) -> UserError:
        return cls(code=error.code, message=error.message, field=error.field)


@strawberry.type
class Task:
    id: strawberry.ID
    title: str
    workflow_step: str
    created_at: datetime
    current_session_id: strawberry.Private[str | None]

    @classmethod
    def from_domain(cls, task: domain.Task) -> Task:
        return cls(
            id=strawberry.ID(task.id),
            title=task.title,
            workflow_step=task.workflow_step,
            created_at=task.created_at,
            current_session_id=task.current_session_id,
        )

    @strawberry.field  # The session the task currently runs in.
    async def current_session(self, info: Info) -> Session | None:
        if self.current_session_id is None:
            return None
        session = await info.context.session(self.current_session_id)
        return Session.from_domain(session) if session is not None else None

    @strawberry.field  # Every session of the task, oldest first.
    async def sessions(self, info: Info) -> list[Session]:
        return [Session.from_domain(s) for s in await info.context.sessions_of_task(self.id)]


@strawberry.type
class Clarification:
    id: strawberry.ID
    question: str
    asked_at: datetime

    @classmethod
    def from_domain(cls, clarification: domain.Clarification) -> Clarification:
        return cls(
            id=strawberry.ID(clarification.id),
            question=clarification.question,
            asked_at=clarification.asked_at,
        )


@strawberry.type
class CancellationStatus:
    """Whether a cancellation of the session's turn is in progress (C1), with its revision (C2)."""

    id: strawberry.ID
    session_id: strawberry.ID
    pending: bool
    revision: Revision

    @classmethod
    def from_domain(cls, status: domain.CancellationStatus) -> CancellationStatus:
        return cls(
            id=strawberry.ID(f"cancellation:{status.session_id}"),
            session_id=strawberry.ID(status.session_id),
            pending=status.pending,
            revision=Revision(status.revision),
        )


@strawberry.type
class QueueEntry:
    id: strawberry.ID
    session_id: strawberry.ID
    position: int
    content: str
    source: MessageSource
    queued_at: datetime

    @classmethod
    def from_domain(cls, entry: domain.QueueEntry) -> QueueEntry:
        return cls(
            id=strawberry.ID(entry.id),
            session_id=strawberry.ID(entry.session_id),
            position=entry.position,
            content=entry.content,
            source=entry.source,
            queued_at=entry.queued_at,
        )


@strawberry.type
class QueueStatus:
    """The session's queue: policy (Q1, Q14), holds (Q9), visible entries and revision (Q13)."""

    id: strawberry.ID
    session_id: strawberry.ID
    auto_run: bool
    pause_reason: PauseReason | None
    held_by: list[HoldReason]
    entries: list[QueueEntry]
    count: int
    max: int | None
    revision: Revision

    @classmethod
    def from_domain(cls, status: domain.QueueStatus) -> QueueStatus:
        return cls(
            id=strawberry.ID(f"queue:{status.session_id}"),
            session_id=strawberry.ID(status.session_id),
            auto_run=status.auto_run,
            pause_reason=status.pause_reason,
            held_by=list(status.held_by),
            entries=[QueueEntry.from_domain(e) for e in status.entries],
            count=status.count,
            max=status.max,
            revision=Revision(status.revision),
        )


@strawberry.type
class Turn:
    id: strawberry.ID
    session_id: strawberry.ID
    prompt: str
    source: MessageSource
    status: TurnStatus
    output: str
    error: str | None
    started_at: datetime
    ended_at: datetime | None

    @classmethod
    def from_domain(cls, turn: domain.Turn) -> Turn:
        return cls(
            id=strawberry.ID(turn.id),
            session_id=strawberry.ID(turn.session_id),
            prompt=turn.prompt,
            source=turn.source,
            status=turn.status,
            output=turn.output,
            error=turn.error,
            started_at=turn.started_at,
            ended_at=turn.ended_at,
        )


@strawberry.type
class TurnOutputChunk:
    session_id: strawberry.ID
    turn_id: strawberry.ID
    offset: int
    text: str
    done: bool
    status: TurnStatus

    @classmethod
    def from_domain(cls, chunk: domain.OutputChunk) -> TurnOutputChunk:
        return cls(
            session_id=strawberry.ID(chunk.session_id),
            turn_id=strawberry.ID(chunk.turn_id),
            offset=chunk.offset,
            text=chunk.text,
            done=chunk.done,
            status=chunk.status,
        )


@strawberry.type
class Session:
    id: strawberry.ID
    agent: str
    state: SessionState
    revision: Revision = strawberry.field(description="The session's own revision (R1).")
    promptable: bool
    created_at: datetime
    updated_at: datetime
    task_id: strawberry.ID

    @classmethod
    def from_domain(cls, session: domain.Session) -> Session:
        return cls(
            id=strawberry.ID(session.id),
            agent=session.agent,
            state=session.state,
            revision=Revision(session.revision),
            promptable=session.promptable,
            created_at=session.created_at,
            updated_at=session.updated_at,
            task_id=strawberry.ID(session.task_id),
        )

    @strawberry.field
    async def task(self, info: Info) -> Task:
        task = await info.context.task(self.task_id)
        if task is None:  # a session always has its task (foreign key)
            raise LookupError(f"task {self.task_id} of session {self.id} is missing")
        return Task.from_domain(task)

    @strawberry.field  # C6: true while a cancellation of the turn is in progress.
    async def cancellation_pending(self, info: Info) -> bool:
        return (await info.context.cancellation(self.id)).pending

    @strawberry.field  # C6: the revision of cancellationPending (C2).
    async def cancellation_revision(self, info: Info) -> Revision:
        return Revision((await info.context.cancellation(self.id)).revision)

    @strawberry.field
    async def cancellation(self, info: Info) -> CancellationStatus:
        return CancellationStatus.from_domain(await info.context.cancellation(self.id))

    @strawberry.field
    async def auto_run(self, info: Info) -> bool:
        return (await info.context.queue_status(self.id)).auto_run

    @strawberry.field
    async def queue(self, info: Info) -> QueueStatus:
        return QueueStatus.from_domain(await info.context.queue_status(self.id))

    @strawberry.field
    async def clarification(self, info: Info) -> Clarification | None:
        clarification = await info.context.clarification(self.id)
        return Clarification.from_domain(clarification) if clarification is not None else None

    @strawberry.field  # The newest turn whatever its status; null before the first.
    async def current_turn(self, info: Info) -> Turn | None:
        turn = await info.context.current_turn(self.id)
        return Turn.from_domain(turn) if turn is not None else None

    @strawberry.field  # The newest `last` turns (at most 200), oldest first.
    async def turns(self, info: Info, last: int = 20) -> list[Turn]:
        last = max(0, min(last, MAX_PAGE))
        return [Turn.from_domain(t) for t in await info.context.turns(self.id, last)]
