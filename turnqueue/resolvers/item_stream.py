"""The ``turnItems`` stream (A3, O2, O3): a turn's items from its durable log, then live.

It works as ``turnOutput`` does (:mod:`turnqueue.resolvers.output_stream`), except that its
offsets are log positions (text pieces and items alike), not characters. Its place is the log
entries folded so far (``end``) into an :class:`~turnqueue.engine.reads.ItemFold` that keeps no
text; a turn is folded from entry 0 (indices and tool calls need every earlier entry), and only
what follows ``afterOffset`` (or a reconnect's place) is sent.

Hazard (order), as for turnOutput: subscribe first, then read; what both carry is dropped by
position. A batch relayed from another instance carries only its end: the log is read from the
place's end.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Iterable
from dataclasses import dataclass, field

from turnqueue.bus import Event, EventKind
from turnqueue.domain import ItemsChunk, OutputRecord, TurnItem, TurnStatus
from turnqueue.engine.reads import ItemFold
from turnqueue.resolvers.context import Context
from turnqueue.resolvers.feeds import next_event
from turnqueue.resolvers.resume import Start, event_id
from turnqueue.schema.turns import TurnItemsChunk


@dataclass(eq=False)
class _Place:
    turn_id: str
    fold: ItemFold = field(default_factory=lambda: ItemFold(keep_text=False))
    end: int = 0  # log entries folded
    hide: int = 0  # entries before this were sent before the resume (afterOffset)
    done: bool = False


def _advance(
    session_id: str, place: _Place, records: Iterable[OutputRecord], done: bool, status: TurnStatus
) -> ItemsChunk | None:
    """Fold the records that follow the place; the chunk to send, None when nothing is new.
    Records must start at or before ``place.end`` (the caller reads the log after a gap)."""
    start = place.end
    changes: list[tuple[int, TurnItem]] = []
    for record in records:
        if record.seq != place.end:
            continue  # already folded (before the place's end)
        change = place.fold.add_record(record)
        place.end += 1
        if change is not None and record.seq >= place.hide:
            changes.append(change)
    if not done and not changes and place.end <= max(start, place.hide):
        return None
    place.done = done
    offset = max(start, min(place.hide, place.end))
    end = max(place.end, offset)
    return ItemsChunk(session_id, place.turn_id, offset, end, tuple(changes), done, status)


def _ended_turn(event: Event) -> str | None:
    """The turn whose end an OUTPUT event announces (its ``done``, here or relayed), if any."""
    if event.chunk is not None and event.chunk.done:
        return event.chunk.turn_id
    if event.mark is not None and event.mark.done:
        return event.mark.turn_id
    return None


def _news(event: Event, place: _Place | None, follow: bool) -> bool:
    """Whether ``event`` may tell the stream something its place does not cover."""
    if event.kind is EventKind.SESSION:
        return follow or place is None or not place.done
    if event.kind is EventKind.ITEMS and event.batch is not None:
        turn_id, beyond = event.batch.turn_id, place is None or event.batch.end > place.end
    elif (ended := _ended_turn(event)) is not None:
        turn_id, beyond = ended, True
    else:
        return False  # text: its records come as ITEMS
    if place is None or turn_id != place.turn_id:
        return follow or place is None
    return beyond and not place.done


async def items_stream(
    ctx: Context, session_id: str, start: Start
) -> AsyncGenerator[TurnItemsChunk, None]:
    """O2 for items, as :func:`~turnqueue.resolvers.output_stream.output_stream` for text."""
    engine = ctx.engine
    sub = engine.subscribe(session_id, [EventKind.ITEMS, EventKind.OUTPUT, EventKind.SESSION])
    place: _Place | None = None

    async def read(place: _Place, event: Event | None) -> ItemsChunk | None:
        """The log after the place's end, and whether the turn has ended (read first)."""
        found = await engine.records_since(session_id, place.turn_id, place.end, event=event)
        if found is None:
            return None
        turn, records = found
        ended = turn.status is not TurnStatus.RUNNING
        return _advance(session_id, place, records, ended, turn.status)

    async def catch_up(event: Event | None = None) -> AsyncIterator[ItemsChunk]:
        """As ``output_stream``'s ``catch_up``."""
        nonlocal place
        while True:
            if place is not None and not place.done:
                chunk = await read(place, event)
                if chunk is not None:
                    yield chunk
                if not place.done:
                    return  # still running: the rest comes live
            if not start.follow:
                return
            after = place.turn_id if place else None
            turn = await engine.next_turn(session_id, after, event=event)
            if turn is None:
                return
            place = _Place(turn.id)

    def out(chunk: ItemsChunk) -> TurnItemsChunk:
        ctx.renew_loaders()
        ctx.event_id = event_id(chunk.turn_id, chunk.next_offset, chunk.done)  # O3
        return TurnItemsChunk.from_domain(chunk)

    try:
        if start.resumed is not None and start.resumed.done:
            place = _Place(start.resumed.turn_id, done=True)
        elif start.turn_id is not None:
            place = _Place(start.turn_id, hide=start.after)
        else:  # the current turn, from ``afterOffset``
            first = await engine.records_since(session_id, None, 0)
            if first is not None:
                turn, records = first
                place = _Place(turn.id, hide=start.after)
                ended = turn.status is not TurnStatus.RUNNING
                chunk = _advance(session_id, place, records, ended, turn.status)
                if chunk is not None:
                    yield out(chunk)
        if place is not None and (place.done or start.turn_id is not None):
            async for chunk in catch_up():  # what follows a resumed place, or a named turn
                yield out(chunk)
        while place is None or start.follow or not place.done:
            event = await next_event(sub)
            batch = event.batch
            if place is not None and batch is not None and not place.done:
                if batch.turn_id == place.turn_id and batch.records:
                    if batch.records[0].seq <= place.end:  # this instance's, at the place
                        if batch.end > place.end:
                            running = TurnStatus.RUNNING
                            chunk = _advance(session_id, place, batch.records, False, running)
                            if chunk is not None:
                                yield out(chunk)
                        continue
            if _news(event, place, start.follow):
                async for chunk in catch_up(event):
                    yield out(chunk)
    finally:
        sub.close()
