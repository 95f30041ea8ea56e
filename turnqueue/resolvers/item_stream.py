"""The ``turnItems`` stream (A3, O2): a turn's items from its durable log, then live.

It follows ``turnOutput``'s machinery (:mod:`turnqueue.engine.replay`; the same request checks,
``Last-Event-ID`` and ends read again after a SESSION event), with one difference: its offsets
are log positions (records: text pieces and items alike), not characters, because a tool call's
update or a plan has no place among characters.

Each turn it follows has a place: the log entries folded so far (``end``) into an
:class:`~turnqueue.engine.items.ItemFold` that keeps no text. The first read folds the log from 0
(indices and tool calls need every earlier entry) and sends only what follows ``afterOffset``.

Hazard (order), as for turnOutput: subscribe first, then read. A batch is published only after
it committed, so what the read missed is still to come on ``sub``; what both carry is dropped by
position. A batch relayed from another instance carries only its end: the log is read from the
place's end (as after a gap, which a lagging buffer would otherwise cause, RESYNC ends the stream).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from turnqueue.bus import Event, EventKind
from turnqueue.bus import Subscription as BusSubscription
from turnqueue.domain import ItemsChunk, OutputRecord, TurnItem, TurnStatus
from turnqueue.engine.items import ItemFold
from turnqueue.resolvers.context import Context
from turnqueue.schema.turns import TurnItemsChunk

#: Turns a turnItems stream remembers its place in (a session's turns run one after another).
PLACES = 4


@dataclass(eq=False)
class _Place:
    fold: ItemFold = field(default_factory=lambda: ItemFold(keep_text=False))
    end: int = 0  # log entries folded
    hide: int = 0  # entries before this were sent before the resume (afterOffset)
    done: bool = False


def items_event_id(chunk: ItemsChunk) -> str:
    """O3: a turnItems event's SSE ``id``: ``<turn id>:<next offset>``, what a reconnect resumes
    from (``Last-Event-ID``, or ``turnId`` and ``afterOffset``)."""
    return f"{chunk.turn_id}:{chunk.next_offset}"


def _advance(
    session_id: str,
    turn_id: str,
    place: _Place,
    records: Iterable[OutputRecord],
    done: bool,
    status: TurnStatus,
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
    return ItemsChunk(
        session_id, turn_id, offset, max(place.end, offset), tuple(changes), done, status
    )


def _ended_turn(event: Event) -> str | None:
    """The turn whose end an OUTPUT event announces (its ``done``, here or relayed), if any."""
    if event.chunk is not None and event.chunk.done:
        return event.chunk.turn_id
    if event.mark is not None and event.mark.done:
        return event.mark.turn_id
    return None


async def items_stream(
    ctx: Context,
    session_id: str,
    turn_id: str | None,
    after: int,
    next_event: Callable[[BusSubscription], Awaitable[Event]],
) -> AsyncGenerator[TurnItemsChunk, None]:
    """O2 for items: what follows ``after`` from the log, then live. With ``turn_id`` the stream
    ends after that turn's ``done``; without it, it follows the session's later turns too."""
    engine = ctx.engine
    sub = engine.subscribe(session_id, [EventKind.ITEMS, EventKind.OUTPUT, EventKind.SESSION])
    places: dict[str, _Place] = {}

    def place_of(tid: str, hide: int = 0) -> _Place | None:
        if turn_id is not None and tid != turn_id:
            return None
        place = places.get(tid)
        if place is None:
            place = places[tid] = _Place(hide=hide)
            while len(places) > PLACES:
                del places[next(iter(places))]
        return None if place.done else place

    async def read(tid: str, place: _Place) -> ItemsChunk | None:
        """The log after the place's end, and whether the turn has ended (read first)."""
        found = await engine.records_since(session_id, tid, place.end)
        if found is None:
            return None
        turn, records = found
        ended = turn.status is not TurnStatus.RUNNING
        return _advance(session_id, tid, place, records, ended, turn.status)

    def out(chunk: ItemsChunk) -> TurnItemsChunk:
        ctx.renew_loaders()
        ctx.event_id = items_event_id(chunk)
        return TurnItemsChunk.from_domain(chunk)

    try:
        first = await engine.records_since(session_id, turn_id, 0)
        if first is not None:
            turn, records = first
            place = place_of(turn.id, hide=after)
            assert place is not None
            ended = turn.status is not TurnStatus.RUNNING
            chunk = _advance(session_id, turn.id, place, records, ended, turn.status)
            if chunk is not None:
                yield out(chunk)
                if chunk.done and turn_id is not None:
                    return
        while True:
            event = await next_event(sub)
            chunks: list[ItemsChunk | None] = []
            if event.kind is EventKind.ITEMS and event.batch is not None:
                batch = event.batch
                place = place_of(batch.turn_id)
                if place is None or batch.end <= place.end:
                    continue
                if batch.records and batch.records[0].seq <= place.end:
                    running = TurnStatus.RUNNING
                    chunk = _advance(
                        session_id, batch.turn_id, place, batch.records, False, running
                    )
                    chunks.append(chunk)
                else:  # relayed (no records), or after a gap: the log has it
                    chunks.append(await read(batch.turn_id, place))
            elif event.kind is EventKind.OUTPUT and (over := _ended_turn(event)) is not None:
                # The turn's end committed: its log is complete; read what follows and the end.
                place = place_of(over)
                if place is not None:
                    chunks.append(await read(over, place))
            elif event.kind is EventKind.SESSION:
                # An end recorded without this process's runner (recovery after the owner
                # died, M6; an agent gone, C5) sends no ``done`` here: the turn is read again.
                for tid, place in list(places.items()):
                    if not place.done:
                        chunks.append(await read(tid, place))
            for chunk in chunks:
                if chunk is not None:
                    yield out(chunk)
                    if chunk.done and turn_id is not None:
                        return
    finally:
        sub.close()
