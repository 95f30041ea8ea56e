"""The resumable streams of a turn's log (O2, O3, M4): ``turnOutput`` (its text, offsets in
characters) and ``turnItems`` (its items, A3, offsets in log entries), from the durable log, then
live.

A stream has one *place*: the turn it is in, how much of it was sent (``end``) and whether it sent
that turn's end (``done``). Every message starts exactly at the place and moves it, so nothing is
sent twice or skipped; following the session (no ``turnId``), it moves to the next turn only
after the end of the one it is in. The place is all a reconnect needs (its SSE id,
:mod:`turnqueue.resolvers.resume`).

Live events are hints; the log is the truth. What this instance published right at the place is
taken from the event. Anything else (another instance's ``OutputMark`` or relayed batch, which
carries only its end, M4; a later turn; a session revision: an end recorded elsewhere, M6, C5)
makes the stream read from its place on (``catch_up``): the rest of its turn from the log, then
each later turn in order.

An items place folds the log entries into an :class:`~turnqueue.engine.items.ItemFold` that keeps
no text; a turn is folded from entry 0 (indices and tool calls need every earlier entry), and only
what follows ``afterOffset`` (or a reconnect's place) is sent.

Hazard (order): subscribe first, then read. A chunk is published only after its batch committed,
so what a read missed is still to come on the subscription; what both carry is dropped by the
place.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import ClassVar, Protocol, TypeVar

from turnqueue.bus import Event, EventKind
from turnqueue.domain import ItemsChunk, OutputChunk, OutputRecord, TurnItem, TurnStatus
from turnqueue.engine.items import ItemFold
from turnqueue.resolvers.context import Context
from turnqueue.resolvers.feeds import next_event
from turnqueue.resolvers.resume import Place, Start, event_id
from turnqueue.schema.turns import TurnItemsChunk, TurnOutputChunk

P = TypeVar("P", "Place", "_ItemPlace")
C = TypeVar("C")  # a chunk of the domain
G = TypeVar("G", covariant=True)  # the chunk's GraphQL type


class _Log(Protocol[P, C, G]):
    """One kind of stream: ``place`` (the start of a turn, or after ``after``); ``first``: the
    current turn read from ``after``; ``rest``: the log after the place (``event``: the one that
    asked, whose reads are shared); ``live``: what an event carries right at a running place
    (None: it is no such event); ``news``: whether an event may tell the stream something its
    place does not cover; ``out``: the message to send, with its SSE id set (O3)."""

    ctx: Context
    session_id: str
    kinds: ClassVar[tuple[EventKind, ...]]

    def place(self, turn_id: str, after: int = 0, done: bool = False) -> P: ...
    async def first(self, after: int) -> tuple[P, C | None] | None: ...
    async def rest(self, place: P, event: Event | None) -> tuple[P, C | None]: ...
    def live(self, place: P, event: Event) -> tuple[P, C | None] | None: ...
    def news(self, event: Event, place: P | None, follow: bool) -> bool: ...
    def out(self, chunk: C) -> G: ...


async def _follow(log: _Log[P, C, G], start: Start) -> AsyncGenerator[G, None]:
    """O2: what follows the start, from the log, then live. With ``turnId`` the stream ends
    after that turn's end; without it, it follows the session's later turns too."""
    engine, session_id = log.ctx.engine, log.session_id
    sub = engine.bus.subscribe(session_id, log.kinds)
    place: P | None = None

    async def catch_up(event: Event | None = None) -> AsyncIterator[C]:
        """From the place on: the rest of its turn, then (following) each later turn."""
        nonlocal place
        while True:
            if place is not None and not place.done:
                place, chunk = await log.rest(place, event)
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
            place = log.place(turn.id)

    try:
        if start.turn_id is None:  # the current turn, from ``afterOffset``
            first = await log.first(start.after)
            if first is not None:
                place, chunk = first
                if chunk is not None:
                    yield log.out(chunk)
        else:
            done = start.resumed is not None and start.resumed.done
            place = log.place(start.turn_id, start.after, done)
        if place is not None and (place.done or start.turn_id is not None):
            async for chunk in catch_up():  # what follows a resumed place, or a named turn
                yield log.out(chunk)
        while place is None or start.follow or not place.done:
            event = await next_event(sub)
            taken = None if place is None or place.done else log.live(place, event)
            if taken is not None:
                place, chunk = taken
                if chunk is not None:
                    yield log.out(chunk)
            elif log.news(event, place, start.follow):
                async for chunk in catch_up(event):
                    yield log.out(chunk)
    finally:
        sub.close()


# -- turnOutput --------------------------------------------------------------------------------
def take(place: Place, chunk: OutputChunk) -> tuple[Place, OutputChunk | None]:
    """The part of ``chunk`` that follows ``place`` (None: nothing new) and the place after it.
    ``chunk`` must be of the place's turn and start at or before its end."""
    if place.done or chunk.turn_id != place.turn_id or chunk.offset > place.end:
        return place, None
    end = place.end
    if chunk.done:  # the output's whole length: a place beyond it (a bad afterOffset) is not
        end = min(end, chunk.offset + len(chunk.text))
    text = chunk.text[end - chunk.offset :]
    if not text and not chunk.done:
        return place, None
    sent = OutputChunk(chunk.session_id, chunk.turn_id, end, text, chunk.done, chunk.status)
    return Place(place.turn_id, end + len(text), chunk.done), sent


@dataclass
class _Output:
    ctx: Context
    session_id: str
    kinds: ClassVar[tuple[EventKind, ...]] = (EventKind.OUTPUT, EventKind.SESSION)

    def place(self, turn_id: str, after: int = 0, done: bool = False) -> Place:
        return Place(turn_id, after, done)

    async def first(self, after: int) -> tuple[Place, OutputChunk | None] | None:
        first = await self.ctx.engine.output_since(self.session_id, None, after)
        return None if first is None else take(Place(first.turn_id, first.offset), first)

    async def rest(self, place: Place, event: Event | None) -> tuple[Place, OutputChunk | None]:
        engine = self.ctx.engine
        rest = await engine.output_since(self.session_id, place.turn_id, place.end, event=event)
        return (place, None) if rest is None else take(place, rest)

    def live(self, place: Place, event: Event) -> tuple[Place, OutputChunk | None] | None:
        chunk = event.chunk  # this instance's text
        if chunk is None or chunk.turn_id != place.turn_id or chunk.offset > place.end:
            return None
        return take(place, chunk)

    def news(self, event: Event, place: Place | None, follow: bool) -> bool:
        if event.kind is EventKind.SESSION:
            return follow or place is None or not place.done
        about = event.chunk or event.mark
        if about is None or place is None:
            return about is not None
        if about.turn_id != place.turn_id:
            return follow  # a later turn
        if place.done:
            return False
        if event.mark is not None:
            return event.mark.end > place.end or event.mark.done
        return True  # this turn's text past the place: a gap the log fills

    def out(self, chunk: OutputChunk) -> TurnOutputChunk:
        end = chunk.offset + len(chunk.text)
        self.ctx.event_id = event_id(chunk.turn_id, end, chunk.done)
        return TurnOutputChunk.from_domain(chunk)


def output_stream(
    ctx: Context, session_id: str, start: Start
) -> AsyncGenerator[TurnOutputChunk, None]:
    """``turnOutput``'s messages."""
    return _follow(_Output(ctx, session_id), start)


# -- turnItems ---------------------------------------------------------------------------------
@dataclass(eq=False)
class _ItemPlace:
    turn_id: str
    fold: ItemFold = field(default_factory=lambda: ItemFold(keep_text=False))
    end: int = 0  # log entries folded
    hide: int = 0  # entries before this were sent before the resume (afterOffset)
    done: bool = False


def _ended_turn(event: Event) -> str | None:
    """The turn whose end an OUTPUT event announces (its ``done``, here or relayed), if any."""
    if event.chunk is not None and event.chunk.done:
        return event.chunk.turn_id
    if event.mark is not None and event.mark.done:
        return event.mark.turn_id
    return None


@dataclass
class _Items:
    ctx: Context
    session_id: str
    kinds: ClassVar[tuple[EventKind, ...]] = (EventKind.ITEMS, EventKind.OUTPUT, EventKind.SESSION)

    def place(self, turn_id: str, after: int = 0, done: bool = False) -> _ItemPlace:
        return _ItemPlace(turn_id, hide=after, done=done)

    async def first(self, after: int) -> tuple[_ItemPlace, ItemsChunk | None] | None:
        found = await self.ctx.engine.records_since(self.session_id, None, 0)
        if found is None:
            return None
        turn, records = found
        return self._advance(_ItemPlace(turn.id, hide=after), records, turn.status)

    async def rest(
        self, place: _ItemPlace, event: Event | None
    ) -> tuple[_ItemPlace, ItemsChunk | None]:
        engine, session_id = self.ctx.engine, self.session_id
        found = await engine.records_since(session_id, place.turn_id, place.end, event=event)
        return (place, None) if found is None else self._advance(place, found[1], found[0].status)

    def live(self, place: _ItemPlace, event: Event) -> tuple[_ItemPlace, ItemsChunk | None] | None:
        batch = event.batch  # this instance's, at the place
        if batch is None or batch.turn_id != place.turn_id or not batch.records:
            return None
        if batch.records[0].seq > place.end:
            return None
        if batch.end <= place.end:
            return place, None
        return self._advance(place, batch.records, TurnStatus.RUNNING)

    def _advance(
        self, place: _ItemPlace, records: Iterable[OutputRecord], status: TurnStatus
    ) -> tuple[_ItemPlace, ItemsChunk | None]:
        """Fold the records that follow the place; the chunk to send, None when nothing is new.
        Records must start at or before ``place.end`` (the caller reads the log after a gap)."""
        start, done = place.end, status is not TurnStatus.RUNNING
        changes: list[tuple[int, TurnItem]] = []
        for record in records:
            if record.seq != place.end:
                continue  # already folded (before the place's end)
            change = place.fold.add_record(record)
            place.end += 1
            if change is not None and record.seq >= place.hide:
                changes.append(change)
        if not done and not changes and place.end <= max(start, place.hide):
            return place, None
        place.done = done
        offset = max(start, min(place.hide, place.end))
        end = max(place.end, offset)
        chunk = ItemsChunk(
            self.session_id, place.turn_id, offset, end, tuple(changes), done, status
        )
        return place, chunk

    def news(self, event: Event, place: _ItemPlace | None, follow: bool) -> bool:
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

    def out(self, chunk: ItemsChunk) -> TurnItemsChunk:
        self.ctx.renew_loaders()
        self.ctx.event_id = event_id(chunk.turn_id, chunk.next_offset, chunk.done)
        return TurnItemsChunk.from_domain(chunk)


def items_stream(
    ctx: Context, session_id: str, start: Start
) -> AsyncGenerator[TurnItemsChunk, None]:
    """``turnItems``' messages."""
    return _follow(_Items(ctx, session_id), start)
