"""``resolvers/feeds.py``: snapshot feeds push the current state, then only newer ones (R3);
events without their status (another instance's, M4) are read once for a burst; a RESYNC, a
failing read or a failing consumer ends the feed and closes its watch; and the buffered reader
of the executed path resyncs when it falls behind."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import pytest
from api_helpers import Api
from graphql import GraphQLError

from turnqueue.bus import Event, EventKind, Watch
from turnqueue.domain import CancellationStatus as DomainCancellation
from turnqueue.resolvers.context import Context
from turnqueue.resolvers.feeds import (
    RESYNC_MESSAGE,
    CancellationFeed,
    Feed,
    QueueFeed,
    states,
)
from turnqueue.timeouts import within


class Sink:
    def __init__(self) -> None:
        self.revisions: list[int] = []
        self.failures: list[Exception] = []
        self.changed = asyncio.Event()

    def emit(self, state: Any) -> None:
        self.revisions.append(state.revision)
        self.changed.set()

    def fail(self, error: Exception) -> None:
        self.failures.append(error)
        self.changed.set()

    async def until(self, done: Any) -> None:
        while not done():
            self.changed.clear()
            await within(self.changed.wait(), 5)


async def opened(api: Api, kind: type[Feed[Any]], sink: Sink) -> tuple[str, Feed[Any]]:
    sid = await api.create_session()
    feed = kind(Context(engine=api.engine, principal="alice"), sid, sink.emit, sink.fail)
    await feed.open()
    return sid, feed


def watches(api: Api, sid: str) -> int:
    return sum(isinstance(s, Watch) for s in api.engine.bus._subscribers.get(sid, ()))


async def test_r3_a_queue_feed_pushes_the_snapshot_then_only_newer_states(api: Api) -> None:
    sink = Sink()
    sid, feed = await opened(api, QueueFeed, sink)
    snapshot = await api.engine.queue_status(sid)
    assert sink.revisions == [snapshot.revision] and watches(api, sid) == 1
    for revision in (snapshot.revision + 5, snapshot.revision + 3, snapshot.revision + 7):
        status = replace(snapshot, revision=revision)
        api.engine.bus.publish(Event(EventKind.QUEUE, sid, revision, queue=status))
    assert sink.revisions == [snapshot.revision, snapshot.revision + 5, snapshot.revision + 7]
    feed.close()
    assert watches(api, sid) == 0


async def test_r3_m4_a_burst_of_events_without_their_status_is_read_once(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Events announced by another instance carry no status: the feed reads, one read at a
    time, covering every event announced meanwhile, and pushes what it read."""
    sink = Sink()
    sid, feed = await opened(api, QueueFeed, sink)
    current = await api.engine.queue_status(sid)
    reads: list[int] = []
    reading = asyncio.Event()
    release = asyncio.Event()

    async def read(session_id: str, event: Event) -> Any:
        reads.append(event.revision)
        reading.set()
        await release.wait()
        return replace(current, revision=max(reads))

    monkeypatch.setattr(api.engine, "queue_status_after", read)
    base = current.revision
    api.engine.bus.publish(Event(EventKind.QUEUE, sid, base + 1))
    await within(reading.wait(), 5)
    for revision in range(base + 2, base + 11):  # a burst while the first read runs
        api.engine.bus.publish(Event(EventKind.QUEUE, sid, revision))
    for _ in range(20):  # turns of the loop in which a second read would start
        await asyncio.sleep(0)
    assert reads == [base + 1]  # one read in flight; the burst waits for it
    release.set()
    await sink.until(lambda: sink.revisions[-1] >= base + 10)
    assert reads == [base + 1, base + 10]  # then one more, covering the whole burst
    assert sink.revisions == [base, base + 1, base + 10]
    feed.close()


async def test_r3_a_resync_or_a_failing_read_ends_the_feed(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    sink = Sink()
    sid, _ = await opened(api, CancellationFeed, sink)
    api.engine.bus.publish(Event(EventKind.RESYNC, sid))
    assert [str(e) for e in sink.failures] == [RESYNC_MESSAGE] and watches(api, sid) == 0
    api.engine.bus.publish(
        Event(EventKind.CANCELLATION, sid, 2**40, DomainCancellation(sid, True, 2**40))
    )
    assert len(sink.revisions) == 1  # nothing after the end

    other = Sink()
    sid, _ = await opened(api, QueueFeed, other)

    async def broken(*_: Any) -> Any:
        raise RuntimeError("the database is away")

    monkeypatch.setattr(api.engine, "queue_status_after", broken)
    api.engine.bus.publish(Event(EventKind.QUEUE, sid, 2**40))
    await other.until(lambda: other.failures)
    assert isinstance(other.failures[0], RuntimeError) and watches(api, sid) == 0


async def test_a_feed_closed_while_it_reads_cancels_the_read_and_pushes_nothing(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    sink = Sink()
    sid, feed = await opened(api, QueueFeed, sink)
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def hanging(*_: Any) -> Any:
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    monkeypatch.setattr(api.engine, "queue_status_after", hanging)
    api.engine.bus.publish(Event(EventKind.QUEUE, sid, 2**40))
    await within(started.wait(), 5)
    feed.close()
    await within(cancelled.wait(), 5)
    assert len(sink.revisions) == 1 and sink.failures == [] and watches(api, sid) == 0


async def test_a_consumer_that_fails_ends_the_feed_with_its_error(api: Api) -> None:
    failures: list[Exception] = []

    def refuse(_: Any) -> None:
        raise ValueError("cannot render it")

    sid = await api.create_session()
    feed = CancellationFeed(
        Context(engine=api.engine, principal="alice"), sid, refuse, failures.append
    )
    await feed.open()  # the snapshot is pushed, and refused
    assert [type(e) for e in failures] == [ValueError] and watches(api, sid) == 0


async def test_r3_the_buffered_reader_gets_the_states_then_resync_when_too_far_behind(
    api: Api,
) -> None:
    """The executed path's reader (``states``): states in order; a reader ``size`` states
    behind gets the resync error instead of more memory, and the feed is closed."""
    sid = await api.create_session()
    ctx = Context(engine=api.engine, principal="alice")
    stream = states(QueueFeed, ctx, sid, after=-1, size=3)
    first = await anext(stream)
    base = first.revision
    status = await api.engine.queue_status(sid)
    for revision in range(base + 1, base + 3):  # within the buffer
        api.engine.bus.publish(
            Event(EventKind.QUEUE, sid, revision, queue=replace(status, revision=revision))
        )
    assert [(await anext(stream)).revision for _ in range(2)] == [base + 1, base + 2]
    for revision in range(base + 3, base + 10):  # a burst the reader does not take
        api.engine.bus.publish(
            Event(EventKind.QUEUE, sid, revision, queue=replace(status, revision=revision))
        )
    with pytest.raises(GraphQLError, match="resubscribe"):
        await anext(stream)
    assert watches(api, sid) == 0
    await stream.aclose()
