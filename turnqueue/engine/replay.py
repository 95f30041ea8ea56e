"""Reading a turn's output from where a client left off (O2), on any instance.

A turn this process runs is read from its runner (the committed text, exactly what its bus has
published); any other turn from the durable log (O1), whoever runs it, whether it still runs,
has ended, or its owner died. No owner round trip is needed: every chunk any instance has
published is in the log by then (see :mod:`turnqueue.engine.outputlog`).

The same holds for a turn's items (A3): :func:`records_since` reads the log's records from a
position (``turnItems``' offsets count records, text and items alike), for any turn, on any
instance.

Hazard (order): the caller subscribes to the bus *before* it reads here and then drops what the
read covered; reading first would lose whatever committed between the read and the subscription.

Streams read again when an event tells them something they do not carry (another instance's
output, a later turn, an end): :class:`EventReads` makes that one read per event, however many
streams of this instance make it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, TypeVar

from turnqueue.bus import Event
from turnqueue.domain import ItemKind, OutputChunk, OutputRecord, Turn, TurnStatus
from turnqueue.engine.core import Core
from turnqueue.errors import InvalidInput, NotFound
from turnqueue.store import Store
from turnqueue.store.protocol import Window

T = TypeVar("T")


class EventReads:
    """Reads made for one bus event, shared by every stream of this instance that makes the
    same read for it while it is under way: twenty streams following a session are woken by the
    same event and read the session's next turn (or the log from the place they share); one
    read answers them all. Only reads under way are kept (nothing is cached: a stream that
    comes to the event after its read ended reads again).

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


async def check_request(core: Core, session_id: str, turn_id: str | None, after: int) -> None:
    """Refuse a bad resume before a stream exists: a negative offset, a foreign turn."""
    if after < 0:
        raise InvalidInput("afterOffset must be 0 or more", ["afterOffset"])
    runner = core.runners.get(session_id)
    if turn_id is not None and (runner is None or runner.turn.id != turn_id):
        await _turn(core, session_id, turn_id)  # NotFound for a turn of another session


async def output_since(
    core: Core, session_id: str, turn_id: str | None, after: int
) -> OutputChunk | None:
    """The output of ``turn_id`` (None: the session's current turn) after character ``after``:
    one chunk at offset ``after`` (clamped to the output's length), ``done`` when the turn has
    ended. None when the session has no turn yet. NotFound for a turn of another session."""
    if after < 0:
        raise InvalidInput("afterOffset must be 0 or more", ["afterOffset"])
    runner = core.runners.get(session_id)
    if runner is not None and turn_id in (None, runner.turn.id):
        return runner.snapshot(after)
    turn = await _turn(core, session_id, turn_id)
    if turn is None:
        return None
    # The turn first, then its log: a turn read as ended has its whole log (the end appends the
    # last batch in its own transaction, and an ended turn's log never changes). One read as
    # RUNNING may end meanwhile; its ``done`` then reaches the caller, who subscribed first.
    async with core.store.read() as tx:
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


async def current_turn(store: Store, session_id: str) -> Turn | None:
    """The session's newest turn whatever its status; None before its first."""
    newest = (await store.turns_page(session_id, Window(last=1))).values()
    return newest[0] if newest else None


async def _turn(core: Core, session_id: str, turn_id: str | None) -> Turn | None:
    """The turn named (None: the session's current one, None when it has none yet)."""
    if turn_id is None:
        return await current_turn(core.store, session_id)
    async with core.store.read() as tx:
        turn = await tx.get_turn(turn_id)
    if turn is None or turn.session_id != session_id:
        raise NotFound("no such turn in this session")
    return turn


async def records_since(
    core: Core, session_id: str, turn_id: str | None, after: int
) -> tuple[Turn, list[OutputRecord]] | None:
    """The turn (None: the session's current one) and its log's records from position
    ``after`` on (``seq >= after``), read turn first: a turn read as ended has its whole log.
    None when the session has no turn yet. NotFound for a turn of another session."""
    if after < 0:
        raise InvalidInput("afterOffset must be 0 or more", ["afterOffset"])
    turn = await _turn(core, session_id, turn_id)
    if turn is None:
        return None
    async with core.store.read() as tx:
        records = await tx.read_records(turn.id, after - 1)
    if not records and after == 0 and turn.status is not TurnStatus.RUNNING and turn.output:
        # A turn that ended before the log existed (migration 0006) keeps only ``output``.
        records = [OutputRecord(turn.id, 0, 0, ItemKind.MESSAGE, turn.output)]
    return turn, records
