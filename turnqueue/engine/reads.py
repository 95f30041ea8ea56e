"""The engine's reads, on any instance (:class:`Lookups`, the read half of ``Engine``): the
store's batches and pages (``Engine.reads``, typed as the store's :class:`Reads`; its page types
are re-exported here so resolvers import no store module); a turn's output and log records from
where a client left off (O2, A3); the reads shared by the subscribers one event wakes
(:class:`EventReads`); and a turn's items (``engine/items.py``).

A turn this process runs is read from its runner (the committed text, exactly what its bus has
published); any other turn from the durable log (O1), whoever runs it, whether it still runs,
has ended, or its owner died: every chunk any instance has published is in the log by then
(``engine/outputlog.py``). ``turnItems``' offsets count records, text and items alike.

Hazard (order): the caller subscribes to the bus *before* it reads here and then drops what the
read covered; reading first would lose whatever committed between the read and the subscription.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, TypeVar

from turnqueue.bus import Event
from turnqueue.domain import (
    AgentConversation,
    AgentProfile,
    Approval,
    CancellationStatus,
    ItemKind,
    OutputChunk,
    OutputRecord,
    QueueStatus,
    Session,
    Task,
    Turn,
    TurnItem,
    TurnStatus,
)
from turnqueue.engine.access import Access
from turnqueue.engine.agent_sessions import AgentSessions
from turnqueue.engine.core import Core
from turnqueue.engine.items import fold_records
from turnqueue.errors import InvalidInput, NotFound
from turnqueue.store import Page, Reads, SessionKey, TaskKey, TurnKey, Window

__all__ = [
    "EventReads",
    "Lookups",
    "Page",
    "Reads",
    "SessionKey",
    "TaskKey",
    "TurnKey",
    "Window",
]

T = TypeVar("T")


class EventReads:
    """Reads made for one bus event (a queue event without its status, another instance's
    output, a later turn, an end), shared by every subscriber of this instance that makes the
    same read for it while it is under way: a thousand subscribers of one session make one read
    per event (P3). Only reads under way are kept: a subscriber that comes to the event later
    reads again. Callers that must see their own writes (mutation payloads) never use this path.

    Hazard (why reads are keyed by their event): a read may only serve a stream handling event
    E if it started after E was published, or it may miss what E announces. Its first caller
    was handling E, so it did; a stream handling another event reads for itself. An entry keeps
    its event, so the event's ``id`` is not reused while the read is under way."""

    def __init__(self) -> None:
        self._reads: dict[tuple[Hashable, ...], tuple[Event, asyncio.Future[Any]]] = {}

    async def read(
        self, event: Event | None, key: tuple[Hashable, ...], read: Callable[[], Awaitable[T]]
    ) -> T:
        """``read()``, or the same read under way for ``event`` (``key`` names what); with no
        event, ``read()`` alone."""
        if event is None:
            return await read()
        shared = (id(event), *key)
        kept = self._reads.get(shared)
        if kept is None:
            future: asyncio.Future[Any] = asyncio.ensure_future(read())
            self._reads[shared] = (event, future)
            future.add_done_callback(lambda done: self._ended(shared, done))
        else:
            future = kept[1]
        result: T = await asyncio.shield(future)
        return result

    def _ended(self, shared: tuple[Hashable, ...], future: asyncio.Future[Any]) -> None:
        del self._reads[shared]
        if not future.cancelled():
            future.exception()  # retrieved: callers that were cancelled meanwhile do not


class Lookups:
    """The read half of the engine's entry point; none writes. The reads that take a principal
    answer a session or task the principal does not own exactly like a missing one (S2); the
    others are for a session's parts, reached only through an authorised session."""

    def __init__(self, core: Core, agent_sessions: AgentSessions) -> None:
        self.core = core
        #: agent profiles and why a session's agent failed (A1, A2, A11)
        self.agent_sessions = agent_sessions
        self.event_reads = EventReads()  # O2, R3: the subscribers' reads again, one per event
        self.reads: Reads = core.store  # batches and pages, for the GraphQL layer
        self.access = Access(core.store)  # S2

    async def authorize_session(
        self, principal: str, session_id: str, field: str = "sessionId"
    ) -> Session:
        """The session, read now, when ``principal`` owns it; else NotFound (S2)."""
        return await self.access.session(principal, session_id, field)

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

    async def queue_status_after(self, session_id: str, event: Event) -> QueueStatus:
        """For subscribers: a snapshot including the change ``event`` announced (one read for
        every subscriber handling it, ``EventReads``)."""
        return await self.event_reads.read(
            event, ("queue", session_id), lambda: self.core.queue_status(session_id)
        )

    async def cancellation(self, session_id: str) -> CancellationStatus:
        """C1, C2: pending and its revision, read together from the rows (any instance)."""
        return await self.core.cancellation(session_id)

    async def turns_of(self, session_id: str, last: int) -> list[Turn]:
        """The session's newest ``last`` turns (at most 200), oldest first."""
        return (await self.core.store.turns_page(session_id, Window(last=last))).values()

    async def current_turn(self, session_id: str) -> Turn | None:
        """The session's newest turn whatever its status; None before its first."""
        newest = await self.turns_of(session_id, 1)
        return newest[0] if newest else None

    async def turn(self, turn_id: str) -> Turn | None:
        async with self.core.store.read() as tx:
            return await tx.get_turn(turn_id)

    async def approval(self, approval_id: str) -> Approval | None:
        """A6: an approval by id, answered or not (not authorised: for a session's parts)."""
        async with self.core.store.read() as tx:
            return await tx.get_approval(approval_id)

    async def _turn_of(self, session_id: str, turn_id: str | None) -> Turn | None:
        """The turn named (None: the session's current one); NotFound for another session's."""
        if turn_id is None:
            return await self.current_turn(session_id)
        turn = await self.turn(turn_id)
        if turn is None or turn.session_id != session_id:
            raise NotFound("no such turn in this session")
        return turn

    async def check_output_request(self, session_id: str, turn_id: str | None, after: int) -> None:
        """O2, before a stream exists: InvalidInput for a negative offset, NotFound for a turn
        of another session."""
        _check_offset(after)
        runner = self.core.runners.get(session_id)
        if turn_id is not None and (runner is None or runner.turn.id != turn_id):
            await self._turn_of(session_id, turn_id)

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
        """O2: the output of ``turn_id`` (None: the session's current turn) after character
        ``after``: one chunk at offset ``after`` (clamped to the output's length), ``done`` when
        the turn has ended; None before the session's first turn. ``event``: as for
        :meth:`next_turn`."""
        _check_offset(after)
        return await self.event_reads.read(
            event,
            ("output", session_id, turn_id, after),
            lambda: self._output_since(session_id, turn_id, after),
        )

    async def _output_since(
        self, session_id: str, turn_id: str | None, after: int
    ) -> OutputChunk | None:
        runner = self.core.runners.get(session_id)
        if runner is not None and turn_id in (None, runner.turn.id):
            return runner.snapshot(after)
        turn = await self._turn_of(session_id, turn_id)
        if turn is None:
            return None
        # The turn first, then its log: a turn read as ended has its whole log (the end appends
        # the last batch in its own transaction, and an ended turn's log never changes). One
        # read as RUNNING may end meanwhile; its ``done`` then reaches the caller, who
        # subscribed first.
        async with self.core.store.read() as tx:
            records = await tx.read_output(turn.id, after)
        ended = turn.status is not TurnStatus.RUNNING
        if records:
            start = min(after, records[0].offset + len(records[0].text))
            start = max(start, records[0].offset)
            text = "".join(r.text for r in records)[start - records[0].offset :]
        elif ended:
            # A turn that ended before the log existed (migration 0006) keeps only ``output``.
            start = min(after, len(turn.output))
            text = turn.output[start:]
        else:
            start, text = after, ""
        return OutputChunk(session_id, turn.id, start, text, ended, turn.status)

    async def records_since(
        self, session_id: str, turn_id: str | None, after: int, *, event: Event | None = None
    ) -> tuple[Turn, list[OutputRecord]] | None:
        """A3/O2: the turn (None: the session's current one) and its log's records from
        position ``after`` on, read turn first (a turn read as ended has its whole log); None
        before the session's first turn. ``event``: as for :meth:`next_turn`."""
        _check_offset(after)
        return await self.event_reads.read(
            event,
            ("records", session_id, turn_id, after),
            lambda: self._records_since(session_id, turn_id, after),
        )

    async def _records_since(
        self, session_id: str, turn_id: str | None, after: int
    ) -> tuple[Turn, list[OutputRecord]] | None:
        turn = await self._turn_of(session_id, turn_id)
        if turn is None:
            return None
        async with self.core.store.read() as tx:
            records = await tx.read_records(turn.id, after - 1)
        if not records and after == 0 and turn.status is not TurnStatus.RUNNING and turn.output:
            # A turn that ended before the log existed (migration 0006) keeps only ``output``.
            records = [OutputRecord(turn.id, 0, 0, ItemKind.MESSAGE, turn.output)]
        return turn, records

    async def turn_items(self, turn_id: str) -> tuple[TurnItem, ...]:
        """A3: a turn's items folded from its durable log (any instance, running or ended)."""
        async with self.core.store.read() as tx:
            return fold_records(await tx.read_records(turn_id))

    async def approvals_of_turn(self, turn_id: str) -> list[Approval]:
        """A6: every approval of a turn, with its answer."""
        async with self.core.store.read() as tx:
            return await tx.approvals_of_turn(turn_id)

    def agents(self) -> list[AgentProfile]:
        """A1: every profile's name and type (never its command or environment)."""
        return self.agent_sessions.profiles()

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


def _check_offset(after: int) -> None:
    if after < 0:
        raise InvalidInput("afterOffset must be 0 or more", ["afterOffset"])
