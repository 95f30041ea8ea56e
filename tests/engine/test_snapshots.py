"""Shared snapshot reads for subscribers (R3 stays exact; P3 fan-out costs one read per event)."""

from __future__ import annotations

import asyncio

from turnqueue.bus import Event, EventBus, EventKind
from turnqueue.domain import QueueStatus
from turnqueue.engine.reads import SharedReads


def status(revision: int) -> QueueStatus:
    return QueueStatus("s", True, None, (), (), None, revision)


class Db:
    """Stands in for the database: a read returns the committed revision when it runs."""

    def __init__(self) -> None:
        self.committed = 0
        self.reads = 0
        self.gate = asyncio.Event()

    async def read(self, _sid: str) -> QueueStatus:
        self.reads += 1
        seen = self.committed
        await self.gate.wait()
        return status(seen)


async def test_r3_concurrent_subscribers_share_one_read_that_includes_the_event() -> None:
    bus, db = EventBus(), Db()
    shared = SharedReads(bus, db.read)
    db.committed = 1
    bus.publish(Event(EventKind.QUEUE, "s", 1))
    readers = [asyncio.create_task(shared.queue_status_after("s", 1)) for _ in range(100)]
    await asyncio.sleep(0)
    db.gate.set()
    results = await asyncio.gather(*readers)
    assert db.reads == 1
    assert {r.revision for r in results} == {1}


async def test_r3_a_read_started_before_an_event_never_serves_it() -> None:
    bus, db = EventBus(), Db()
    shared = SharedReads(bus, db.read)
    db.committed = 1
    bus.publish(Event(EventKind.QUEUE, "s", 1))
    early = asyncio.create_task(shared.queue_status_after("s", 1))
    for _ in range(10):  # let that read start (it sees revision 1)
        await asyncio.sleep(0)
    assert db.reads == 1
    db.committed = 2
    bus.publish(Event(EventKind.QUEUE, "s", 2))
    late = asyncio.create_task(shared.queue_status_after("s", 2))
    await asyncio.sleep(0)
    db.gate.set()
    assert (await early).revision == 1
    assert (await late).revision == 2  # a read of its own, started after the event
    assert db.reads == 2


async def test_r3_an_event_not_yet_seen_here_is_read_afresh() -> None:
    bus, db = EventBus(), Db()
    shared = SharedReads(bus, db.read)
    db.committed, db.gate = 5, asyncio.Event()
    db.gate.set()
    assert (await shared.queue_status_after("s", 5)).revision == 5  # no event noted: own read
    assert db.reads == 1
