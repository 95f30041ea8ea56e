"""Subscription roots (SPEC §7, R3): authorise, then snapshot first, then every newer state.

Each stream subscribes to the bus *before* it reads its snapshot, so no change can fall between
the two, then yields a state only when its revision is larger than the last one yielded. The
queue and cancellation streams push the state their events carry (``resolvers/feeds.py``);
``sessionChanged`` reads the session again on each event; the output streams read the durable
log. A subscriber that fell behind (or a bus that lost events) ends with a ``RESYNC`` error.

Authorisation runs in the resolver coroutine, before the stream exists, so an unknown or foreign
session is answered with an ``error`` message (``extensions.code`` ``NOT_FOUND``, S2).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Mapping
from functools import partial
from typing import Annotated, TypeVar

import strawberry
from graphql import GraphQLError

from turnqueue import domain
from turnqueue.bus import EventKind
from turnqueue.errors import UserFacingError
from turnqueue.resolvers.context import Context
from turnqueue.resolvers.feeds import (
    CancellationFeed,
    Emit,
    Fail,
    Feed,
    QueueFeed,
    T,
    next_event,
    states,
)
from turnqueue.resolvers.resume import Start, last_revisions, start_of
from turnqueue.resolvers.revisions import Snapshot, fields
from turnqueue.resolvers.turn_streams import items_stream, output_stream
from turnqueue.schema import fields as described
from turnqueue.schema.queue import CancellationStatus, QueueStatus
from turnqueue.schema.sessions import Session
from turnqueue.schema.turns import TurnItemsChunk, TurnOutputChunk

Info = strawberry.Info[Context, None]
V = TypeVar("V")
#: ``turnId`` of turnOutput and turnItems: the turn whose log is read.
TurnToRead = Annotated[
    strawberry.ID | None,
    strawberry.argument(
        description="The turn to read (any of the session's turns); default: the "
        "current one, then the following ones."
    ),
]

SessionId = Annotated[
    strawberry.ID, strawberry.argument(description="The session (one of the caller's).")
]


async def _answer(call: Awaitable[V]) -> V:
    """An engine call whose refusal is a GraphQL error with its code (S2: NOT_FOUND)."""
    try:
        return await call
    except UserFacingError as e:
        raise GraphQLError(e.message, extensions={"code": e.code.value}) from None


def _authorize(ctx: Context, session_id: str) -> Awaitable[domain.Session]:
    return _answer(ctx.engine.authorize_session(ctx.require_principal(), session_id))


async def _session_stream(
    ctx: Context, session_id: str, had: tuple[int, ...] | None
) -> AsyncGenerator[Session, None]:
    """``had``: the revisions a reconnect's ``Last-Event-ID`` names (O3): only newer states."""
    sub = ctx.engine.bus.subscribe(session_id, SESSION_SNAPSHOT.watches)
    try:
        last_session, last_cancellation = had or (-1, -1)
        cancellation = await ctx.engine.cancellation(session_id)
        while True:
            session = await _authorize(ctx, session_id)
            if session.revision > last_session or cancellation.revision > last_cancellation:
                last_session = max(last_session, session.revision)
                last_cancellation = max(last_cancellation, cancellation.revision)
                # C6: the Session yielded carries exactly the cancellation compared here.
                ctx.renew_loaders().cancellation.prime(session_id, cancellation)
                ctx.event_id = f"{session.revision}:{cancellation.revision}"  # O3: the SSE id
                yield Session.from_domain(session)
            event = await next_event(sub)
            # C6: a transition is shown as its event carried it. Reading the flag now instead
            # would skip "pending" whenever the cancel ends before the session read returns.
            carried = event.cancellation
            if carried is None and event.kind is EventKind.CANCELLATION:
                carried = await ctx.engine.cancellation(session_id)
            if carried is not None and carried.revision > cancellation.revision:
                cancellation = carried
    finally:
        sub.close()


async def open_feed(
    kind: type[Feed[T]], ctx: Context, session_id: str, emit: Emit[T], fail: Fail
) -> Feed[T]:
    """The session's ``kind`` feed, open; authorised first: a refusal raises the ``NOT_FOUND``
    GraphQLError (S2) before anything is read."""
    await _authorize(ctx, session_id)
    feed = kind(ctx, session_id, emit, fail)
    await feed.open()
    return feed


async def _open_states(
    kind: type[Feed[T]], ctx: Context, session_id: str
) -> AsyncGenerator[T, None]:
    await _authorize(ctx, session_id)
    (had,) = last_revisions(ctx, 1) or (-1,)  # O3: a reconnect gets only newer states
    return states(kind, ctx, session_id, had, ctx.engine.bus.buffer_size)


async def _open_session(ctx: Context, session_id: str) -> AsyncGenerator[Session, None]:
    await _authorize(ctx, session_id)
    return _session_stream(ctx, session_id, last_revisions(ctx, 2))


#: Q13: a QueueStatus is covered by the queue revision as a whole.
QUEUE_SNAPSHOT = Snapshot(
    "queueStatusChanged",
    watches=(EventKind.QUEUE,),
    payload=fields(
        *("id", "sessionId", "autoRun", "pauseReason", "heldBy", "count", "max", "revision"),
        entries=fields(
            *("id", "sessionId", "position", "content", "source", "queuedAt"),
            "clientMessageId",
        ),
    ),
    open=partial(_open_states, QueueFeed),
    feed=QueueFeed,
)


#: C2: a CancellationStatus is covered by the cancellation revision as a whole.
_CANCELLATION = fields("id", "sessionId", "pending", "revision")

#: A turn's start and end are session revisions; its output (R1), items (A3) and approvals are
#: not.
_TURN = fields(
    *("id", "sessionId", "prompt", "source", "status", "error", "startedAt", "endedAt"),
    *("errorKind", "agentStderr", "clientMessageId", "queueEntryId"),
    still=("output", "items", "itemsConnection", "approvals"),
)

#: Yields on a session or a cancellation revision: the session's own row, its clarification,
#: its turns' start and end, and its cancellation move with those. Its queue, task, agent error
#: and agent conversation do not; nor, for sharing, do the pending approval and the turns' pages
#: (never grouped).
SESSION_SNAPSHOT = Snapshot(
    "sessionChanged",
    watches=(EventKind.SESSION, EventKind.CANCELLATION),
    payload=fields(
        *("id", "taskId", "agent", "state", "revision", "promptable", "createdAt", "updatedAt"),
        *("cancellationPending", "cancellationRevision"),
        cancellation=_CANCELLATION,
        clarification=fields("id", "question", "askedAt"),
        currentTurn=_TURN,
        turns=_TURN,
        still=(
            *("task", "autoRun", "queue", "agentError", "agentStderr", "pendingApproval"),
            *("turnsConnection", "agentConversation"),
        ),
    ),
    open=_open_session,
)


CANCELLATION_SNAPSHOT = Snapshot(
    "cancellationChanged",
    watches=(EventKind.CANCELLATION,),
    payload=_CANCELLATION,
    open=partial(_open_states, CancellationFeed),
    feed=CancellationFeed,
)


#: The snapshot subscriptions by root field: the ones the fan-out may group (turnOutput's chunks
#: are deltas, not states: it has none).
SNAPSHOTS: Mapping[str, Snapshot] = {
    s.root: s for s in (QUEUE_SNAPSHOT, SESSION_SNAPSHOT, CANCELLATION_SNAPSHOT)
}


async def _start(
    ctx: Context, session_id: str, turn_id: strawberry.ID | None, after_offset: int | None
) -> Start:
    """Where turnOutput or turnItems starts (O2, O3): authorised, checked, and a reconnect's
    ``Last-Event-ID`` over the arguments."""
    await _authorize(ctx, session_id)
    start = start_of(ctx, str(turn_id) if turn_id is not None else None, after_offset)
    await _answer(ctx.engine.check_output_request(session_id, start.turn_id, start.after))
    return start


@strawberry.type(
    description="Live state of one session over graphql-transport-ws or GraphQL over SSE "
    "(graphql-sse; every event has an SSE `id`, and a reconnect's `Last-Event-ID` is sent only "
    "what it did not have, O3). Each subscription sends the current snapshot first, then "
    "every change, each with its revision (R3): keep the highest per session and kind and "
    "ignore lower ones. A subscriber that falls behind gets an error with `extensions.code` "
    "RESYNC and the stream ends: subscribe again for a fresh "
    "snapshot. A session that is not the caller's is an error with code NOT_FOUND (S2)."
)
class Subscription:
    @described.subscription(
        "The session's cancellation state: the current one first, then each transition "
        "of `pending` (C1, C2), ordered by `revision`."
    )
    async def cancellation_changed(
        self, info: Info, session_id: SessionId
    ) -> AsyncGenerator[CancellationStatus, None]:
        return await _open_states(CancellationFeed, info.context, session_id)

    @described.subscription(
        "The session's queue: the current status first, then each new `revision` (Q13)."
    )
    async def queue_status_changed(
        self, info: Info, session_id: SessionId
    ) -> AsyncGenerator[QueueStatus, None]:
        return await _open_states(QueueFeed, info.context, session_id)

    @described.subscription(
        "The session: its current state first, then each new session `revision` or "
        "cancellation transition (ordered by `revision` and `cancellationRevision`)."
    )
    async def session_changed(
        self, info: Info, session_id: SessionId
    ) -> AsyncGenerator[Session, None]:
        return await _open_session(info.context, session_id)

    @described.subscription(
        "A turn's output (O2): first what follows `afterOffset` (the whole output so far "
        "without it, from offset 0), read from the durable log, then each new chunk as the "
        "agent streams it, with no gap and no duplicate; a turn's last message has "
        "`done: true` and its status. Without `turnId` it follows the session's current turn "
        "and then the later ones (a new `turnId` starts again at offset 0); with `turnId` it "
        "ends after that turn's end. Over SSE each event's `id` is the place right after it, "
        "`<turnId>:<offset after it>` (`:done` added for a turn's last message), and a "
        "reconnect's `Last-Event-ID` resumes right after it: the rest of that turn and, without "
        "`turnId`, each later turn (O3)."
    )
    async def turn_output(
        self,
        info: Info,
        session_id: SessionId,
        turn_id: TurnToRead = None,
        after_offset: Annotated[
            int | None,
            strawberry.argument(
                description="The number of output characters already received (the last "
                "chunk's `offset` plus the length of its `text`): only what follows is sent."
            ),
        ] = None,
    ) -> AsyncGenerator[TurnOutputChunk, None]:
        start = await _start(info.context, session_id, turn_id, after_offset)
        return output_stream(info.context, session_id, start)

    @described.subscription(
        "A turn's structured output (A3, O2): its items (messages, thoughts, tool calls with "
        "their updates, plans, raw agent updates) with their log offsets. First what follows "
        "`afterOffset` (everything from offset 0 without it), read from the durable log, then "
        "each new batch as it is logged, with no gap and no duplicate, on any instance, for a "
        "running turn, an ended one or one whose server died; a turn's last message has "
        "`done: true` and its status. Without `turnId` it follows the session's current turn "
        "and then the later ones; with `turnId` it ends after that turn's end. Over SSE each "
        "event's `id` is `<turnId>:<nextOffset>` (`:done` added for a turn's last message), and "
        "a reconnect's `Last-Event-ID` resumes right after it, as for turnOutput (O3). Offsets "
        "count log entries, not characters (see TurnItemsChunk)."
    )
    async def turn_items(
        self,
        info: Info,
        session_id: SessionId,
        turn_id: TurnToRead = None,
        after_offset: Annotated[
            int | None,
            strawberry.argument(
                description="The log position already received (the last message's "
                "`nextOffset`): only what follows is sent."
            ),
        ] = None,
    ) -> AsyncGenerator[TurnItemsChunk, None]:
        start = await _start(info.context, session_id, turn_id, after_offset)
        return items_stream(info.context, session_id, start)
