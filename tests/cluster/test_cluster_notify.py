"""What one instance sends the others (M4, issue 23 finding 1), through the store seam: a store
whose ``notify`` refuses what PostgreSQL refuses, with the real :class:`Cluster` and bus.

- every notification the cluster builds fits NOTIFY's payload limit, whatever the output's size
  and characters (output travels as a pointer to the log);
- a batch that fails is sent one by one, so one notification that cannot be sent never takes
  the others with it;
- a request too large to forward is refused with INVALID_INPUT, and nothing is sent.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import pytest

from turnqueue.bus import Event, EventBus, EventKind
from turnqueue.domain import LogBatch, OutputChunk, TurnStatus, new_id
from turnqueue.engine.cluster import Cluster, ClusterHooks
from turnqueue.store.notify import MAX_PAYLOAD_BYTES

#: PostgreSQL's own limit (``payload string too long``), above the one turnqueue keeps.
PG_LIMIT = 8_000


class RefusingStore:
    """The store seam: records what is sent; refuses a batch holding a payload over PG_LIMIT
    bytes or naming a session in ``poisoned`` (as PostgreSQL refuses the whole statement)."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.refused: list[list[str]] = []
        self.poisoned: set[str] = set()
        self.changed = asyncio.Event()

    def listen(self, _on_payload: Any, _on_resync: Any) -> Any:
        return _Listener()

    @asynccontextmanager
    async def lease(self) -> AsyncIterator[Any]:
        yield _LeaseTx()

    async def notify(self, payloads: Sequence[str]) -> None:
        self.changed.set()
        if any(len(p.encode()) > PG_LIMIT or any(s in p for s in self.poisoned) for p in payloads):
            self.refused.append(list(payloads))
            raise ValueError("payload string too long")
        self.sent.extend(payloads)


class _Listener:
    reconnects = 0

    async def start(self) -> None:
        pass

    async def aclose(self) -> None:
        pass


class _LeaseTx:
    async def register_instance(self, _instance: int) -> None:
        pass

    async def unregister_instance(self, _instance: int) -> None:
        pass


@pytest.fixture
async def cluster() -> AsyncIterator[tuple[Cluster, EventBus, RefusingStore]]:
    store = RefusingStore()
    bus = EventBus()

    async def nothing(*_args: object) -> None:
        return None

    hooks = ClusterHooks(handlers={}, on_orphans=nothing, on_expelled=nothing)
    cluster = Cluster(
        instance=7,
        lease=3_600.0,  # no heartbeat during the test
        store=store,  # type: ignore[arg-type]
        bus=bus,
        spawn=lambda coro, _name: asyncio.ensure_future(coro),  # type: ignore[arg-type,return-value]
        hooks=hooks,
    )
    await cluster.start()
    try:
        yield cluster, bus, store
    finally:
        await cluster.aclose()


async def _sent(store: RefusingStore, count: int) -> None:
    async with asyncio.timeout(10):
        while len(store.sent) < count:
            store.changed.clear()
            await store.changed.wait()


async def test_m4_every_notification_fits_the_limit_whatever_the_output(
    cluster: tuple[Cluster, EventBus, RefusingStore],
) -> None:
    """Issue 23 (1): output was sent as its text, cut at 937 characters; JSON escapes an emoji
    to 12 bytes, so a piece was 11 KB, over the limit. Now a pointer: the turn and the end."""
    _, bus, store = cluster
    sid, turn = new_id(), new_id()
    texts = ["😀" * 20_000, '\x00"\\' * 30_000, "é" * 100_000, ""]
    offset = 0
    for i, text in enumerate(texts):
        done = i == len(texts) - 1
        status = TurnStatus.COMPLETED if done else TurnStatus.RUNNING
        chunk = OutputChunk(sid, turn, offset, text, done, status)
        bus.publish(Event(EventKind.OUTPUT, sid, chunk=chunk))
        offset += len(text)
    bus.publish(Event(EventKind.ITEMS, sid, batch=LogBatch(sid, turn, 10**15)))
    await _sent(store, len(texts) + 1)
    assert store.refused == []
    assert all(len(p.encode()) <= MAX_PAYLOAD_BYTES for p in store.sent)
    assert all("😀" not in p and "\\ud83d" not in p for p in store.sent)  # no text at all
    assert f'"n":{offset}' in store.sent[len(texts) - 1]  # the log's end, in characters


async def test_m4_one_notification_that_cannot_be_sent_takes_no_other_with_it(
    cluster: tuple[Cluster, EventBus, RefusingStore], caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 23 (1): a failed NOTIFY dropped the whole batch (every event queued with it)."""
    _, bus, store = cluster
    sessions = [new_id() for _ in range(5)]
    store.poisoned.add(sessions[2])
    with caplog.at_level(logging.WARNING, logger="turnqueue.engine.cluster"):
        for end, sid in enumerate(sessions, start=1):  # queued together: one batch
            bus.publish(Event(EventKind.ITEMS, sid, batch=LogBatch(sid, new_id(), end)))
        await _sent(store, 4)
        await asyncio.sleep(0)  # the loop logs the refused one right after the others
    assert len(store.refused[0]) == 5  # they went as one batch first
    delivered = [sid for sid in sessions if any(sid in p for p in store.sent)]
    assert delivered == sessions[:2] + sessions[3:]  # in order, the refused one left out
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and sessions[2] in errors[0].getMessage()
