"""The in-process event bus.

Events are thin: a kind, a session id, a revision and (for the runtime kinds) the value itself;
subscribers read a fresh snapshot when they need more, so an event never carries stale state. A
queue event may carry the status its own transaction read just before COMMIT.

Hazards:
- ``publish`` is synchronous and never blocks: the engine calls it from ``Tx.after_commit``
  callbacks, in commit order, so every subscriber sees a session's events in commit order.
- A subscriber that falls behind its bounded buffer neither grows memory nor stalls the others:
  its buffer is dropped and its next ``get`` raises :class:`SubscriberLagged`, so the API tells
  the client to resubscribe (R3). Changes are never skipped silently.
- ``add_listener`` sees every publication (inside ``publish``, before any subscriber); the
  ``on_deliver`` hook sees each event a ``get`` returns or a watch is called with. Both must be
  cheap and not block; what they raise is logged, never passed on.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from functools import lru_cache

from turnqueue.domain import CancellationStatus, LogBatch, OutputChunk, OutputMark, QueueStatus

log = logging.getLogger(__name__)


class EventKind(StrEnum):
    SESSION = "session"  # the session's durable revision moved (state, turns, clarification)
    QUEUE = "queue"  # the queue status revision moved (Q13)
    CANCELLATION = "cancellation"  # a C2 transition; payload is the CancellationStatus
    #: streamed turn output (no revision, R1); payload: the OutputChunk, or for another
    #: instance's turn the OutputMark (its readers read the log)
    OUTPUT = "output"
    ITEMS = "items"  # a batch of a turn's log committed (O1); payload is the LogBatch
    RESYNC = "resync"  # the bus lost events for this session (e.g. a LISTEN reconnect)


@dataclass(frozen=True, slots=True)
class Event:
    kind: EventKind
    session_id: str
    revision: int = 0
    cancellation: CancellationStatus | None = None
    chunk: OutputChunk | None = None
    mark: OutputMark | None = None
    batch: LogBatch | None = None
    #: QUEUE: the status the transaction committed, when it read it (``Core.change``)
    queue: QueueStatus | None = None
    relayed: bool = False  # heard from another instance (M4), not to be sent on again
    #: when it was made (``time.perf_counter``): events are made as they are published, so the
    #: metrics time a delivery from here without keeping any event (U3)
    at: float = field(default_factory=time.perf_counter, compare=False, repr=False)


@lru_cache(maxsize=64)
def _kinds(kinds: frozenset[EventKind]) -> frozenset[EventKind]:
    """The kinds a subscription takes, RESYNC included: one shared set per combination."""
    return kinds | {EventKind.RESYNC}


class SubscriberLagged(Exception):
    """The subscriber fell behind its buffer; it must resubscribe and read a fresh snapshot."""


class Subscription:
    """One subscriber's bounded buffer of events for one session; one reader at a time. The
    buffer exists only while it holds events: most standing subscriptions hold none."""

    __slots__ = ("_bus", "_events", "_lagged", "_size", "_waiter", "kinds", "session_id")

    def __init__(self, bus: EventBus, session_id: str, kinds: frozenset[EventKind], size: int):
        self.session_id = session_id
        self.kinds = kinds
        self._bus = bus
        self._size = size
        self._events: deque[Event] | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._lagged = False

    def _offer(self, event: Event) -> None:
        if self._lagged:
            return
        if self._events is None:
            self._events = deque()
        if len(self._events) >= self._size:
            # Free the memory now and wake the reader so it learns about it promptly.
            self._lagged = True
            self._events = deque((Event(EventKind.RESYNC, self.session_id),))
        else:
            self._events.append(event)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def pending(self) -> int:
        return len(self._events) if self._events is not None else 0

    async def get(self) -> Event:
        while not self._events:
            if self._waiter is not None:
                raise RuntimeError("a bus subscription has one reader at a time")
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        event = self._events.popleft()
        if not self._events:
            self._events = None
        if self._lagged:
            raise SubscriberLagged(f"subscriber of session {self.session_id} fell behind")
        self._bus._delivered(event)
        return event

    def close(self) -> None:
        self._bus._remove(self)

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Watch:
    """A subscriber that is called, not read: ``publish`` calls ``callback`` with each event of
    its session and kinds, in order (``resolvers/feeds.py``). It must be quick and not block."""

    __slots__ = ("_bus", "callback", "kinds", "session_id")

    def __init__(
        self,
        bus: EventBus,
        session_id: str,
        kinds: frozenset[EventKind],
        callback: Callable[[Event], None],
    ) -> None:
        self.session_id = session_id
        self.kinds = kinds
        self.callback = callback
        self._bus = bus

    def _offer(self, event: Event) -> None:
        try:
            self.callback(event)
        except Exception:
            log.exception("event watcher failed for %s", event)
        self._bus._delivered(event)

    def close(self) -> None:
        self._bus._remove(self)


class EventBus:
    def __init__(
        self, buffer_size: int = 256, on_deliver: Callable[[Event], None] | None = None
    ) -> None:
        #: events a subscriber may fall behind before it is told to resync (R3)
        self.buffer_size = buffer_size
        self._subscribers: defaultdict[str, set[Subscription | Watch]] = defaultdict(set)
        self._listeners: list[Callable[[Event], None]] = []
        self._on_deliver = on_deliver

    def subscribe(self, session_id: str, kinds: Iterable[EventKind]) -> Subscription:
        """Register now (synchronously), so a snapshot read after this call can miss nothing."""
        sub = Subscription(self, session_id, _kinds(frozenset(kinds)), self.buffer_size)
        self._subscribers[session_id].add(sub)
        return sub

    def watch(
        self, session_id: str, kinds: Iterable[EventKind], callback: Callable[[Event], None]
    ) -> Watch:
        """Register ``callback`` now (see :class:`Watch`); RESYNC is always among its kinds."""
        watch = Watch(self, session_id, _kinds(frozenset(kinds)), callback)
        self._subscribers[session_id].add(watch)
        return watch

    def add_listener(self, listener: Callable[[Event], None]) -> None:
        """Listeners see every event (metrics, cross-instance relays)."""
        self._listeners.append(listener)

    def publish(self, event: Event) -> None:
        for listener in self._listeners:
            try:
                listener(event)
            except Exception:
                log.exception("event listener failed for %s", event)
        for sub in tuple(self._subscribers.get(event.session_id, ())):
            if event.kind in sub.kinds:
                sub._offer(event)

    def _delivered(self, event: Event) -> None:
        if self._on_deliver is None:
            return
        try:
            self._on_deliver(event)
        except Exception:
            log.exception("delivery hook failed for %s", event)

    def watched(self, session_id: str, kind: EventKind) -> bool:
        """Whether a subscriber here takes ``kind`` events of the session."""
        return any(kind in sub.kinds for sub in self._subscribers.get(session_id, ()))

    def sessions(self) -> list[str]:
        """Sessions that have subscribers here."""
        return list(self._subscribers)

    def subscriber_count(self) -> int:
        return sum(len(subs) for subs in self._subscribers.values())

    def _remove(self, sub: Subscription | Watch) -> None:
        subs = self._subscribers.get(sub.session_id)
        if subs is not None:
            subs.discard(sub)
            if not subs:
                del self._subscribers[sub.session_id]
