"""Object types of a task and its sessions (SPEC §7), each built from its domain value.

Their fields beyond the row resolve lazily through the context's batched readers (:mod:`reads`).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Annotated

import strawberry

from turnqueue import domain
from turnqueue.domain import SessionState
from turnqueue.schema import fields as described
from turnqueue.schema.connections import Connection, page_count
from turnqueue.schema.fields import plain
from turnqueue.schema.items import AgentConversation, Approval
from turnqueue.schema.queue import CancellationStatus, Clarification, QueueStatus
from turnqueue.schema.reads import Info, paged
from turnqueue.schema.scalars import Revision
from turnqueue.schema.turns import Turn


@strawberry.type(
    description="A unit of work a user opened. It runs in one session at a time "
    "(`currentSession`); a workflow step with `new_session_on_enter` hands it to a new session "
    "(W3). Only the principal that created it can see it (S2)."
)
class Task(described.Copied[domain.Task]):
    id: strawberry.ID = plain("The task's id (a UUID).")
    title: str = plain("The title given to createTask (1-500 characters).")
    workflow_step: str = plain(
        "The workflow step the task is in: the workflow's first step at creation, then changed by "
        "moveTask or by a step's `on_turn_complete` action (W1). No revision orders it: read the "
        "task again after `sessionChanged` reports a turn's end."
    )
    created_at: datetime = plain("When the task was created.")
    current_session_id: strawberry.Private[str | None]

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

    sessions_connection: Connection[Session] = paged(
        "The task's sessions, oldest first (by creation time, then id), a page at a time (G3).",
        lambda reads, task, args: reads.sessions_connection(task.id, args),
    )


@strawberry.type(
    description="A conversation with one agent, where the task's turns run and its queue "
    "waits. Three revisions order what a client sees of it (R1): `revision` (state, turns, "
    "clarification), `queue.revision` (the queue) and `cancellationRevision` (cancellation). "
    "Keep the highest of each and ignore anything lower (R3). Every Session the API returns "
    "carries its current cancellation state (C6)."
)
class Session(described.Copied[domain.Session]):
    id: strawberry.ID = plain("The session's id (a UUID).")
    agent: str = plain(
        "The agent profile that answers its turns (`scripted`, `command`, ...), chosen by "
        "createTask."
    )
    state: SessionState = plain(
        "Where the session is in its life; each change is a new `revision`."
    )
    revision: Revision = plain(
        "The session's own revision (R1): durable, it grows with every change of state, each "
        "turn's start and end, and each clarification asked or cleared. Larger is newer; equal is "
        "the same state. Streamed output bumps no revision."
    )
    promptable: bool = plain(
        "Whether the session takes a prompt now: state WAITING_FOR_INPUT, or COMPLETED (a prompt "
        "reopens it)."
    )
    created_at: datetime = plain("When the session was created.")
    updated_at: datetime = plain("When the session last changed (a new `revision`).")
    task_id: strawberry.ID = plain("The id of its task.")
    #: R3: the clarification, pending approval and current turn as ``revision`` shows them,
    #: read with it (None: the session came from a write; they are read by id then)
    parts: strawberry.Private[domain.SessionParts | None] = None

    async def _parts(self, info: Info) -> domain.SessionParts | None:
        if self.parts is not None:
            return self.parts
        session = await info.context.session(self.id)
        return session.parts if session is not None else None

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
        parts = await self._parts(info)
        clarification = parts.clarification if parts is not None else None
        return Clarification.from_domain(clarification) if clarification is not None else None

    @described.field(
        "Why the session's agent could not start (A2) when its state is FAILED, in the "
        "agent's own words where it gave any (A11: an authentication refusal lists the "
        "agent's methods); null otherwise (kept in the memory of the instance that started "
        "it)."
    )
    def agent_error(self, info: Info) -> str | None:
        return info.context.agent_error(self.id)

    @described.field(
        "What the session's agent wrote to its stderr before its start failed (the last "
        "4 KiB; A11), kept apart from `agentError`; null when the start did not fail or it "
        "wrote nothing (kept like `agentError`)."
    )
    def agent_stderr(self, info: Info) -> str | None:
        return info.context.agent_stderr(self.id)

    @described.field(
        "The agent's own session behind this one (A8): its id, what the agent advertised, and "
        "whether its last start resumed, loaded or opened it anew; null for sessions whose "
        "profile is not `acp`, and before their agent first started. Read from the session's "
        "records (any instance); no revision orders it."
    )
    async def agent_conversation(self, info: Info) -> AgentConversation | None:
        found = await info.context.agent_conversation(self.id)
        return AgentConversation.from_domain(found) if found is not None else None

    @described.field(
        "The agent's permission request waiting for answerApproval (A6); null when none. A "
        "change is a new `revision`, so sessionChanged carries it."
    )
    async def pending_approval(self, info: Info) -> Approval | None:
        parts = await self._parts(info)
        if parts is None or parts.pending_approval_id is None:
            return None
        approval = await info.context.approval(parts.pending_approval_id)
        if approval is None:
            return None
        # As this revision shows it: still waiting (a later answer is a later revision).
        return Approval.from_domain(
            replace(
                approval,
                outcome=domain.ApprovalOutcome.PENDING,
                option_id=None,
                answered_by=None,
                answered_at=None,
            )
        )

    @described.field(
        "The newest turn whatever its status; null before the first. Its start and "
        "end are new `revision`s (its output is not: follow turnOutput)."
    )
    async def current_turn(self, info: Info) -> Turn | None:
        parts = await self._parts(info)
        at = parts.current_turn if parts is not None else None
        turn = await info.context.turn(at.id) if at is not None else None
        if at is None or turn is None:
            return None
        # Its status as this revision shows it (its end is a later revision; its output is
        # not a revision's: it may be ahead, as turnOutput is).
        return Turn.from_domain(
            replace(turn, status=at.status, error=at.error, ended_at=at.ended_at)
        )

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
                "200); a negative one is an error with `extensions.code` INVALID_INPUT."
            ),
        ] = 20,
    ) -> list[Turn]:
        last = page_count("last", last)
        return [Turn.from_domain(t) for t in await info.context.turns(self.id, last)]

    turns_connection: Connection[Turn] = paged(
        "The session's turns, oldest first (in the order they started), a page at a "
        "time (G3): `last: n` for the newest n, then `before: pageInfo.startCursor` for older "
        "ones. A page's RUNNING turn may end later (a new session `revision`).",
        lambda reads, session, args: reads.turns_connection(session.id, args),
    )
