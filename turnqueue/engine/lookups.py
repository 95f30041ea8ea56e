"""The engine's reads: what a resolver may ask of a task, a session, its turns and its parts.

:class:`Lookups` is the read half of the engine's entry point (:class:`~turnqueue.engine.Engine`
adds the commands and the lifecycle). Every read is one read-only transaction (or one read
shared per event, ``SharedReads`` and ``EventReads``); none writes. The reads that take a
principal answer a session or task the principal does not own exactly like a missing one (S2);
the others are for a session's parts, which a resolver reaches only through an authorised
session.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from turnqueue.bus import Event, EventKind, Subscription, Watch
from turnqueue.domain import (
    AgentConversation,
    AgentProfile,
    Approval,
    CancellationStatus,
    Clarification,
    OutputChunk,
    OutputRecord,
    QueueStatus,
    Session,
    Task,
    Turn,
    TurnItem,
)
from turnqueue.engine.access import Access
from turnqueue.engine.agent_sessions import AgentSessions
from turnqueue.engine.core import Core
from turnqueue.engine.reads import (
    EventReads,
    Reads,
    SharedReads,
    Window,
    check_request,
    current_turn,
    fold_records,
    output_since,
    records_since,
)
from turnqueue.errors import InvalidInput, NotFound


class Lookups:
    def __init__(self, core: Core, agent_sessions: AgentSessions) -> None:
        self.core = core
        #: agent profiles and why a session's agent failed (A1, A2, A11)
        self.agent_sessions = agent_sessions
        self.shared_reads = SharedReads(core.bus, core.queue_status)
        self.event_reads = EventReads()  # O2: the streams' reads again, one per event
        self.reads: Reads = core.store  # batches and pages, for the GraphQL layer
        self.access = Access(core.store)  # S2

    # -- authorisation (S2, :class:`Access`) ----------------------------------------------------
    async def authorize_session(
        self, principal: str, session_id: str, field: str = "sessionId"
    ) -> Session:
        """The session, read now, when ``principal`` owns it; else NotFound (S2)."""
        return await self.access.session(principal, session_id, field)

    # -- reads ----------------------------------------------------------------------------------
    async def session(self, principal: str, session_id: str) -> Session | None:
        try:
            return await self.authorize_session(principal, session_id)
        except (NotFound, InvalidInput):
            return None

    async def task(self, principal: str, task_id: str) -> Task | None:
        try:
            return await self.access.task(principal, task_id)
        except (NotFound, InvalidInput):
            return None

    async def tasks(self, principal: str, first: int) -> list[Task]:
        return (await self.core.store.tasks_page(principal, Window(first=first))).values()

    async def queue_status(self, session_id: str) -> QueueStatus:
        return await self.core.queue_status(session_id)

    async def queue_status_after(self, session_id: str, revision: int) -> QueueStatus:
        """For subscribers: a snapshot including the event ``revision``, one read shared by
        every subscriber of the session."""
        return await self.shared_reads.queue_status_after(session_id, revision)

    async def cancellation(self, session_id: str) -> CancellationStatus:
        """C1, C2: pending and its revision, read together from the rows (any instance)."""
        return await self.core.cancellation(session_id)

    async def clarification(self, session_id: str) -> Clarification | None:
        async with self.core.store.read() as tx:
            view = await tx.view(session_id)
        return view.clarification if view else None

    async def turns_of(self, session_id: str, last: int) -> list[Turn]:
        """The session's newest ``last`` turns (at most 200), oldest first."""
        return (await self.core.store.turns_page(session_id, Window(last=last))).values()

    async def current_turn(self, session_id: str) -> Turn | None:
        return await current_turn(self.core.store, session_id)

    async def turn(self, turn_id: str) -> Turn | None:
        async with self.core.store.read() as tx:
            return await tx.get_turn(turn_id)

    async def approval(self, approval_id: str) -> Approval | None:
        """A6: an approval by id, answered or not (not authorised: for a session's parts)."""
        async with self.core.store.read() as tx:
            return await tx.get_approval(approval_id)

    async def next_turn(
        self, session_id: str, after_turn_id: str | None, *, event: Event | None = None
    ) -> Turn | None:
        """O2: the session's turn that started right after ``after_turn_id`` (None: its
        first), whatever its status, on any instance. ``event``: the event the caller handles
        (the read is shared with every stream reading the same for it, ``EventReads``)."""
        return await self.event_reads.read(
            event,
            ("next", session_id, after_turn_id),
            lambda: self.core.store.next_turn(session_id, after_turn_id),
        )

    async def output_since(
        self, session_id: str, turn_id: str | None, after: int, *, event: Event | None = None
    ) -> OutputChunk | None:
        """O2: a turn's output after character ``after``, from the log (any instance);
        ``event`` as for :meth:`next_turn`."""
        return await self.event_reads.read(
            event,
            ("output", session_id, turn_id, after),
            lambda: output_since(self.core, session_id, turn_id, after),
        )

    async def check_output_request(self, session_id: str, turn_id: str | None, after: int) -> None:
        """O2: InvalidInput for a negative offset, NotFound for a turn of another session."""
        await check_request(self.core, session_id, turn_id, after)

    def agents(self) -> list[AgentProfile]:
        """A1: every profile's name and type (never its command or environment)."""
        return self.agent_sessions.profiles()

    async def records_since(
        self, session_id: str, turn_id: str | None, after: int, *, event: Event | None = None
    ) -> tuple[Turn, list[OutputRecord]] | None:
        """A3/O2: a turn and its log's records from position ``after`` on (any instance);
        ``event`` as for :meth:`next_turn`."""
        return await self.event_reads.read(
            event,
            ("records", session_id, turn_id, after),
            lambda: records_since(self.core, session_id, turn_id, after),
        )

    async def turn_items(self, turn_id: str) -> tuple[TurnItem, ...]:
        """A3: a turn's items folded from its durable log (any instance, running or ended)."""
        async with self.core.store.read() as tx:
            return fold_records(await tx.read_records(turn_id))

    async def pending_approval(self, session_id: str) -> Approval | None:
        """A6: the session's approval waiting for an answer (its parts name it, R3)."""
        async with self.core.store.read() as tx:
            session = await tx.get_session(session_id)
            parts = session.parts if session is not None else None
            if parts is None or parts.pending_approval_id is None:
                return None
            return await tx.get_approval(parts.pending_approval_id)

    async def approvals_of_turn(self, turn_id: str) -> list[Approval]:
        """A6: every approval of a turn, with its answer."""
        async with self.core.store.read() as tx:
            return await tx.approvals_of_turn(turn_id)

    def agent_error(self, session_id: str) -> str | None:
        """A2: why the session's agent could not start (this process's memory)."""
        return self.agent_sessions.failure(session_id)[0]

    def agent_stderr(self, session_id: str) -> str | None:
        """A11: what that agent wrote to stderr, kept apart from the reason."""
        return self.agent_sessions.failure(session_id)[1]

    async def agent_conversation(self, session_id: str) -> AgentConversation | None:
        """A8: the session's agent conversation as its records keep it (any instance)."""
        async with self.core.store.read() as tx:
            return await tx.conversation(session_id)

    def subscribe(self, session_id: str, kinds: Sequence[EventKind]) -> Subscription:
        return self.core.bus.subscribe(session_id, kinds)

    def watch(
        self, session_id: str, kinds: Sequence[EventKind], callback: Callable[[Event], None]
    ) -> Watch:
        """``callback`` called with each event of the session and kinds (``EventBus.watch``);
        a queue event carries the status its transaction read when someone watches."""
        return self.core.bus.watch(session_id, kinds, callback)
