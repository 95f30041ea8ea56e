"""The ``turnOutput`` stream (O2, O3, M4): a turn's output from the durable log, then live.

A stream has one *place*: the turn it is in, the characters of it sent (``end``) and whether it
sent that turn's end (``done``). Every message starts exactly at the place and moves it, so
nothing is sent twice or skipped; following the session (no ``turnId``), it moves to the next
turn only after the end of the one it is in. The place is all it keeps and all a reconnect needs
(its SSE id, :mod:`turnqueue.resolvers.resume`).

Live events are hints; the log is the truth. Text this instance's runner published right at the
place is taken from the event. Anything else (another instance's ``OutputMark``, M4; a later
turn; a session revision: an end recorded elsewhere, M6, C5) makes the stream read from its place
on (``catch_up``): the rest of its turn from the log, then each later turn in order.

Hazard (order): subscribe first, then read. A chunk is published only after its batch
committed, so what a read missed is still to come on the subscription; what both carry is
dropped by the place.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator

from turnqueue.bus import Event, EventKind
from turnqueue.domain import OutputChunk
from turnqueue.resolvers.context import Context
from turnqueue.resolvers.feeds import next_event
from turnqueue.resolvers.resume import Place, Start, event_id
from turnqueue.schema.turns import TurnOutputChunk


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


async def output_stream(
    ctx: Context, session_id: str, start: Start
) -> AsyncGenerator[TurnOutputChunk, None]:
    """O2: what follows the start, from the log, then live. With ``turnId`` the stream ends
    after that turn's end; without it, it follows the session's later turns too."""
    engine = ctx.engine
    sub = engine.subscribe(session_id, [EventKind.OUTPUT, EventKind.SESSION])
    place: Place | None = start.resumed

    async def catch_up(event: Event | None = None) -> AsyncIterator[OutputChunk]:
        """From the place on: the rest of its turn, then (following) each later turn. ``event``:
        the one that asked for it (its reads are shared with the other streams, EventReads)."""
        nonlocal place
        while True:
            if place is not None and not place.done:
                turn_id, end = place.turn_id, place.end
                rest = await engine.output_since(session_id, turn_id, end, event=event)
                if rest is not None:
                    place, chunk = take(place, rest)
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
            place = Place(turn.id, 0)

    def out(chunk: OutputChunk) -> TurnOutputChunk:
        ctx.event_id = event_id(chunk.turn_id, chunk.offset + len(chunk.text), chunk.done)
        return TurnOutputChunk.from_domain(chunk)

    try:
        if place is None and start.turn_id is None:  # the current turn, from ``afterOffset``
            first = await engine.output_since(session_id, None, start.after)
            if first is not None:
                place, chunk = take(Place(first.turn_id, first.offset), first)
                if chunk is not None:
                    yield out(chunk)
        else:
            place = place or Place(str(start.turn_id), start.after)
        if place is not None and (place.done or start.turn_id is not None):
            async for chunk in catch_up():  # what follows a resumed place, or a named turn
                yield out(chunk)
        while place is None or start.follow or not place.done:
            event = await next_event(sub)
            chunk = event.chunk
            if place is not None and chunk is not None and not place.done:
                if chunk.turn_id == place.turn_id and chunk.offset <= place.end:
                    place, sent = take(place, chunk)  # this instance's text, right at the place
                    if sent is not None:
                        yield out(sent)
                    continue
            if _news(event, place, start.follow):
                async for sent in catch_up(event):
                    yield out(sent)
    finally:
        sub.close()


def _news(event: Event, place: Place | None, follow: bool) -> bool:
    """Whether ``event`` may tell the stream something its place does not cover (then it reads
    from the place on)."""
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
