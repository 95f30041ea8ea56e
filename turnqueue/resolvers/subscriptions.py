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

from collections.abc import AsyncGenerator
from typing import Annotated

import strawberry
from graphql import GraphQLError

from turnqueue import domain
from turnqueue.bus import Event, EventKind, SubscriberLagged
from turnqueue.bus import Subscription as BusSubscription
from turnqueue.errors import UserFacingError
from turnqueue.resolvers.context import Context
from turnqueue.schema import fields as described
from turnqueue.schema.types import CancellationStatus, QueueStatus, Session, TurnOutputChunk

Info = strawberry.Info[Context, None]

SessionId = Annotated[
    strawberry.ID, strawberry.argument(description="The session (one of the caller's).")
]

RESYNC_MESSAGE = "this subscription fell behind; resubscribe to get a fresh snapshot"


def resync_error() -> GraphQLError:
    return GraphQLError(RESYNC_MESSAGE, extensions={"code": "RESYNC"})


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


async def _queue_stream(ctx: Context, session_id: str) -> AsyncGenerator[QueueStatus, None]:
    sub = ctx.engine.subscribe(session_id, [EventKind.QUEUE])
    try:
        last = -1
        status = await ctx.engine.queue_status(session_id)
        while True:
            if status.revision > last:
                last = status.revision
                ctx.renew_loaders()
                yield QueueStatus.from_domain(status)
            event = await _next_event(sub)
            # Every subscriber of the session shares one read per event.
            status = await ctx.engine.queue_status_after(session_id, event.revision)
    finally:
        sub.close()


async def _session_stream(ctx: Context, session_id: str) -> AsyncGenerator[Session, None]:
    sub = ctx.engine.subscribe(session_id, [EventKind.SESSION, EventKind.CANCELLATION])
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


async def _cancellation_stream(
    ctx: Context, session_id: str
) -> AsyncGenerator[CancellationStatus, None]:
    sub = ctx.engine.subscribe(session_id, [EventKind.CANCELLATION])
    try:
        status = ctx.engine.cancellation(session_id)
        last = status.revision
        yield CancellationStatus.from_domain(status)
        while True:
            event = await _next_event(sub)
            if event.cancellation is not None and event.cancellation.revision > last:
                last = event.cancellation.revision
                yield CancellationStatus.from_domain(event.cancellation)
    finally:
        sub.close()


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
    return chunk


async def _output_stream(ctx: Context, session_id: str) -> AsyncGenerator[TurnOutputChunk, None]:
    sub = ctx.engine.subscribe(session_id, [EventKind.OUTPUT])
    try:
        seen: dict[str, tuple[int, bool]] = {}
        snapshot = await ctx.engine.output_snapshot(session_id)
        if snapshot is not None and (chunk := _unseen(snapshot, seen)) is not None:
            yield TurnOutputChunk.from_domain(chunk)
        while True:
            event = await _next_event(sub)
            if event.chunk is not None and (chunk := _unseen(event.chunk, seen)) is not None:
                yield TurnOutputChunk.from_domain(chunk)
    finally:
        sub.close()


@strawberry.type(
    description="Live state of one session over graphql-transport-ws. Each subscription sends "
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
        await _authorize(info.context, session_id)
        return _cancellation_stream(info.context, session_id)

    @described.subscription(
        "The session's queue: the current status first, then each new `revision` (Q13)."
    )
    async def queue_status_changed(
        self, info: Info, session_id: SessionId
    ) -> AsyncGenerator[QueueStatus, None]:
        await _authorize(info.context, session_id)
        return _queue_stream(info.context, session_id)

    @described.subscription(
        "The session: its current state first, then each new session `revision` or "
        "cancellation transition (ordered by `revision` and `cancellationRevision`)."
    )
    async def session_changed(
        self, info: Info, session_id: SessionId
    ) -> AsyncGenerator[Session, None]:
        await _authorize(info.context, session_id)
        return _session_stream(info.context, session_id)

    @described.subscription(
        "The session's turn output: the current turn's text so far first (from offset 0), "
        "then each chunk as the agent streams it, this turn's and later ones' (a new "
        "`turnId` starts again at offset 0)."
    )
    async def turn_output(
        self, info: Info, session_id: SessionId
    ) -> AsyncGenerator[TurnOutputChunk, None]:
        await _authorize(info.context, session_id)
        return _output_stream(info.context, session_id)
