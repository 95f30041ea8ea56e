"""Object types of the contract (SPEC §7), each built from its domain value with ``from_domain``.

Session fields beyond its own row (task, queue, cancellation, clarification, turns) resolve lazily
through the per-operation readers of the context (DataLoaders), so a client asking for
``tasks → sessions → queue / turns`` costs one batched read per level, not one per row. Types know
the context only through the :class:`Reads` protocol below.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Protocol

import strawberry

from turnqueue import domain
from turnqueue.errors import UserFacingError
from turnqueue.schema import fields as described
from turnqueue.schema.connections import AFTER, BEFORE, FIRST, LAST, Connection, PageArgs
from turnqueue.schema.enums import (
    ErrorCode,
    HoldReason,
    MessageSource,
    PauseReason,
    SessionState,
    TurnStatus,
)
from turnqueue.schema.items import Approval, TurnItem, item_from_domain
from turnqueue.schema.scalars import Revision


class Reads(Protocol):
    """What types need from the per-operation context: cached, batched reads."""

    async def task(self, task_id: str) -> domain.Task | None: ...

    async def session(self, session_id: str) -> domain.Session | None: ...

    async def sessions_of_task(self, task_id: str) -> list[domain.Session]: ...

    async def queue_status(self, session_id: str) -> domain.QueueStatus: ...

    async def cancellation(self, session_id: str) -> domain.CancellationStatus: ...

    async def clarification(self, session_id: str) -> domain.Clarification | None: ...

    async def current_turn(self, session_id: str) -> domain.Turn | None: ...

    def turn_items(self, turn_id: str) -> tuple[domain.TurnItem, ...]: ...

    def agent_error(self, session_id: str) -> str | None: ...

    async def pending_approval(self, session_id: str) -> domain.Approval | None: ...

    async def approvals_of_turn(self, turn_id: str) -> list[domain.Approval]: ...

    async def turns(self, session_id: str, last: int) -> list[domain.Turn]: ...

    async def sessions_connection(self, task_id: str, args: PageArgs) -> Connection[Session]: ...

    async def turns_connection(self, session_id: str, args: PageArgs) -> Connection[Turn]: ...

    def items_connection(self, turn_id: str, args: PageArgs) -> Connection[TurnItem]: ...


Info = strawberry.Info[Reads, None]

#: The paging arguments of every connection field (G3).
First = Annotated[int | None, strawberry.argument(description=FIRST)]
After = Annotated[str | None, strawberry.argument(description=AFTER)]
Last = Annotated[int | None, strawberry.argument(description=LAST)]
Before = Annotated[str | None, strawberry.argument(description=BEFORE)]


@strawberry.type(
    description="An expected refusal of a mutation: the mutation changed nothing and the "
    "entities of its payload are null."
)
class UserError:
    code: ErrorCode = strawberry.field(description="What was refused, for programs to act on.")
    message: str = strawberry.field(
        description="What was refused, in a sentence for people (its wording may change)."
    )
    field: list[str] | None = strawberry.field(
        default=None,
        description='The path of the input field at fault, e.g. `["entryId"]`; null when no '
        "single field is.",
    )

    @classmethod
    def from_domain(cls, error: UserFacingError) -> UserError:
        return cls(code=error.code, message=error.message, field=error.field)


@strawberry.type(
    description="A unit of work a user opened. It runs in one session at a time "
    "(`currentSession`); a workflow step with `new_session_on_enter` hands it to a new session "
    "(W3). Only the principal that created it can see it (S2)."
)
class Task:
    id: strawberry.ID = strawberry.field(description="The task's id (a UUID).")
    title: str = strawberry.field(description="The title given to createTask (1-500 characters).")
    workflow_step: str = strawberry.field(
        description="The workflow step the task is in: the workflow's first step at creation, "
        "then changed by moveTask or by a step's `on_turn_complete` action (W1). No revision "
        "orders it: read the task again after `sessionChanged` reports a turn's end."
    )
    created_at: datetime = strawberry.field(description="When the task was created.")
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

    @described.field(
        "The session the task runs in now: its first session, or the newest one a "
        "workflow transfer created (W3). Null only before its first session exists."
    )
    async def current_session(self, info: Info) -> Session | None:
        if self.current_session_id is None:
            return None
        session = await info.context.session(self.current_session_id)
        return Session.from_domain(session) if session is not None else None

    @described.field(
        "Every session of the task, oldest first, in one unpaged list.",
        deprecation_reason="Use `sessionsConnection`, which pages with cursors.",
    )
    async def sessions(self, info: Info) -> list[Session]:
        return [Session.from_domain(s) for s in await info.context.sessions_of_task(self.id)]

    @described.field(
        "The task's sessions, oldest first (by creation time, then id), a page at a time (G3)."
    )
    async def sessions_connection(
        self,
        info: Info,
        first: First = None,
        after: After = None,
        last: Last = None,
        before: Before = None,
    ) -> Connection[Session]:
        args = PageArgs(first=first, after=after, last=last, before=before)
        return await info.context.sessions_connection(self.id, args)


@strawberry.type(
    description="A question the agent asked. The turn that asked it ended COMPLETED with the "
    "question as its output; answer it with answerClarification."
)
class Clarification:
    id: strawberry.ID = strawberry.field(
        description="The clarification's id: pass it as `clarificationId` to answer exactly this "
        "question."
    )
    question: str = strawberry.field(description="The agent's question.")
    asked_at: datetime = strawberry.field(description="When the agent asked it.")

    @classmethod
    def from_domain(cls, clarification: domain.Clarification) -> Clarification:
        return cls(
            id=strawberry.ID(clarification.id),
            question=clarification.question,
            asked_at=clarification.asked_at,
        )


@strawberry.type(
    description="Whether a cancellation of the session's turn is in progress (C1), with its "
    "revision (C2): what cancellationChanged sends and cancel answers. Runtime state, never "
    "stored; every instance shows the same (C7)."
)
class CancellationStatus:
    id: strawberry.ID = strawberry.field(
        description="`cancellation:<sessionId>`: one stable id per session, so normalised caches "
        "(Apollo, urql) merge every update into one object."
    )
    session_id: strawberry.ID = strawberry.field(description="The session it belongs to.")
    pending: bool = strawberry.field(
        description="True from the moment a cancellation (a cancel, or the stop of a Send Now "
        "replacement) is accepted until the last one in progress ends; false otherwise (C1)."
    )
    revision: Revision = strawberry.field(
        description="The cancellation revision: it grows on each change of `pending`, and only "
        "then (C2), and never goes back, not across restarts or instances (R2). Keep the "
        "highest you have seen and ignore lower ones. 0 (with `pending` false) while the server "
        "knows of no cancellation of the session, e.g. before the first: it never outranks a "
        "real transition."
    )

    @classmethod
    def from_domain(cls, status: domain.CancellationStatus) -> CancellationStatus:
        return cls(
            id=strawberry.ID(f"cancellation:{status.session_id}"),
            session_id=strawberry.ID(status.session_id),
            pending=status.pending,
            revision=Revision(status.revision),
        )


@strawberry.type(description="A message waiting in a session's queue.")
class QueueEntry:
    id: strawberry.ID = strawberry.field(
        description="The entry's id (a UUID). It keeps it when a failed delivery returns it to "
        "the head of the queue (Q10)."
    )
    session_id: strawberry.ID = strawberry.field(description="The session whose queue holds it.")
    position: int = strawberry.field(
        description="Its place among the visible entries: 1 is the head, which runs next (FIFO). "
        "It changes as entries ahead of it run, are removed or reordered."
    )
    content: str = strawberry.field(
        description="The message; USER entries can be edited with updateQueueEntry."
    )
    source: MessageSource = strawberry.field(
        description="Who queued it; only USER entries can be edited (Q12)."
    )
    queued_at: datetime = strawberry.field(description="When it was queued.")

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


@strawberry.type(
    description="A session's queue: its entries, its auto-run policy (Q1, Q14), what holds it "
    "(Q9) and its revision (Q13), as queueStatusChanged sends it. Any change to any of these "
    "fields is a new `revision`."
)
class QueueStatus:
    id: strawberry.ID = strawberry.field(
        description="`queue:<sessionId>`: one stable id per session, so normalised caches merge "
        "every update into one object."
    )
    session_id: strawberry.ID = strawberry.field(description="The session it belongs to.")
    auto_run: bool = strawberry.field(
        description="Whether the queue runs on by itself: when a turn ends, the head entry "
        "starts (Q4). Durable; true until set otherwise. Turning it off never stops the active "
        "turn (Q2)."
    )
    pause_reason: PauseReason | None = strawberry.field(
        description="Why `autoRun` is false; null while it is true."
    )
    held_by: list[HoldReason] = strawberry.field(
        description="What holds delivery right now even with `autoRun` on (Q9); empty when "
        "nothing does."
    )
    entries: list[QueueEntry] = strawberry.field(
        description="The visible entries, head first. An entry reserved for a turn that is "
        "starting is hidden; if the start fails it comes back at the head (Q10)."
    )
    count: int = strawberry.field(description="How many entries are visible (`entries`).")
    max: int | None = strawberry.field(
        description="The most entries the queue takes (`TURNQUEUE_QUEUE_MAX`); one more is "
        "QUEUE_FULL (Q11). Null when unlimited."
    )
    revision: Revision = strawberry.field(
        description="The queue revision (Q13): durable, it grows with every change of this "
        "status and never goes back. Keep the highest per session; pass it as "
        "`expectedRevision` to a queue mutation to refuse (QUEUE_CHANGED) if the queue changed."
    )

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


@strawberry.type(description="One prompt of a session and the agent's answer to it.")
class Turn:
    id: strawberry.ID = strawberry.field(description="The turn's id (a UUID).")
    session_id: strawberry.ID = strawberry.field(description="The session it ran in.")
    prompt: str = strawberry.field(
        description="The prompt the agent was given (Send Now with scope ALL joins its entries "
        "with blank lines)."
    )
    source: MessageSource = strawberry.field(
        description="Where the prompt came from (a queued entry keeps its source)."
    )
    status: TurnStatus = strawberry.field(
        description="RUNNING until the turn ends, then how it ended. The end is a new session "
        "`revision`."
    )
    output: str = strawberry.field(
        description="The agent's answer. While the turn runs it may be empty or behind: follow "
        "turnOutput for the live text."
    )
    error: str | None = strawberry.field(
        description="Why the turn failed or was cut short (e.g. `interrupted` when its server "
        "died, M6); null otherwise."
    )
    started_at: datetime = strawberry.field(description="When the turn started.")
    ended_at: datetime | None = strawberry.field(description="When it ended; null while RUNNING.")

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

    @described.field(
        "The turn's structured output in order (A3): messages, thoughts, tool calls, plans "
        "and raw agent updates (`acp` agents; other agents' text is one MESSAGE item). Kept "
        "in memory by the instance that ran the turn, for its recent turns; empty elsewhere."
    )
    def items(self, info: Info) -> list[TurnItem]:
        return [item_from_domain(i, it) for i, it in enumerate(info.context.turn_items(self.id))]

    @described.field(
        "The turn's items (see `items`), a page at a time (G3), in order. An item keeps its "
        "place (a tool call's later updates change it where it is; new items come last), so a "
        "cursor keeps its place while the turn runs."
    )
    def items_connection(
        self,
        info: Info,
        first: First = None,
        after: After = None,
        last: Last = None,
        before: Before = None,
    ) -> Connection[TurnItem]:
        args = PageArgs(first=first, after=after, last=last, before=before)
        return info.context.items_connection(self.id, args)

    @described.field(
        "Every permission request the agent made during the turn, with its answer (who, "
        "which option, when), oldest first (A6)."
    )
    async def approvals(self, info: Info) -> list[Approval]:
        return [Approval.from_domain(a) for a in await info.context.approvals_of_turn(self.id)]


@strawberry.type(
    description="A piece of a turn's streamed output, as turnOutput sends it. Streamed output "
    "bumps no revision: place each chunk by `offset`."
)
class TurnOutputChunk:
    session_id: strawberry.ID = strawberry.field(description="The session of the turn.")
    turn_id: strawberry.ID = strawberry.field(
        description="The turn the text belongs to. A new id means a new turn, whose output "
        "starts again at offset 0."
    )
    offset: int = strawberry.field(
        description="Where `text` starts in the turn's output, in characters. The first message "
        "carries the output so far from 0; later ones continue where the previous ended."
    )
    text: str = strawberry.field(
        description="The text from `offset` on (empty in a final chunk that only ends the turn)."
    )
    done: bool = strawberry.field(
        description="True on the turn's last chunk: the turn has ended with `status`."
    )
    status: TurnStatus = strawberry.field(
        description="The turn's status: RUNNING, or how it ended when `done`."
    )

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


@strawberry.type(
    description="A conversation with one agent, where the task's turns run and its queue "
    "waits. Three revisions order what a client sees of it (R1): `revision` (state, turns, "
    "clarification), `queue.revision` (the queue) and `cancellationRevision` (cancellation). "
    "Keep the highest of each and ignore anything lower (R3). Every Session the API returns "
    "carries its current cancellation state (C6)."
)
class Session:
    id: strawberry.ID = strawberry.field(description="The session's id (a UUID).")
    agent: str = strawberry.field(
        description="The agent profile that answers its turns (`scripted`, `command`, ...), "
        "chosen by createTask."
    )
    state: SessionState = strawberry.field(
        description="Where the session is in its life; each change is a new `revision`."
    )
    revision: Revision = strawberry.field(
        description="The session's own revision (R1): durable, it grows with every change of "
        "state, each turn's start and end, and each clarification asked or cleared. Larger is "
        "newer; equal is the same state. Streamed output bumps no revision."
    )
    promptable: bool = strawberry.field(
        description="Whether the session takes a prompt now: state WAITING_FOR_INPUT, or "
        "COMPLETED (a prompt reopens it)."
    )
    created_at: datetime = strawberry.field(description="When the session was created.")
    updated_at: datetime = strawberry.field(
        description="When the session last changed (a new `revision`)."
    )
    task_id: strawberry.ID = strawberry.field(description="The id of its task.")

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

    @described.field("The task this session belongs to.")
    async def task(self, info: Info) -> Task:
        task = await info.context.task(self.task_id)
        if task is None:  # a session always has its task (foreign key)
            raise LookupError(f"task {self.task_id} of session {self.id} is missing")
        return Task.from_domain(task)

    @described.field(
        "True while a cancellation of the session's turn is in progress (C1, C6), "
        "as every instance shows it; ordered by `cancellationRevision`."
    )
    async def cancellation_pending(self, info: Info) -> bool:
        return (await info.context.cancellation(self.id)).pending

    @described.field(
        "The revision of `cancellationPending` (C2): it grows on each change of it "
        "and never goes back (R2). Read with it, atomically."
    )
    async def cancellation_revision(self, info: Info) -> Revision:
        return Revision((await info.context.cancellation(self.id)).revision)

    @described.field(
        "The same cancellation state as an object with an id of its own, as "
        "cancellationChanged sends it."
    )
    async def cancellation(self, info: Info) -> CancellationStatus:
        return CancellationStatus.from_domain(await info.context.cancellation(self.id))

    @described.field(
        "Whether the queue runs on by itself: `queue.autoRun`, ordered by `queue.revision`."
    )
    async def auto_run(self, info: Info) -> bool:
        return (await info.context.queue_status(self.id)).auto_run

    @described.field("The session's queue: entries, auto-run, holds and the queue revision.")
    async def queue(self, info: Info) -> QueueStatus:
        return QueueStatus.from_domain(await info.context.queue_status(self.id))

    @described.field(
        "The agent's unanswered question; null when there is none. While it is "
        "pending nothing runs from the queue (Q9) and sendMessage and sendNow answer "
        "CLARIFICATION_PENDING. Asking and clearing it are new `revision`s."
    )
    async def clarification(self, info: Info) -> Clarification | None:
        clarification = await info.context.clarification(self.id)
        return Clarification.from_domain(clarification) if clarification is not None else None

    @described.field(
        "Why the session's agent could not start (A2) when its state is FAILED; null "
        "otherwise (kept in the memory of the instance that started it)."
    )
    def agent_error(self, info: Info) -> str | None:
        return info.context.agent_error(self.id)

    @described.field(
        "The agent's permission request waiting for answerApproval (A6); null when none. A "
        "change is a new `revision`, so sessionChanged carries it."
    )
    async def pending_approval(self, info: Info) -> Approval | None:
        approval = await info.context.pending_approval(self.id)
        return Approval.from_domain(approval) if approval is not None else None

    @described.field(
        "The newest turn whatever its status; null before the first. Its start and "
        "end are new `revision`s (its output is not: follow turnOutput)."
    )
    async def current_turn(self, info: Info) -> Turn | None:
        turn = await info.context.current_turn(self.id)
        return Turn.from_domain(turn) if turn is not None else None

    @described.field(
        "The newest `last` turns, oldest first, in one unpaged list.",
        deprecation_reason="Use `turnsConnection(last: n)`, which pages with cursors.",
    )
    async def turns(
        self,
        info: Info,
        last: Annotated[
            int,
            strawberry.argument(
                description="How many of the newest turns: at most 200 (a larger value answers "
                "200); a negative one answers none."
            ),
        ] = 20,
    ) -> list[Turn]:
        last = domain.clamp_page(last)
        return [Turn.from_domain(t) for t in await info.context.turns(self.id, last)]

    @described.field(
        "The session's turns, oldest first (in the order they started), a page at a "
        "time (G3): `last: n` for the newest n, then `before: pageInfo.startCursor` for older "
        "ones. A page's RUNNING turn may end later (a new session `revision`)."
    )
    async def turns_connection(
        self,
        info: Info,
        first: First = None,
        after: After = None,
        last: Last = None,
        before: Before = None,
    ) -> Connection[Turn]:
        args = PageArgs(first=first, after=after, last=last, before=before)
        return await info.context.turns_connection(self.id, args)
