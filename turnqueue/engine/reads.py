"""The engine's reads, on any instance: the store's batches and pages (``Engine.reads``, typed
as the store's :class:`Reads`; its page types are re-exported here so resolvers import no store
module); a turn's output and log records from where a client left off (O2, A3); the reads
shared by the subscribers one event wakes (:class:`SharedReads`, :class:`EventReads`); and a
turn's items folded from its log (:class:`ItemFold`, A3).

Authorisation (S2) is the caller's. A turn this process runs is read from its runner (the
committed text, exactly what its bus has published); any other turn from the durable log (O1),
whoever runs it, whether it still runs, has ended, or its owner died: every chunk any instance
has published is in the log by then (``engine/outputlog.py``). ``turnItems``' offsets count
records, text and items alike.

Hazard (order): the caller subscribes to the bus *before* it reads here and then drops what the
read covered; reading first would lose whatever committed between the read and the subscription.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, TypeVar

from turnqueue.bus import Event, EventBus, EventKind
from turnqueue.domain import (
    ItemKind,
    OutputChunk,
    OutputRecord,
    QueueStatus,
    Turn,
    TurnItem,
    TurnStatus,
)
from turnqueue.engine.core import Core
from turnqueue.errors import InvalidInput, NotFound
from turnqueue.store import Page, Reads, SessionKey, Store, TaskKey, TurnKey, Window

__all__ = [
    "EventReads",
    "ItemFold",
    "Page",
    "Reads",
    "SessionKey",
    "SharedReads",
    "TaskKey",
    "TurnKey",
    "Window",
]

T = TypeVar("T")

#: Sessions :class:`SharedReads` remembers at most; beyond it the memory is forgotten (a cache).
MAX_SESSIONS = 10_000


class SharedReads:
    """One queue-status read per event, shared by every subscriber of the session it is new
    enough for (a thousand subscribers must not mean a thousand identical reads).

    Hazard: a read may only serve a caller who needs revision ``r`` if it *started* after the
    event carrying ``r`` was published (events are published after their commit, so such a read
    sees it). ``_published`` is the newest queue revision this process has published or relayed
    for the session; a read remembers the value it saw when it started. Callers that must see
    their own writes (mutation payloads) never use this path."""

    def __init__(self, bus: EventBus, read: Callable[[str], Awaitable[QueueStatus]]) -> None:
        self._read = read
        self._published: dict[str, int] = {}
        self._latest: dict[str, tuple[int, asyncio.Future[QueueStatus]]] = {}
        bus.add_listener(self._note)

    def _note(self, event: Event) -> None:
        if event.kind is EventKind.QUEUE and event.revision > 0:
            if len(self._published) >= MAX_SESSIONS:
                self._published.clear()
                self._latest.clear()
            sid = event.session_id
            self._published[sid] = max(self._published.get(sid, 0), event.revision)

    async def queue_status_after(self, session_id: str, revision: int) -> QueueStatus:
        """A snapshot that includes the change published with ``revision``."""
        shared = self._latest.get(session_id)
        if shared is None or shared[0] < revision or _failed(shared[1]):
            started_at = self._published.get(session_id, 0)
            if started_at < revision:  # the event is not (yet) known here: read for oneself
                return await self._read(session_id)
            future = asyncio.ensure_future(self._read(session_id))
            shared = (started_at, future)
            self._latest[session_id] = shared
        return await asyncio.shield(shared[1])


def _failed(future: asyncio.Future[QueueStatus]) -> bool:
    return future.done() and (future.cancelled() or future.exception() is not None)


class EventReads:
    """Reads made for one bus event (another instance's output, a later turn, an end), shared
    by every stream of this instance that makes the same read for it while it is under way.
    Only reads under way are kept: a stream that comes to the event later reads again.

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


# -- a turn's items (A3) folded from its log (O1) ------------------------------------------------
# Two folds turn the log into the list a UI shows (``Turn.items``): an item with a ``key`` (a tool
# call's id) *updates* the earlier item with that key in place (its data merged over the old: an
# ACP ``tool_call_update`` carries only what changed); consecutive MESSAGE (or THOUGHT) pieces
# without a key are joined into one item. :meth:`ItemFold.add` answers what each piece changed,
# as ``turnItems`` streams it (O2): the item's index and either the item whole (new, or updated
# by key) or, for a joined text item, only the text it gained. Any instance folds any turn's log
# the same way, running or ended.

#: Items kept per turn; beyond it new items are dropped (updates of kept ones still apply).
MAX_ITEMS = 10_000
#: Characters kept in one joined MESSAGE/THOUGHT item.
MAX_TEXT_CHARS = 1_000_000

_JOINED = frozenset({ItemKind.MESSAGE, ItemKind.THOUGHT})

#: What one piece changed: the item's index, and the item (for a joined text item that already
#: existed: only the text it gained).
ItemChange = tuple[int, TurnItem]


class ItemFold:
    """The items of one turn, folded piece by piece.

    ``keep_text=False`` (a stream's fold) keeps only what placing the next pieces needs (sizes
    and keyed items), not the joined text nor unkeyed items' data (nothing later refers to a
    plan or a raw update): a subscriber never re-sends what it already sent.
    """

    def __init__(self, *, keep_text: bool = True) -> None:
        self._keep_text = keep_text
        self._items: list[TurnItem] = []
        # Text of a joined MESSAGE/THOUGHT item by index, in parts: joining on each chunk would
        # copy the whole text every time (quadratic in the number of chunks).
        self._parts: dict[int, list[str]] = {}
        self._sizes: dict[int, int] = {}
        self._by_key: dict[str, int] = {}

    def add_record(self, record: OutputRecord) -> ItemChange | None:
        """Fold the piece a log record holds (a MESSAGE record keeps its text in ``text``)."""
        if record.kind is ItemKind.MESSAGE and record.data is None:
            return self.add(TurnItem(ItemKind.MESSAGE, {"text": record.text}))
        return self.add(TurnItem(record.kind, dict(record.data or {}), record.key))

    def add(self, item: TurnItem) -> ItemChange | None:
        """Fold ``item`` in; what it changed, or None when it changed nothing (beyond a bound)."""
        if item.key is not None and item.key in self._by_key:
            index = self._by_key[item.key]
            old = self._items[index]
            merged = TurnItem(old.kind, {**old.data, **item.data}, old.key)
            self._items[index] = merged
            return index, merged
        last = len(self._items) - 1
        if item.key is None and item.kind in _JOINED:
            text = str(item.data.get("text", ""))
            if last in self._sizes and self._items[last].kind is item.kind:
                room = MAX_TEXT_CHARS - self._sizes[last]
                gained = text[: max(room, 0)]
                if not gained:
                    return None
                if self._keep_text:
                    self._parts[last].append(gained)
                self._sizes[last] += len(gained)
                return last, TurnItem(item.kind, {"text": gained})
            if len(self._items) >= MAX_ITEMS:
                return None
            text = text[:MAX_TEXT_CHARS]
            index = last + 1
            self._items.append(TurnItem(item.kind, {}))
            self._parts[index] = [text] if self._keep_text else []
            self._sizes[index] = len(text)
            return index, TurnItem(item.kind, {"text": text})
        if len(self._items) >= MAX_ITEMS:
            return None
        if item.key is not None:
            self._by_key[item.key] = len(self._items)
        kept = item if item.key is not None or self._keep_text else TurnItem(item.kind, {})
        self._items.append(kept)
        return len(self._items) - 1, item

    def snapshot(self) -> tuple[TurnItem, ...]:
        """The items as they are now (only for a fold that keeps its text)."""
        return tuple(
            TurnItem(it.kind, {"text": "".join(self._parts[i])}) if i in self._parts else it
            for i, it in enumerate(self._items)
        )


def fold_records(records: list[OutputRecord]) -> tuple[TurnItem, ...]:
    """A turn's items from its whole log (``Turn.items``)."""
    fold = ItemFold()
    for record in records:
        fold.add_record(record)
    return fold.snapshot()
