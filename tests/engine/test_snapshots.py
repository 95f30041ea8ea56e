"""Shared snapshot reads for subscribers (R3 stays exact; P3 fan-out costs one read per event)."""

from __future__ import annotations

import asyncio

from turnqueue.bus import Event, EventKind
from turnqueue.domain import QueueStatus
from turnqueue.engine.reads import EventReads


def status(revision: int) -> QueueStatus:
    return QueueStatus("s", True, None, (), (), None, revision)


class Db:
    """Stands in for the database: a read returns the committed revision when it runs."""

    def __init__(self) -> None:
        self.committed = 0
        self.reads = 0
        self.gate = asyncio.Event()

    async def read(self) -> QueueStatus:
        self.reads += 1
        seen = self.committed
        await self.gate.wait()
        return status(seen)


async def test_r3_concurrent_subscribers_share_one_read_that_includes_the_event() -> None:
    shared, db = EventReads(), Db()
    db.committed = 1
    event = Event(EventKind.QUEUE, "s", 1)
    readers = [asyncio.create_task(shared.read(event, ("q",), db.read)) for _ in range(100)]
    await asyncio.sleep(0)
    db.gate.set()
    results = await asyncio.gather(*readers)
    assert db.reads == 1
    assert {r.revision for r in results} == {1}


async def test_r3_a_read_started_before_an_event_never_serves_it() -> None:
    shared, db = EventReads(), Db()
    db.committed = 1
    first = Event(EventKind.QUEUE, "s", 1)
    early = asyncio.create_task(shared.read(first, ("q",), db.read))
    for _ in range(10):  # let that read start (it sees revision 1)
        await asyncio.sleep(0)
    assert db.reads == 1
    db.committed = 2
    second = Event(EventKind.QUEUE, "s", 2)
    late = asyncio.create_task(shared.read(second, ("q",), db.read))
    await asyncio.sleep(0)
    db.gate.set()
    assert (await early).revision == 1
    assert (await late).revision == 2  # a read of its own, started after the event
    assert db.reads == 2


async def test_r3_a_read_is_kept_only_while_under_way() -> None:
    shared, db = EventReads(), Db()
    db.committed = 5
    db.gate.set()
    event = Event(EventKind.QUEUE, "s", 5)
    assert (await shared.read(event, ("q",), db.read)).revision == 5
    assert (await shared.read(event, ("q",), db.read)).revision == 5  # done: read again
    assert (await shared.read(None, ("q",), db.read)).revision == 5  # no event: own read
    assert db.reads == 3
