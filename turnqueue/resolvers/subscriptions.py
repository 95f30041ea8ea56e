"""Subscription roots (SPEC §7, R3): authorise, then snapshot first, then every newer state.

Each stream subscribes to the bus *before* it reads its snapshot, so no change can fall between
the two; afterwards it re-reads a fresh snapshot on every event and yields it only when its
revision is larger than the last one yielded. A subscriber that fell behind (or a bus that lost
events) ends with a ``RESYNC`` error: the client resubscribes and gets a fresh snapshot. The bus
subscription is closed in ``finally`` whatever ends the stream.

Authorisation runs in the resolver coroutine, before the stream exists, so an unknown or foreign
session is answered with an ``error`` message (``extensions.code`` ``NOT_FOUND``, S2).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from typing import Annotated, Any

import strawberry
from graphql import GraphQLError
from starlette.requests import Request

from turnqueue import domain
from turnqueue.bus import Event, EventKind, SubscriberLagged
from turnqueue.bus import Subscription as BusSubscription
from turnqueue.errors import ErrorCode, UserFacingError
from turnqueue.resolvers.context import Context
from turnqueue.resolvers.feeds import (
    CancellationFeed,
    Emit,
    Fail,
    Feed,
    FeedOpener,
    QueueFeed,
    T,
    resync_error,
    states,
)
from turnqueue.resolvers.item_stream import items_stream
from turnqueue.resolvers.revisions import Snapshot, fields
from turnqueue.schema import fields as described
from turnqueue.schema.types import (
    CancellationStatus,
    QueueStatus,
    Session,
    TurnItemsChunk,
    TurnOutputChunk,
)

Info = strawberry.Info[Context, None]
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


async def _authorize(ctx: Context, session_id: str) -> domain.Session:
    try:
        return await ctx.engine.authorize_session(ctx.require_principal(), session_id)
    except UserFacingError as e:
        raise GraphQLError(e.message, extensions={"code": e.code.value}) from None


async def _next_event(sub: BusSubscription) -> Event:
    try:
        event = await sub.get()
    except SubscriberLagged:
        raise resync_error() from None
    if event.kind is EventKind.RESYNC:
        raise resync_error()
    return event


#: Q13: a QueueStatus is covered by the queue revision as a whole.
QUEUE_SNAPSHOT = Snapshot(
    "queueStatusChanged",
    watches=(EventKind.QUEUE,),
    payload=fields(
        *("id", "sessionId", "autoRun", "pauseReason", "heldBy", "count", "max", "revision"),
        entries=fields("id", "sessionId", "position", "content", "source", "queuedAt"),
    ),
)


#: C2: a CancellationStatus is covered by the cancellation revision as a whole.
_CANCELLATION = fields("id", "sessionId", "pending", "revision")

#: A turn's start and end are session revisions; its output (R1), items (A3) and approvals are
#: not.
_TURN = fields(
    *("id", "sessionId", "prompt", "source", "status", "error", "startedAt", "endedAt"),
    *("errorKind", "agentStderr"),
    still=("output", "items", "itemsConnection", "approvals"),
)

#: Yields on a session or a cancellation revision: the session's own row, its clarification,
#: its turns' start and end, and its cancellation move with those. Its queue, task and agent
#: error do not; nor, for sharing, do the pending approval and the turns' pages (never grouped).
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
            "turnsConnection",
        ),
    ),
)


async def _session_stream(ctx: Context, session_id: str) -> AsyncGenerator[Session, None]:
    sub = ctx.engine.subscribe(session_id, SESSION_SNAPSHOT.watches)
    try:
        last_session, last_cancellation = -1, -1
        cancellation = ctx.engine.cancellation(session_id)
        while True:
            session = await _authorize(ctx, session_id)
            if session.revision > last_session or cancellation.revision > last_cancellation:
                last_session = max(last_session, session.revision)
                last_cancellation = max(last_cancellation, cancellation.revision)
                # C6: the Session yielded carries exactly the cancellation compared here.
                ctx.renew_loaders().cancellation.prime(session_id, cancellation)
                ctx.event_id = f"{session.revision}:{cancellation.revision}"  # O3: the SSE id
                yield Session.from_domain(session)
            event = await _next_event(sub)
            # C6: a transition is shown as its event carried it. Reading the flag now instead
            # would skip "pending" whenever the cancel ends before the session read returns.
            carried = event.cancellation
            if carried is None and event.kind is EventKind.CANCELLATION:
                carried = ctx.engine.cancellation(session_id)
            if carried is not None and carried.revision > cancellation.revision:
                cancellation = carried
    finally:
        sub.close()


CANCELLATION_SNAPSHOT = Snapshot(
    "cancellationChanged", watches=(EventKind.CANCELLATION,), payload=_CANCELLATION
)


#: The snapshot subscriptions by root field: the ones the fan-out may group (turnOutput's chunks
#: are deltas, not states: it has none).
SNAPSHOTS: Mapping[str, Snapshot] = {
    s.root: s for s in (QUEUE_SNAPSHOT, SESSION_SNAPSHOT, CANCELLATION_SNAPSHOT)
}


def _opener(kind: type[Feed[T]], *, authorize: bool = False) -> FeedOpener[T]:
    """Opens a ``kind`` feed; ``authorize``: checks the session first (else the caller did)."""

    async def open_feed(ctx: Context, session_id: str, emit: Emit[T], fail: Fail) -> Feed[T]:
        if authorize:
            await _authorize(ctx, session_id)
        feed = kind(ctx, session_id, emit, fail)
        await feed.open()
        return feed

    return open_feed


#: The snapshot subscriptions whose states are pushed (``resolvers/feeds.py``), by root field,
#: opened for a session (authorised first: a refusal raises the ``NOT_FOUND`` GraphQLError, S2,
#: before anything is read). The fan-out renders their states as they come, without a task.
FEEDS: Mapping[str, FeedOpener[Any]] = {
    QUEUE_SNAPSHOT.root: _opener(QueueFeed, authorize=True),
    CANCELLATION_SNAPSHOT.root: _opener(CancellationFeed, authorize=True),
}


async def open_queue_stream(ctx: Context, session_id: str) -> AsyncGenerator[QueueStatus, None]:
    await _authorize(ctx, session_id)
    return states(_opener(QueueFeed), ctx, session_id, ctx.engine.bus.buffer_size)


async def open_session_stream(ctx: Context, session_id: str) -> AsyncGenerator[Session, None]:
    await _authorize(ctx, session_id)
    return _session_stream(ctx, session_id)


async def open_cancellation_stream(
    ctx: Context, session_id: str
) -> AsyncGenerator[CancellationStatus, None]:
    await _authorize(ctx, session_id)
    return states(_opener(CancellationFeed), ctx, session_id, ctx.engine.bus.buffer_size)


#: Each snapshot subscription's stream, by root field, opened for a session (authorised first:
#: a refusal raises the ``NOT_FOUND`` GraphQLError, S2): what its resolver returns, and what the
#: fan-out runs for an operation it renders itself (``turnqueue.render``).
StreamOpener = Callable[[Context, str], Awaitable[AsyncIterator[object]]]
STREAMS: Mapping[str, StreamOpener] = {
    QUEUE_SNAPSHOT.root: open_queue_stream,
    SESSION_SNAPSHOT.root: open_session_stream,
    CANCELLATION_SNAPSHOT.root: open_cancellation_stream,
}


def _unseen(
    chunk: domain.OutputChunk, seen: dict[str, tuple[int, bool]]
) -> domain.OutputChunk | None:
    """The part of ``chunk`` not yet yielded (a chunk may also be in the snapshot)."""
    end, done = seen.get(chunk.turn_id, (0, False))
    if done:
        return None
    chunk_end = chunk.offset + len(chunk.text)
    if chunk_end <= end and not chunk.done:
        return None
    if chunk.offset < end:
        text = chunk.text[end - chunk.offset :]
        chunk = domain.OutputChunk(
            chunk.session_id, chunk.turn_id, end, text, chunk.done, chunk.status
        )
    seen[chunk.turn_id] = (max(end, chunk_end), chunk.done)
    # A stream that follows a session's turns for hours must not keep one entry per turn (P7):
    # a session's turns run one after another, so only the newest few can still send chunks.
    while len(seen) > SEEN_TURNS:
        del seen[next(iter(seen))]
    return chunk


#: Turns a turnOutput stream remembers its place in (the newest; see ``_unseen``).
SEEN_TURNS = 4


async def _newer_turns(
    ctx: Context, session_id: str, seen: dict[str, tuple[int, bool]]
) -> list[domain.OutputChunk]:
    """The output of the session's newest turns that started after the newest one in ``seen``
    (every one of them when it is empty), oldest first, each from offset 0, from the log."""
    recent = await ctx.engine.turns_of(session_id, SEEN_TURNS)
    last = max((i for i, turn in enumerate(recent) if turn.id in seen), default=-1)
    found = []
    for turn in recent[last + 1 :]:
        if (chunk := await ctx.engine.output_since(session_id, turn.id, 0)) is not None:
            found.append(chunk)
    return found


def output_event_id(chunk: domain.OutputChunk) -> str:
    """O3: a turnOutput event's SSE ``id``: ``<turn id>:<offset after the chunk>``, exactly what
    a reconnect resumes from (``Last-Event-ID``, or ``turnId`` and ``afterOffset``)."""
    return f"{chunk.turn_id}:{chunk.offset + len(chunk.text)}"


def _last_event_id(ctx: Context) -> tuple[str, int] | None:
    """An SSE reconnect's ``Last-Event-ID`` (O3), when it names a turnOutput or turnItems
    position (``<turnId>:<offset>``; each counts in its own unit)."""
    request = ctx.request
    header = request.headers.get("last-event-id") if isinstance(request, Request) else None
    if not header:
        return None
    turn_id, _, offset = header.strip().rpartition(":")
    if not turn_id or not offset.isdigit():
        raise GraphQLError(
            "Last-Event-ID is not a turnOutput or turnItems event id (<turnId>:<offset>)",
            extensions={"code": ErrorCode.INVALID_INPUT.value},
        )
    return turn_id, int(offset)


async def _resume_point(
    ctx: Context, session_id: str, turn_id: strawberry.ID | None, after_offset: int | None
) -> tuple[str | None, int]:
    """Where turnOutput or turnItems starts (O2, O3): authorised, checked, and a reconnect's
    ``Last-Event-ID`` over the arguments."""
    await _authorize(ctx, session_id)
    resumed = _last_event_id(ctx)
    turn = str(turn_id) if turn_id is not None else None
    after = after_offset or 0
    if resumed is not None:
        turn, after = resumed
    try:
        await ctx.engine.check_output_request(session_id, turn, after)
    except UserFacingError as e:
        raise GraphQLError(e.message, extensions={"code": e.code.value}) from None
    return turn, after


async def _output_stream(
    ctx: Context, session_id: str, turn_id: str | None, after: int
) -> AsyncGenerator[TurnOutputChunk, None]:
    """O2: what follows ``after`` from the log, then live chunks without what the read covered.
    With ``turn_id`` the stream ends after that turn's ``done``; without it, it follows the
    session's later turns too (as before O2).

    Hazard (order): subscribe first, then read. A chunk is published only after its batch
    committed, so what the read missed is still to come on ``sub``; what both carry is dropped
    by offset (``_unseen``)."""
    sub = ctx.engine.subscribe(session_id, [EventKind.OUTPUT, EventKind.SESSION])
    try:
        first = await ctx.engine.output_since(session_id, turn_id, after)
        seen: dict[str, tuple[int, bool]] = {}
        following: str | None = None  # the turn whose ``done`` this stream has not sent yet

        def out(chunk: domain.OutputChunk) -> TurnOutputChunk:
            nonlocal following
            following = None if chunk.done else chunk.turn_id
            ctx.event_id = output_event_id(chunk)
            return TurnOutputChunk.from_domain(chunk)

        if first is not None:
            seen[first.turn_id] = (first.offset, False)  # resume: nothing before afterOffset
            # Followed from here, even when nothing is new yet (a resume at the log's end):
            # its ``done`` may come only from a re-read (below).
            following = None if first.done else first.turn_id
            if (chunk := _unseen(first, seen)) is not None:
                yield out(chunk)
                if chunk.done and turn_id is not None:
                    return
        while True:
            event = await _next_event(sub)
            if event.kind is EventKind.SESSION:
                # An end recorded without this process's runner (recovery after the owner
                # died, M6; an agent gone, C5) sends no ``done`` here: the turn is read again.
                if following is not None:
                    end = seen.get(following, (0, False))[0]
                    rest = await ctx.engine.output_since(session_id, following, end)
                    if rest is not None and rest.done and (chunk := _unseen(rest, seen)):
                        yield out(chunk)
                        if turn_id is not None:
                            return
                elif turn_id is None:
                    # Hazard (M4, M6): another instance's turn reaches this stream by its
                    # relayed chunks only. One whose owner died before relaying any (its log
                    # has them, or it had none yet) would never be sent, nor its end: so on a
                    # session event (a turn started or ended, a recovery), the turns newer than
                    # the last one this stream has are read from the log.
                    for missed in await _newer_turns(ctx, session_id, seen):
                        if (chunk := _unseen(missed, seen)) is not None:
                            yield out(chunk)
                continue
            if event.chunk is None or (turn_id is not None and event.chunk.turn_id != turn_id):
                continue
            if event.chunk.turn_id not in seen and event.chunk.offset > 0:
                # Hazard (M4): another instance's chunks are relayed after the durable notices
                # of their turn's end and the next turn's start, so a turn's last chunk can come
                # after the read found a newer turn current. A turn newer than the read sends
                # every chunk from 0 here; one that starts later is an older turn's: not ours.
                continue
            if (chunk := _unseen(event.chunk, seen)) is not None:
                yield out(chunk)
                if chunk.done and turn_id is not None:
                    return
    finally:
        sub.close()


@strawberry.type(
    description="Live state of one session over graphql-transport-ws or GraphQL over SSE "
    "(graphql-sse; every event has an SSE `id`, O3). Each subscription sends "
    "the current snapshot first, then every change, each with its revision (R3): keep the "
    "highest per session and kind and ignore lower ones. A subscriber that falls behind gets an "
    "error with `extensions.code` RESYNC and the stream ends: subscribe again for a fresh "
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
        return await open_cancellation_stream(info.context, session_id)

    @described.subscription(
        "The session's queue: the current status first, then each new `revision` (Q13)."
    )
    async def queue_status_changed(
        self, info: Info, session_id: SessionId
    ) -> AsyncGenerator[QueueStatus, None]:
        return await open_queue_stream(info.context, session_id)

    @described.subscription(
        "The session: its current state first, then each new session `revision` or "
        "cancellation transition (ordered by `revision` and `cancellationRevision`)."
    )
    async def session_changed(
        self, info: Info, session_id: SessionId
    ) -> AsyncGenerator[Session, None]:
        return await open_session_stream(info.context, session_id)

    @described.subscription(
        "A turn's output (O2): first what follows `afterOffset` (the whole output so far "
        "without it, from offset 0), read from the durable log, then each new chunk as the "
        "agent streams it, with no gap and no duplicate; a turn's last message has "
        "`done: true` and its status. Without `turnId` it follows the session's current turn "
        "and then the later ones (a new `turnId` starts again at offset 0); with `turnId` it "
        "ends after that turn's end. Over SSE each event's `id` is `<turnId>:<offset after "
        "it>`, and a reconnect's `Last-Event-ID` resumes right after it (O3)."
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
        ctx = info.context
        turn, after = await _resume_point(ctx, session_id, turn_id, after_offset)
        return _output_stream(ctx, session_id, turn, after)

    @described.subscription(
        "A turn's structured output (A3, O2): its items (messages, thoughts, tool calls with "
        "their updates, plans, raw agent updates) with their log offsets. First what follows "
        "`afterOffset` (everything from offset 0 without it), read from the durable log, then "
        "each new batch as it is logged, with no gap and no duplicate, on any instance, for a "
        "running turn, an ended one or one whose server died; a turn's last message has "
        "`done: true` and its status. Without `turnId` it follows the session's current turn "
        "and then the later ones; with `turnId` it ends after that turn's end. Over SSE each "
        "event's `id` is `<turnId>:<nextOffset>`, and a reconnect's `Last-Event-ID` resumes "
        "right after it (O3). Offsets count log entries, not characters (see TurnItemsChunk)."
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
        ctx = info.context
        turn, after = await _resume_point(ctx, session_id, turn_id, after_offset)
        return items_stream(ctx, session_id, turn, after, _next_event)
