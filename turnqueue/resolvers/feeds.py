"""Snapshot feeds: a session's queue or cancellation status pushed to a consumer as each new
state is published (R3), without a task or a buffer of their own.

A feed watches the bus (``EventBus.watch``: called inside ``publish``), reads and pushes the
current state, then pushes every newer state in revision order. Most states come with their event (a
queue event carries the status its transaction read, a cancellation event its status); a queue
event without one (another instance's change, M4) is read by a task the feed owns. A RESYNC ends
the feed with the resync error. The fan-out consumes feeds directly; Strawberry's execution reads
one through the bounded buffer of :func:`states`.

Hazards:
- The watch is registered before the snapshot is read, so no change falls between the two; a
  state pushed while the read is in flight makes its result stale, and the revision check drops it.
- ``emit`` and ``fail`` run inside ``publish`` (or the feed's read task): they must be quick and
  must not block. A failing ``emit`` ends the feed with its error (``fail``).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncGenerator, Callable
from typing import Generic, Protocol, TypeVar

from graphql import GraphQLError

from turnqueue import domain
from turnqueue.bus import Event, EventKind, SubscriberLagged, Subscription, Watch
from turnqueue.resolvers.context import Context
from turnqueue.schema.queue import CancellationStatus, QueueStatus

RESYNC_MESSAGE = "this subscription fell behind; resubscribe to get a fresh snapshot"


def resync_error() -> GraphQLError:
    """R3: the subscriber must resubscribe for a fresh snapshot (``extensions.code`` RESYNC)."""
    return GraphQLError(RESYNC_MESSAGE, extensions={"code": "RESYNC"})


async def next_event(sub: Subscription) -> Event:
    """The subscription's next event; the resync error when it fell behind or the bus lost
    events (a RESYNC event)."""
    try:
        event = await sub.get()
    except SubscriberLagged:
        raise resync_error() from None
    if event.kind is EventKind.RESYNC:
        raise resync_error()
    return event


class Revisioned(Protocol):
    @property
    def revision(self) -> int: ...


T = TypeVar("T", bound=Revisioned)
Emit = Callable[[T], None]
Fail = Callable[[Exception], None]


class Feed(Generic[T]):
    """One session's states of one kind, pushed to ``emit`` (see the module's docstring)."""

    kinds: tuple[EventKind, ...] = ()

    def __init__(
        self, ctx: Context, session_id: str, emit: Emit[T], fail: Fail, after: int = -1
    ) -> None:
        self.session_id = session_id
        self._ctx = ctx
        self._emit = emit
        self._fail = fail
        self._last = after  # the newest revision pushed (a reconnect's: it had it, O3)
        self._watch: Watch | None = None
        self._closed = False

    async def open(self) -> None:
        """Watch, then read and push the current state (the caller has authorised the read)."""
        self._watch = self._ctx.engine.bus.watch(self.session_id, self.kinds, self._on_event)
        try:
            await self._snapshot()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Nothing is pushed after this (idempotent)."""
        self._closed = True
        if self._watch is not None:
            self._watch.close()
            self._watch = None

    async def _snapshot(self) -> None:
        raise NotImplementedError

    def _on_event(self, event: Event) -> None:
        if self._closed:
            return
        if event.kind is EventKind.RESYNC:
            self._end(resync_error())
        else:
            self._on_change(event)

    def _on_change(self, event: Event) -> None:
        raise NotImplementedError

    def _push(self, revision: int, state: Callable[[], T]) -> None:
        """Push ``state()`` if ``revision`` is newer than the last one pushed (R3)."""
        if self._closed or revision <= self._last:
            return
        self._last = revision
        try:
            self._emit(state())
        except Exception as error:
            self._end(error)

    def _end(self, error: Exception) -> None:
        if not self._closed:
            self.close()
            self._fail(error)


class QueueFeed(Feed[QueueStatus]):
    """queueStatusChanged's states (Q13: the status as a whole moves with its revision)."""

    kinds = (EventKind.QUEUE,)

    def __init__(
        self, ctx: Context, session_id: str, emit: Emit[QueueStatus], fail: Fail, after: int = -1
    ) -> None:
        super().__init__(ctx, session_id, emit, fail, after)
        #: the newest event that announced a revision without its status
        self._wanted = Event(EventKind.QUEUE, session_id, -1)
        self._reading: asyncio.Task[None] | None = None

    def close(self) -> None:
        super().close()
        if self._reading is not None and self._reading is not asyncio.current_task():
            self._reading.cancel()

    async def _snapshot(self) -> None:
        self._offer(await self._ctx.engine.queue_status(self.session_id))

    def _offer(self, status: domain.QueueStatus) -> None:
        self._push(status.revision, lambda: QueueStatus.from_domain(status))

    def _on_change(self, event: Event) -> None:
        if event.queue is not None:  # the status its own transaction read
            self._offer(event.queue)
        elif event.revision > self._last:
            if event.revision > self._wanted.revision:
                self._wanted = event
            if self._reading is None:
                self._reading = asyncio.create_task(
                    self._read(), name=f"turnqueue.feed queue {self.session_id}"
                )

    async def _read(self) -> None:
        """Read until the newest announced revision is covered (one read at a time; a read is
        shared with the session's other readers, ``Engine.queue_status_after``)."""
        try:
            covered = -1
            while not self._closed and self._wanted.revision > max(covered, self._last):
                wanted = self._wanted
                covered = wanted.revision
                status = await self._ctx.engine.queue_status_after(self.session_id, wanted)
                self._offer(status)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            self._end(error)
        finally:
            self._reading = None


class CancellationFeed(Feed[CancellationStatus]):
    """cancellationChanged's states: each C2 transition as its event carried it."""

    kinds = (EventKind.CANCELLATION,)

    async def _snapshot(self) -> None:
        self._offer(await self._ctx.engine.cancellation(self.session_id))

    def _offer(self, status: domain.CancellationStatus) -> None:
        self._push(status.revision, lambda: CancellationStatus.from_domain(status))

    def _on_change(self, event: Event) -> None:
        if event.cancellation is not None:
            self._offer(event.cancellation)


async def states(
    kind: type[Feed[T]], ctx: Context, session_id: str, after: int, size: int
) -> AsyncGenerator[T, None]:
    """The states of the session's ``kind`` feed after revision ``after``, as an async iterator
    (for Strawberry's execution; the caller has authorised the read), from a buffer of at most
    ``size``: a reader further behind gets the resync error (R3) instead of more memory."""
    buffer: deque[T] = deque()
    ended: list[Exception] = []
    waiter: asyncio.Future[None] | None = None

    def wake() -> None:
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def emit(state: T) -> None:
        if len(buffer) >= size:
            buffer.clear()
            raise resync_error()  # the feed ends and passes it to ``fail``
        buffer.append(state)
        wake()

    def fail(error: Exception) -> None:
        ended.append(error)
        wake()

    feed = kind(ctx, session_id, emit, fail, after)
    await feed.open()
    try:
        while True:
            if buffer:
                state = buffer.popleft()
                ctx.renew_loaders()  # a fresh DataLoader cache for each state's execution
                ctx.event_id = str(state.revision)  # O3: the SSE id
                yield state
            elif ended:
                raise ended[0]
            else:
                waiter = asyncio.get_running_loop().create_future()
                try:
                    await waiter
                finally:
                    waiter = None
    finally:
        feed.close()
